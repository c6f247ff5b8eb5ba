"""The mutation generators: :class:`Mutator` draws one random mutation of a given kind of an
array's files (chunk data, shards and their indexes, checksums, metadata documents)."""

from __future__ import annotations

import json
import random
import re
import struct
from typing import Any, Callable, Iterable, Iterator, Sequence

from .arrays import MISSING, ArraySpec, StoredArray, crc32c_bytes, shard_layout
from .edits import (
    CopyFile,
    CreateFile,
    Delete,
    JsonEdit,
    MakeDirectory,
    Mutation,
    Reencode,
    Splice,
    Swap,
    WriteFile,
    Xor,
)


# JSON texts a metadata value is replaced with: Python expressions whose value is the text (so the
# reproducers stay short for the huge ones).
_JSON_VALUE_EXPRS: tuple[str, ...] = (
    "'null'", "'true'", "'false'", "'0'", "'-1'", "'1'", "'3'", "'255'", "'65536'",
    "str(2**31)", "str(2**32)", "str(2**53 + 1)", "str(2**63 - 1)", "str(2**63)", "str(2**64 - 1)",
    "str(2**64)", "str(-2**63)", "str(-2**63 - 1)", "str(10**30)", "'1e308'", "'-1e308'", "'1e400'",
    "'0.5'", "'-0.0'", "'NaN'", "'Infinity'", "'-Infinity'", "'\"NaN\"'", "'\"\"'", "'\"x\"'",
    "'\"int32\"'", "'\"bfloat16\"'", "'\"zstd\"'", "'\"crc32c\"'", "'\"start\"'", "'\"\\\\u0000\"'",
    "'\"\\\\ud800\"'", "'[]'", "'{}'", "'[0]'", "'[-1]'", "'[1]'", "'[1, 2]'", "'[null]'", "'[\"a\"]'",
    "'[[1]]'", "'{\"name\": \"bytes\"}'", "'{\"name\": \"crc32c\"}'", "'[{\"name\": \"crc32c\"}]'",
    "'{\"name\": \"sharding_indexed\", \"configuration\": {}}'", "'{\"configuration\": 1}'",
    "'[{\"id\": \"delta\", \"dtype\": \"<i8\"}]'", "'{\"id\": \"zstd\", \"level\": 99}'",
    "'{\"id\": \"blosc\", \"cname\": \"nope\", \"clevel\": 5, \"shuffle\": 7}'", "'{\"id\": \"unknown\"}'",
    "'{\"name\": \"transpose\", \"configuration\": {\"order\": [0, 0]}}'", "json.dumps([2] * 40)", "json.dumps([2**62, 2**62])", "json.dumps([2**31] * 3)",
    "json.dumps(list(range(100000)))", "json.dumps([{}] * 1000)", "'\"' + 'x' * 1000000 + '\"'",
    "'[' * 100 + ']' * 100", "'[' * 100000 + ']' * 100000", "'{\"a\": ' * 50000 + '1' + '}' * 50000",
)


# Strings a metadata string is replaced with by "meta_plausible": names that mean something to a
# Zarr reader, so the edited document often stays valid and describes another array.
_PLAUSIBLE_STRINGS: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
    "float64", "complex64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2", "string", "r16",
    "|b1", "|i1", "<i2", ">i2", "<i4", ">i8", "|u1", "<u2", "<u8", "<f2", ">f4", "<f8", "<c8", ">c16", "|S4",
    "<U3", "<M8[ns]", "|O", "|V8", "bytes", "zstd", "gzip", "blosc", "crc32c", "transpose", "sharding_indexed",
    "zlib", "lz4", "bz2", "lzma", "vlen-utf8", "little", "big", "C", "F", "start", "end", ".", "/", "", "array",
    "group", "regular", "rectilinear", "default", "v2", "noshuffle", "shuffle", "bitshuffle", "blosclz", "lz4hc",
    "snappy",
)


def _json_paths(doc: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """Every member path in a JSON document (not the root)."""
    if isinstance(doc, dict):
        items: Iterable[tuple[str | int, Any]] = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return
    for k, v in items:
        yield prefix + (k,)
        yield from _json_paths(v, prefix + (k,))


def _json_at(doc: Any, path: Sequence[str | int]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _payload_range(spec: ArraySpec, data: bytes) -> tuple[int, int]:
    layout = shard_layout(spec, data)
    assert layout is not None
    lo, hi = layout.payload
    return lo, (len(data) if hi < 0 else hi)


class Mutator:
    """Draws mutations of an array's files (one generator per mutation kind)."""

    def __init__(self, corpus: Sequence[StoredArray]) -> None:
        self.corpus = corpus
        self.kinds: dict[str, tuple[Callable[[random.Random, StoredArray], Mutation | None],
                                    Callable[[StoredArray], bool]]] = {
            "bitflip": (self.bitflip, self._has_chunks),
            "bitflip_every_chunk": (self.bitflip_every_chunk, self._has_two_chunks),
            "byteflip": (self.byteflip, self._has_chunks),
            "truncate": (self.truncate, self._has_chunks),
            "extend": (self.extend, self._has_chunks),
            "duplicate_bytes": (self.duplicate, self._has_chunks),
            "splice_same_array": (self.splice_same, self._has_two_chunks),
            "splice_other_array": (self.splice_other, self._has_chunks),
            "replace_same_array": (self.replace_same, self._has_two_chunks),
            "replace_other_array": (self.replace_other, self._has_chunks),
            "swap_chunks": (self.swap, self._has_two_chunks),
            "empty_file": (self.empty, self._has_chunks),
            "delete_chunk": (self.delete, self._has_chunks),
            "add_file": (self.add_file, lambda a: bool(a.spec.shape)),
            "make_directory": (self.make_directory, self._always),
            "shard_shift_payload": (self.shard_shift, self._is_sharded),
            "shard_rotate_payload": (self.shard_rotate, self._is_sharded),
            "shard_index_flip": (self.shard_index_flip, self._is_sharded),
            "shard_index_entry": (self.shard_index_entry, self._is_sharded),
            "crc_fixed_flip": (self.crc_fixed_flip, lambda a: a.spec.crc32c and self._has_chunks(a)),
            "crc_fixed_truncate": (self.crc_fixed_truncate,
                                   lambda a: a.spec.crc32c and a.spec.shards is None and self._has_chunks(a)),
            "meta_flip": (self.meta_flip, self._always),
            "meta_truncate": (self.meta_truncate, self._always),
            "meta_value": (self.meta_value, self._always),
            "meta_plausible": (self.meta_plausible, self._always),
            "meta_remove_key": (self.meta_remove_key, self._always),
            "meta_add_key": (self.meta_add_key, self._always),
            "meta_non_utf8": (self.meta_non_utf8, self._always),
        }

    # -- applicability ---------------------------------------------------------------------------
    @staticmethod
    def _always(arr: StoredArray) -> bool:
        return True

    @staticmethod
    def _has_chunks(arr: StoredArray) -> bool:
        return bool(arr.chunk_keys)

    @staticmethod
    def _has_two_chunks(arr: StoredArray) -> bool:
        return len(arr.chunk_keys) >= 2

    @staticmethod
    def _is_sharded(arr: StoredArray) -> bool:
        return arr.spec.shards is not None and bool(arr.chunk_keys)

    def applicable(self, arr: StoredArray) -> list[str]:
        return [kind for kind, (_, ok) in self.kinds.items() if ok(arr)]

    def draw(self, rng: random.Random, arr: StoredArray, kind: str) -> Mutation | None:
        """A mutation of the given kind (None when the draw could not produce a change)."""
        return self.kinds[kind][0](rng, arr)

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def _chunk(rng: random.Random, arr: StoredArray) -> tuple[str, bytes]:
        key = rng.choice(arr.chunk_keys)
        return key, arr.files[key]

    @staticmethod
    def _flips(rng: random.Random, lo: int, hi: int, count: int, bits: bool) -> tuple[tuple[int, int], ...]:
        offsets = sorted(rng.sample(range(lo, hi), min(count, hi - lo)))
        return tuple((o, (1 << rng.randrange(8)) if bits else rng.randrange(1, 256)) for o in offsets)

    def _other_array_chunk(self, rng: random.Random, arr: StoredArray) -> tuple[StoredArray, str] | None:
        donors = [a for a in self.corpus if a is not arr and a.chunk_keys]
        if not donors:
            return None
        donor = rng.choice(donors)
        return donor, rng.choice(donor.chunk_keys)

    # -- chunk data -------------------------------------------------------------------------------
    def bitflip(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        if not data:
            return None
        flips = self._flips(rng, 0, len(data), rng.choice((1, 1, 2, 3, 8)), bits=True)
        return Mutation("bitflip", key, f"flip bits {flips} of {key!r}", (Xor(key, flips),))

    def bitflip_every_chunk(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        """One flipped bit in every stored file: many failing chunks in one read."""
        ops = tuple(Xor(key, self._flips(rng, 0, len(arr.files[key]), 1, bits=True))
                    for key in arr.chunk_keys if arr.files[key])
        return Mutation("bitflip_every_chunk", arr.chunk_keys[0], f"flip one bit in each of {len(ops)} files", ops)

    def byteflip(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        if not data:
            return None
        # often near the ends, where headers, sizes and checksums live
        span = rng.choice(((0, len(data)), (0, min(16, len(data))), (max(0, len(data) - 16), len(data))))
        flips = self._flips(rng, span[0], span[1], rng.choice((1, 2, 4, 8)), bits=False)
        return Mutation("byteflip", key, f"xor bytes {flips} of {key!r}", (Xor(key, flips),))

    def truncate(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        if len(data) < 2:
            return None
        n = rng.choice((rng.randrange(1, len(data)), len(data) - 1, max(1, len(data) - rng.randint(1, 8)),
                        min(len(data) - 1, rng.randint(1, 8))))
        return Mutation("truncate", key, f"truncate {key!r} from {len(data)} to {n} bytes",
                        (Splice(key, n, len(data), b""),))

    def extend(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        extra = rng.choice((rng.randbytes(rng.randint(1, 64)), bytes(rng.randint(1, 16)), data[-16:] or b"\0"))
        return Mutation("extend", key, f"append {len(extra)} bytes to {key!r}",
                        (Splice(key, len(data), len(data), extra),))

    def duplicate(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        if not data:
            return None
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 64))
        return Mutation("duplicate_bytes", key, f"duplicate bytes [{a}:{b}] of {key!r} after themselves",
                        (Splice(key, b, b, data[a:b]),))

    def _splice_from(self, rng: random.Random, kind: str, key: str, data: bytes, donor_name: str,
                     donor: bytes) -> Mutation | None:
        if not donor or not data:
            return None
        n = rng.randint(1, len(donor))
        src = rng.randrange(len(donor) - n + 1)
        dst = rng.randrange(len(data))
        end = min(len(data), dst + n)
        piece = donor[src:src + n]
        if data[dst:end] == piece and end - dst == n:
            return None
        return Mutation(kind, key, f"overwrite {key!r}[{dst}:{end}] with {donor_name}[{src}:{src + n}]",
                        (Splice(key, dst, end, piece),))

    def splice_same(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, other = rng.sample(arr.chunk_keys, 2)
        return self._splice_from(rng, "splice_same_array", key, arr.files[key], repr(other), arr.files[other])

    def splice_other(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        found = self._other_array_chunk(rng, arr)
        if found is None:
            return None
        donor, dkey = found
        return self._splice_from(rng, "splice_other_array", key, data, f"{donor.spec.name}:{dkey!r}",
                                 donor.files[dkey])

    def replace_same(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, other = rng.sample(arr.chunk_keys, 2)
        if arr.files[key] == arr.files[other]:
            return None
        return Mutation("replace_same_array", key, f"replace {key!r} with a copy of {other!r}",
                        (CopyFile(other, key),))

    def replace_other(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        found = self._other_array_chunk(rng, arr)
        if found is None or found[0].files[found[1]] == data:
            return None
        donor, dkey = found
        return Mutation("replace_other_array", key, f"replace {key!r} with {donor.spec.name}:{dkey!r}",
                        (WriteFile(key, donor.files[dkey]),))

    def swap(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        a, b = rng.sample(arr.chunk_keys, 2)
        if arr.files[a] == arr.files[b]:
            return None
        return Mutation("swap_chunks", a, f"swap {a!r} and {b!r}", (Swap(a, b),))

    def empty(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, _ = self._chunk(rng, arr)
        return Mutation("empty_file", key, f"empty {key!r}", (WriteFile(key, b""),))

    def delete(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, _ = self._chunk(rng, arr)
        return Mutation("delete_chunk", key, f"delete {key!r}", (Delete(key),))

    def add_file(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        """A file at the key of a missing chunk (one never written) or outside the chunk grid."""
        spec = arr.spec
        outside = spec.chunk_key(tuple(n + rng.randint(0, 2) for n in spec.storage_grid))
        key = rng.choice([k for k in arr.key_index if k not in arr.files] + [outside])
        r = rng.random()
        if r < 0.4 and arr.chunk_keys:
            source = rng.choice(arr.chunk_keys)
            data, what = arr.files[source], f"a copy of {source!r}"
        elif r < 0.7:
            found = self._other_array_chunk(rng, arr)
            if found is None:
                return None
            data, what = found[0].files[found[1]], f"{found[0].spec.name}:{found[1]!r}"
        else:
            data = rng.randbytes(rng.randint(0, 64))
            what = f"{len(data)} random bytes"
        where = "outside the grid" if key == outside else "a missing chunk"
        return Mutation("add_file", key, f"create {key!r} ({where}) holding {what}", (CreateFile(key, data),))

    def make_directory(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        keys = arr.chunk_keys if arr.chunk_keys and rng.random() < 0.8 else arr.metadata_keys
        key = rng.choice(keys)
        return Mutation("make_directory", key, f"replace {key!r} with an empty directory", (MakeDirectory(key),))

    # -- shards -------------------------------------------------------------------------------------
    def shard_shift(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        lo, hi = _payload_range(arr.spec, data)
        k = rng.randint(1, 32)
        if rng.random() < 0.5 or hi - lo <= k:
            garbage = rng.randbytes(k)
            return Mutation("shard_shift_payload", key, f"insert {k} bytes at {key!r}[{lo}] (payload start)",
                            (Splice(key, lo, lo, garbage),))
        return Mutation("shard_shift_payload", key, f"remove {k} bytes at {key!r}[{lo}] (payload start)",
                        (Splice(key, lo, lo + k, b""),))

    def shard_rotate(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        lo, hi = _payload_range(arr.spec, data)
        layout = shard_layout(arr.spec, data)
        assert layout is not None
        sizes = [nb for off, nb in layout.entries if off != MISSING]
        if hi - lo < 2:
            return None
        # by one inner chunk's size (every entry may land on another whole inner chunk) or at random
        k = sizes[0] if sizes and sizes[0] < hi - lo and rng.random() < 0.5 else rng.randrange(1, hi - lo)
        payload = data[lo:hi]
        rotated = payload[k:] + payload[:k]
        if rotated == payload:
            return None
        return Mutation("shard_rotate_payload", key, f"rotate {key!r}'s payload [{lo}:{hi}] left by {k} bytes",
                        (Splice(key, lo, hi, rotated),))

    def shard_index_flip(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        layout = shard_layout(arr.spec, data)
        assert layout is not None
        flips = self._flips(rng, layout.index_start, layout.index_end, rng.choice((1, 1, 2, 4)),
                            bits=rng.random() < 0.5)
        return Mutation("shard_index_flip", key, f"xor index bytes {flips} of {key!r}", (Xor(key, flips),))

    def shard_index_entry(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        """Sets one index entry to a crafted (offset, nbytes) and, when the index has a crc32c,
        recomputes it (so only the reader's own checks stand between the entry and the data)."""
        key, data = self._chunk(rng, arr)
        spec = arr.spec
        layout = shard_layout(spec, data)
        assert layout is not None
        j = rng.randrange(len(layout.entries))
        off, nb = layout.entries[j]
        other = rng.choice(layout.entries)
        n = len(data)
        off0 = 0 if off == MISSING else off
        nb0 = 1 if nb == MISSING else nb
        candidates = [
            (MISSING, nb0), (off0, MISSING), (MISSING, MISSING), (2**63, nb0), (off0, 2**63),
            (off0, 0), (off0, nb0 + 1), (off0, max(0, nb0 - 1)), (off0 + 1, nb0), (n, 1), (n - 1, 2), (n, 0),
            (0, n), (MISSING - 3, 8), (2**64 - 2, 1), (layout.index_start, 16), other, (0, 1), (0, 4),
        ]
        new = rng.choice(candidates)
        if new == (off, nb):
            return None
        index = bytearray(data[layout.index_start:layout.index_end])
        struct.pack_into("<QQ", index, 16 * j, *new)
        fixed = ""
        if spec.index_crc32c:
            index[-4:] = crc32c_bytes(bytes(index[:-4]))
            fixed = ", index crc32c recomputed"
        return Mutation("shard_index_entry", key,
                        f"set index entry {j} of {key!r} from {(off, nb)} to {new}{fixed}",
                        (Splice(key, layout.index_start, layout.index_end, bytes(index)),))

    # -- mutations behind a recomputed checksum (they reach the decompressors) ---------------------
    def crc_fixed_flip(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        if arr.spec.shards is None:
            lo, hi = 0, len(data) - 4
        else:
            layout = shard_layout(arr.spec, data)
            assert layout is not None
            present = [(o, nb) for o, nb in layout.entries if o != MISSING and nb >= 5]
            if not present:
                return None
            o, nb = rng.choice(present)
            lo, hi = o, o + nb - 4
        if hi <= lo:
            return None
        flips = self._flips(rng, lo, hi, rng.choice((1, 2, 4)), bits=rng.random() < 0.5)
        fixed = bytearray(data[lo:hi])
        for offset, mask in flips:
            fixed[offset - lo] ^= mask
        return Mutation("crc_fixed_flip", key,
                        f"xor bytes {flips} of {key!r} and recompute the crc32c at [{hi}:{hi + 4}]",
                        (Xor(key, flips), Splice(key, hi, hi + 4, crc32c_bytes(bytes(fixed)))))

    def crc_fixed_truncate(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._chunk(rng, arr)
        payload = data[:-4]
        if len(payload) < 2:
            return None
        n = rng.choice((rng.randrange(0, len(payload)), len(payload) - 1, rng.randrange(0, min(8, len(payload)))))
        cut = payload[:n]
        return Mutation("crc_fixed_truncate", key,
                        f"truncate {key!r}'s payload from {len(payload)} to {n} bytes, crc32c recomputed",
                        (WriteFile(key, cut + crc32c_bytes(cut)),))

    # -- metadata -----------------------------------------------------------------------------------
    @staticmethod
    def _metadata(rng: random.Random, arr: StoredArray) -> tuple[str, bytes]:
        keys = arr.metadata_keys
        key = ".zarray" if ".zarray" in keys and rng.random() < 0.75 else rng.choice(keys)
        return key, arr.files[key]

    def meta_flip(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._metadata(rng, arr)
        flips = self._flips(rng, 0, len(data), rng.choice((1, 1, 2, 4)), bits=rng.random() < 0.5)
        return Mutation("meta_flip", key, f"xor bytes {flips} of {key!r}", (Xor(key, flips),))

    def meta_truncate(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._metadata(rng, arr)
        n = rng.randrange(len(data))
        return Mutation("meta_truncate", key, f"truncate {key!r} to {n} bytes", (Splice(key, n, len(data), b""),))

    def _value_expr(self, rng: random.Random, doc: Any) -> str:
        r = rng.random()
        if r < 0.15:  # a value from elsewhere in the document (plausible, wrong place)
            path = rng.choice(list(_json_paths(doc)) or [()])
            return repr(json.dumps(_json_at(doc, path)))
        if r < 0.3:
            return repr(str(rng.choice((rng.randint(-10, 300), rng.randint(-2**70, 2**70)))))
        return rng.choice(_JSON_VALUE_EXPRS)

    def meta_value(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._metadata(rng, arr)
        doc = json.loads(data)
        paths = list(_json_paths(doc))
        if not paths:
            return None
        path = rng.choice(paths)
        expr = self._value_expr(rng, doc)
        return Mutation("meta_value", key, f"set {key}:{list(path)} to the JSON text {expr}",
                        (JsonEdit(key, path, expr),))

    def meta_plausible(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        """Sets a scalar to a nearby number or a meaningful name: often another valid array."""
        key, data = self._metadata(rng, arr)
        doc = json.loads(data)
        scalars = [p for p in _json_paths(doc) if not isinstance(_json_at(doc, p), (dict, list))]
        if not scalars:
            return None
        path = rng.choice(scalars)
        old = _json_at(doc, path)
        new: Any
        if isinstance(old, bool):
            new = not old
        elif isinstance(old, int):
            new = rng.choice((old + 1, old - 1, 0, 1, -old, 2 * old, 1000 * old, old + 2**32, 2**31 - 1))
        elif isinstance(old, float):
            new = rng.choice((old + 1.5, -old - 1.0, 1e10, 0.1))
        elif isinstance(old, str):
            new = rng.choice(_PLAUSIBLE_STRINGS)
        else:
            new = rng.choice((0, "zstd", {"id": "zlib", "level": 1}, {"name": "crc32c"}))
        if new == old and type(new) is type(old):
            return None
        expr = repr(json.dumps(new))
        return Mutation("meta_plausible", key, f"set {key}:{list(path)} from {old!r} to {new!r}",
                        (JsonEdit(key, path, expr),))

    def meta_remove_key(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._metadata(rng, arr)
        paths = list(_json_paths(json.loads(data)))
        if not paths:
            return None
        path = rng.choice(paths)
        return Mutation("meta_remove_key", key, f"delete {key}:{list(path)}", (JsonEdit(key, path, None),))

    def meta_add_key(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._metadata(rng, arr)
        doc = json.loads(data)
        dicts = [()] + [p for p in _json_paths(doc) if isinstance(_json_at(doc, p), dict)]
        where = rng.choice(dicts)
        name = rng.choice(("must_understand", "extra", "storage_transformers", "dimension_names",
                           "configuration", "name", "endian", "order", "filters", "compressor", "zarr_format",
                           "codecs", "fill_value", "shape", "chunks", "dtype", "chunk_shape", "index_codecs"))
        if name in _json_at(doc, where):
            return None
        expr = self._value_expr(rng, doc)
        return Mutation("meta_add_key", key, f"add {key}:{list(where) + [name]} = JSON text {expr}",
                        (JsonEdit(key, (*where, name), expr),))

    def meta_non_utf8(self, rng: random.Random, arr: StoredArray) -> Mutation | None:
        key, data = self._metadata(rng, arr)
        text = data.decode()
        choice = rng.randrange(5)
        if choice == 0:  # a stray high byte anywhere
            pos = rng.randrange(len(data) + 1)
            bad = bytes([rng.randrange(0x80, 0x100)])
            return Mutation("meta_non_utf8", key, f"insert {bad!r} at {key!r}[{pos}]", (Splice(key, pos, pos, bad),))
        if choice == 1:  # invalid sequences inside a string value
            quotes = [m.start() for m in re.finditer('"', text)] or [0]
            pos = rng.choice(quotes) + 1
            bad = rng.choice((b"\xff", b"\xc3\x28", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe9t\xe9"))
            return Mutation("meta_non_utf8", key, f"insert {bad!r} at {key!r}[{pos}] (inside a string)",
                            (Splice(key, pos, pos, bad),))
        if choice == 2:
            encoding = rng.choice(("utf-16", "utf-16-le", "utf-32"))
            return Mutation("meta_non_utf8", key, f"re-encode {key!r} as {encoding}", (Reencode(key, encoding),))
        if choice == 3:
            return Mutation("meta_non_utf8", key, f"prefix {key!r} with a UTF-8 byte order mark",
                            (Splice(key, 0, 0, b"\xef\xbb\xbf"),))
        pos = rng.randrange(len(data) + 1)
        return Mutation("meta_non_utf8", key, f"insert a NUL byte at {key!r}[{pos}]", (Splice(key, pos, pos, b"\0"),))
