"""Mutation fuzzing of stored Zarr data read by zarr_device.

Arrays are written with zarr-python (Zarr v3 and v2; integer, float, bool and complex types;
zstd, gzip, blosc, zlib, lz4 or no compressor; with and without crc32c; sharded with the index at
either end, with and without its checksum; C and F order). Each case copies one array, applies one
random mutation to its stored bytes (a chunk, a shard, a shard's index or a metadata document) and
reads the copy with zarr_device in a worker process, whose crash or hang is caught and attributed
to the read that caused it. Every read gets one outcome:

- ``same data``: the read equals the original values;
- ``typed error``: an instance of ``zarr_device.ZarrDeviceError`` (the class is recorded);
- ``different data``: it succeeded with other values;
- ``different data (metadata changed)``: likewise, after a metadata mutation (a valid new array);
- ``generic exception``: any other exception (type, place and message recorded);
- ``crash``: the worker process died; ``hang``: the read outlived the timeout.

The rule (:func:`violation_reason`): no crash, hang or generic exception; and a read that
succeeds with different data must not involve a chunk whose crc32c check fails (a chunk ending in
a crc32c that does not match, a shard index whose checksum does not match, an inner chunk of a
shard, as the shard's index locates it, whose checksum does not match or that lies outside the
shard). What counts is the checksum as it stands after the mutation, not the kind of mutation: a
whole chunk replaced by another valid chunk, two chunks swapped, a chunk deleted (a missing chunk
is valid), or a shard's payload moved so that its index lands on other valid inner chunks carries
valid checksums and may read as different data. A successful read is also a violation when it
differs although no chunk it covers changed.

Every case is derived from ``(seed, iteration)`` alone, so :func:`run_fuzz` with
``first_iteration=i, iterations=1`` replays it, and every violation comes with a self-contained
reproducer script (the zarr-python code that wrote the array, the mutation as file edits, the read).
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import math
import multiprocessing.connection
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, Union

import google_crc32c
import numpy as np

# ----------------------------------------------------------------------------------------------
# Outcomes

SAME = "same data"
TYPED = "typed error"
DIFFERENT = "different data"
DIFFERENT_META = "different data (metadata changed)"
GENERIC = "generic exception"
CRASH = "crash"
HANG = "hang"
OUTCOMES = (SAME, TYPED, DIFFERENT, DIFFERENT_META, GENERIC, CRASH, HANG)

METADATA_KEYS = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
MISSING = 2**64 - 1  # a shard index entry's "no inner chunk" marker (offset and nbytes)
MAX_READ_BYTES = 64 << 20  # reads of arrays whose metadata was enlarged are cut down to this

Selection = Union[tuple[Union[int, slice], ...], EllipsisType]  # what the fuzzer reads


# ----------------------------------------------------------------------------------------------
# The arrays

_CODEC_IMPORTS = (
    "from zarr.codecs import (BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec,\n"
    "                         TransposeCodec, ZstdCodec)"
)

# Compressor expressions, as written in the creation code (and so in the reproducers).
_V3_COMPRESSORS: dict[str, str] = {
    "zstd": "ZstdCodec(level=3)",
    "gzip": "GzipCodec(level=5)",
    "blosc": "BloscCodec(cname='lz4', clevel=5, shuffle='shuffle')",
    "blosc-zstd": "BloscCodec(cname='zstd', clevel=3, shuffle='bitshuffle')",
}
_V2_COMPRESSORS: dict[str, str] = {
    "zlib": "numcodecs.Zlib(level=1)",
    "gzip": "numcodecs.GZip(level=1)",
    "zstd": "numcodecs.Zstd(level=1)",
    "lz4": "numcodecs.LZ4()",
    "blosc": "numcodecs.Blosc(cname='lz4', clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)",
    "blosc-zstd": "numcodecs.Blosc(cname='zstd', clevel=3, shuffle=numcodecs.Blosc.BITSHUFFLE)",
}


@dataclass(frozen=True)
class ArraySpec:
    """One array of the corpus, as zarr-python is asked to write it."""

    name: str
    zarr_format: int
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]  # the chunks a read decodes (inner chunks when sharded)
    shards: tuple[int, ...] | None = None
    compressor: str | None = None  # a key of _V3_COMPRESSORS / _V2_COMPRESSORS
    crc32c: bool = False  # v3: crc32c after the compressor (in the inner chain when sharded)
    index_location: str = "end"
    index_crc32c: bool = True
    order: str = "C"  # v2 memory order
    key_encoding: str = "default"  # v3 chunk key encoding ("default" or "v2"); v2 arrays use "v2"
    separator: str = "/"
    big_endian: bool = False
    transpose: bool = False
    zero_first_chunk: bool = False  # leaves the first (inner) chunk all fill value: not stored
    seed: int = 0

    @property
    def storage_shape(self) -> tuple[int, ...]:
        """The shape of what one stored file holds (a shard or a chunk)."""
        return self.shards if self.shards is not None else self.chunks

    @property
    def storage_grid(self) -> tuple[int, ...]:
        return tuple(-(-n // c) for n, c in zip(self.shape, self.storage_shape))

    @property
    def inner_per_shard(self) -> tuple[int, ...]:
        assert self.shards is not None
        return tuple(s // c for s, c in zip(self.shards, self.chunks))

    @property
    def index_nbytes(self) -> int:
        """A shard index's size: 16 bytes per inner chunk, plus its crc32c."""
        return 16 * math.prod(self.inner_per_shard) + (4 if self.index_crc32c else 0)

    @property
    def has_checksums(self) -> bool:
        return self.crc32c or (self.shards is not None and self.index_crc32c)

    def chunk_key(self, index: Sequence[int]) -> str:
        """The store key of a stored file (chunk or shard) by its grid index."""
        if self.zarr_format == 3 and self.key_encoding == "default":
            return "c" + "".join(f"{self.separator}{i}" for i in index)
        return self.separator.join(str(i) for i in index) if index else "0"

    def creation_code(self) -> list[str]:
        """zarr-python code writing this array at ``path`` (run here and in the reproducers)."""
        dt = self.dtype
        if self.big_endian:
            dt = np.dtype(dt).newbyteorder(">").str
        lines = [
            f"values = np.asarray(np.random.default_rng({self.seed}).integers(0, 100, "
            f"size={self.shape!r})).astype({self.dtype!r})"
        ]
        if self.zero_first_chunk and self.shape:
            first = ", ".join(f"0:{c}" for c in self.chunks)
            lines.append(f"values[{first}] = 0")
        kwargs: list[str] = [f"shape={self.shape!r}", f"dtype={dt!r}"]
        if self.zarr_format == 2:
            comp = _V2_COMPRESSORS[self.compressor] if self.compressor else "None"
            kwargs += [
                f"chunks={self.chunks!r}",
                f"compressors={comp}",
                "filters=None",
                f"order={self.order!r}",
                f"chunk_key_encoding={{'name': 'v2', 'separator': {self.separator!r}}}",
            ]
        else:
            comps = [_V3_COMPRESSORS[self.compressor]] if self.compressor else []
            if self.crc32c:
                comps.append("Crc32cCodec()")
            endian = "'big'" if self.big_endian else "'little'"
            if self.shards is not None and not self.index_crc32c:
                inner = ", ".join([f"BytesCodec(endian={endian})", *comps])
                kwargs += [
                    f"chunks={self.shards!r}",
                    f"serializer=ShardingCodec(chunk_shape={self.chunks!r}, codecs=[{inner}], "
                    f"index_codecs=[BytesCodec()], index_location={self.index_location!r})",
                    "compressors=None",
                    "filters=None",
                ]
            else:
                kwargs += [f"chunks={self.chunks!r}", f"compressors=[{', '.join(comps)}]" if comps else "compressors=None"]
                if self.shards is not None:
                    kwargs.append(f"shards={{'shape': {self.shards!r}, 'index_location': {self.index_location!r}}}")
                if self.big_endian:
                    kwargs.append("serializer=BytesCodec(endian='big')")
                kwargs.append(
                    f"filters=[TransposeCodec(order={tuple(reversed(range(len(self.shape))))!r})]"
                    if self.transpose else "filters=None"
                )
            if self.key_encoding == "v2":
                kwargs.append(f"chunk_key_encoding={{'name': 'v2', 'separator': {self.separator!r}}}")
        kwargs += ["fill_value=0", f"attributes={{'fuzz': {self.name!r}}}", f"zarr_format={self.zarr_format}",
                   "overwrite=True"]
        lines.append(f"array = zarr.create_array(path, {', '.join(kwargs)})")
        if self.compressor == "gzip":  # gzip headers hold the time: pin it, for the same bytes every time
            lines += ["import gzip, unittest.mock",
                      "with unittest.mock.patch.object(gzip.time, 'time', return_value=0.0):",
                      "    array[...] = values"]
        else:
            lines.append("array[...] = values")
        return lines

    def describe(self) -> str:
        """A one-line summary of the configuration."""
        parts = [f"v{self.zarr_format}", self.dtype + (" big-endian" if self.big_endian else ""),
                 f"shape={self.shape}", f"chunks={self.chunks}"]
        if self.shards is not None:
            parts.append(f"shards={self.shards} index={self.index_location}"
                         + ("+crc32c" if self.index_crc32c else " without crc32c"))
        parts.append(f"compressor={self.compressor or 'none'}" + ("+crc32c" if self.crc32c else ""))
        if self.zarr_format == 2:
            parts.append(f"order={self.order} separator={self.separator!r}")
        elif self.key_encoding == "v2":
            parts.append(f"v2 keys {self.separator!r}")
        if self.transpose:
            parts.append("transpose")
        return " ".join(parts)


_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64", "bool", "complex64", "complex128")
# (shape, chunks, shards)
_GEOMETRIES: tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = (
    ((23,), (5,), (10,)),
    ((10, 7), (4, 3), (8, 6)),
    ((4, 5, 6), (2, 3, 2), (4, 3, 4)),
)


def default_specs() -> list[ArraySpec]:
    """The corpus: every v3 combination of compressor x crc32c x sharding, some unusual layouts,
    and every v2 compressor in both orders; data types and shapes cycle through the list."""
    specs: list[ArraySpec] = []

    def add(**kw: Any) -> None:
        n = len(specs)
        if "shape" not in kw:
            kw["shape"], kw["chunks"], shards = _GEOMETRIES[n % len(_GEOMETRIES)]
            if kw.pop("sharded", False):
                kw["shards"] = shards
        kw.setdefault("dtype", _DTYPES[(n * 5) % len(_DTYPES)])
        kw.setdefault("zero_first_chunk", n % 3 == 1)
        specs.append(ArraySpec(name=f"a{n:02d}", seed=n, **kw))

    for compressor in (None, "zstd", "gzip", "blosc"):
        for crc in (False, True):
            for sharded in (False, True):
                add(zarr_format=3, compressor=compressor, crc32c=crc, sharded=sharded)
    add(zarr_format=3, compressor="zstd", crc32c=True, sharded=True, index_location="start", dtype="int32")
    add(zarr_format=3, compressor="gzip", sharded=True, index_location="start", index_crc32c=False,
        dtype="float32", big_endian=True)
    add(zarr_format=3, compressor="zstd", crc32c=True, sharded=True, index_crc32c=False, dtype="uint16")
    add(zarr_format=3, sharded=True, index_crc32c=False, dtype="int64")
    add(zarr_format=3, compressor="blosc-zstd", crc32c=True, transpose=True, big_endian=True, dtype="float64")
    add(zarr_format=3, compressor="zstd", crc32c=True, key_encoding="v2", separator=".", dtype="int16")
    add(zarr_format=3, compressor="blosc", crc32c=True, sharded=True, dtype="complex64")
    add(zarr_format=3, shape=(), chunks=(), compressor="zstd", crc32c=True, dtype="float32")
    add(zarr_format=3, shape=(), chunks=(), dtype="complex128")
    for i, compressor in enumerate((None, "zlib", "gzip", "zstd", "lz4", "blosc", "blosc-zstd")):
        for order in ("C", "F"):
            add(zarr_format=2, compressor=compressor, order=order, separator="." if i % 2 else "/",
                big_endian=(i == 3 and order == "F"))
    add(zarr_format=2, shape=(), chunks=(), compressor="zstd", dtype="int32")
    # many chunks: errors while many others are in flight
    add(zarr_format=3, shape=(24, 24), chunks=(4, 4), compressor="zstd", crc32c=True, dtype="int32")
    add(zarr_format=3, shape=(64, 64), chunks=(4, 4), shards=(16, 16), compressor="blosc", crc32c=True,
        dtype="float32")
    add(zarr_format=2, shape=(24, 24), chunks=(4, 4), compressor="lz4", order="F", separator=".", dtype="int16")
    return specs


@dataclass
class StoredArray:
    """An array of the corpus as written: its values and every stored file's bytes."""

    spec: ArraySpec
    root: Path
    values: np.ndarray
    files: dict[str, bytes]
    key_index: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def chunk_keys(self) -> list[str]:
        return sorted(k for k in self.files if Path(k).name not in METADATA_KEYS)

    @property
    def metadata_keys(self) -> list[str]:
        return sorted(k for k in self.files if Path(k).name in METADATA_KEYS)


def read_files(root: Path) -> dict[str, bytes]:
    """Every file below ``root``, by its POSIX path relative to ``root``."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def exec_creation(code: Sequence[str], path: Path) -> np.ndarray:
    """Runs creation code (see :meth:`ArraySpec.creation_code`) and returns the values written."""
    import numcodecs
    import zarr
    from zarr import codecs

    namespace: dict[str, Any] = {"np": np, "numcodecs": numcodecs, "zarr": zarr, "path": str(path)}
    namespace.update({name: getattr(codecs, name) for name in (
        "BloscCodec", "BytesCodec", "Crc32cCodec", "GzipCodec", "ShardingCodec", "TransposeCodec", "ZstdCodec")})
    exec("\n".join(code), namespace)  # noqa: S102 - our own generated code, also the reproducers'
    values: np.ndarray = namespace["values"]
    return values


def build_corpus(directory: Path, specs: Iterable[ArraySpec]) -> list[StoredArray]:
    """Writes every array with zarr-python under ``directory``."""
    corpus: list[StoredArray] = []
    for spec in specs:
        root = directory / spec.name
        values = exec_creation(spec.creation_code(), root)
        stored = StoredArray(spec, root, values, read_files(root))
        for index in itertools.product(*(range(n) for n in spec.storage_grid)):
            stored.key_index[spec.chunk_key(index)] = index
        corpus.append(stored)
    return corpus


# ----------------------------------------------------------------------------------------------
# Mutations: explicit file edits, applied here and rendered as the reproducer's Python lines


def _path_code(key: str) -> str:
    return f"p = root / {key!r}"


@dataclass(frozen=True)
class Xor:
    """XORs single bytes of a file with masks."""

    key: str
    flips: tuple[tuple[int, int], ...]  # (offset, mask)

    def apply(self, root: Path) -> None:
        p = root / self.key
        data = bytearray(p.read_bytes())
        for offset, mask in self.flips:
            data[offset] ^= mask
        p.write_bytes(bytes(data))

    def code(self) -> list[str]:
        return [_path_code(self.key), "d = bytearray(p.read_bytes())",
                *(f"d[{o}] ^= {m:#04x}" for o, m in self.flips), "p.write_bytes(bytes(d))"]


@dataclass(frozen=True)
class Splice:
    """Replaces the bytes ``[start:end]`` of a file with ``data`` (inserts when start == end)."""

    key: str
    start: int
    end: int
    data: bytes

    def apply(self, root: Path) -> None:
        p = root / self.key
        old = p.read_bytes()
        p.write_bytes(old[: self.start] + self.data + old[self.end:])

    def code(self) -> list[str]:
        middle = f" + bytes.fromhex({self.data.hex()!r})" if self.data else ""
        return [_path_code(self.key), "d = p.read_bytes()", f"p.write_bytes(d[:{self.start}]{middle} + d[{self.end}:])"]


@dataclass(frozen=True)
class WriteFile:
    """Replaces a file's whole content."""

    key: str
    data: bytes

    def apply(self, root: Path) -> None:
        (root / self.key).write_bytes(self.data)

    def code(self) -> list[str]:
        return [f"(root / {self.key!r}).write_bytes(bytes.fromhex({self.data.hex()!r}))"]


@dataclass(frozen=True)
class CreateFile:
    """Creates a file where there was none (its directories too)."""

    key: str
    data: bytes

    def apply(self, root: Path) -> None:
        p = root / self.key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(self.data)

    def code(self) -> list[str]:
        return [_path_code(self.key), "p.parent.mkdir(parents=True, exist_ok=True)",
                f"p.write_bytes(bytes.fromhex({self.data.hex()!r}))"]


@dataclass(frozen=True)
class MakeDirectory:
    """Replaces a file with an empty directory of the same name."""

    key: str

    def apply(self, root: Path) -> None:
        p = root / self.key
        p.unlink()
        p.mkdir()

    def code(self) -> list[str]:
        return [_path_code(self.key), "p.unlink()", "p.mkdir()"]


@dataclass(frozen=True)
class CopyFile:
    """Overwrites file ``dst`` with file ``src`` of the same array."""

    src: str
    dst: str

    def apply(self, root: Path) -> None:
        (root / self.dst).write_bytes((root / self.src).read_bytes())

    def code(self) -> list[str]:
        return [f"(root / {self.dst!r}).write_bytes((root / {self.src!r}).read_bytes())"]


@dataclass(frozen=True)
class Swap:
    """Swaps the contents of two files."""

    a: str
    b: str

    def apply(self, root: Path) -> None:
        pa, pb = root / self.a, root / self.b
        da, db = pa.read_bytes(), pb.read_bytes()
        pa.write_bytes(db)
        pb.write_bytes(da)

    def code(self) -> list[str]:
        return [f"a, b = root / {self.a!r}, root / {self.b!r}",
                "da, db = a.read_bytes(), b.read_bytes()", "a.write_bytes(db)", "b.write_bytes(da)"]


@dataclass(frozen=True)
class Delete:
    """Deletes a file."""

    key: str

    def apply(self, root: Path) -> None:
        (root / self.key).unlink()

    def code(self) -> list[str]:
        return [f"(root / {self.key!r}).unlink()"]


@dataclass(frozen=True)
class Reencode:
    """Re-encodes a (UTF-8) text file in another encoding."""

    key: str
    encoding: str

    def apply(self, root: Path) -> None:
        p = root / self.key
        p.write_bytes(p.read_bytes().decode().encode(self.encoding))

    def code(self) -> list[str]:
        return [_path_code(self.key), f"p.write_bytes(p.read_bytes().decode().encode({self.encoding!r}))"]


PLACEHOLDER = "__FUZZ__"


@dataclass(frozen=True)
class JsonEdit:
    """Parses a JSON document, sets (``value_expr`` given) or deletes the member at ``path`` and
    writes it back with ``json.dumps``; a set value is spliced in as the text ``eval(value_expr)``
    (so it may be any text: a huge integer, invalid JSON, deep nesting)."""

    key: str
    path: tuple[str | int, ...]
    value_expr: str | None  # None: delete the member

    def apply(self, root: Path) -> None:
        p = root / self.key
        doc = json.loads(p.read_bytes())
        container = doc
        for part in self.path[:-1]:
            container = container[part]
        if self.value_expr is None:
            del container[self.path[-1]]
            p.write_bytes(json.dumps(doc).encode())
        else:
            container[self.path[-1]] = PLACEHOLDER
            text = json.dumps(doc).replace(json.dumps(PLACEHOLDER), _json_value_text(self.value_expr))
            p.write_bytes(text.encode())

    def code(self) -> list[str]:
        target = "doc" + "".join(f"[{part!r}]" for part in self.path)
        lines = [_path_code(self.key), "doc = json.loads(p.read_bytes())"]
        if self.value_expr is None:
            return [*lines, f"del {target}", "p.write_bytes(json.dumps(doc).encode())"]
        return [*lines, f"{target} = {PLACEHOLDER!r}",
                f"p.write_bytes(json.dumps(doc).replace({json.dumps(PLACEHOLDER)!r}, {self.value_expr}).encode())"]


Op = Union[Xor, Splice, WriteFile, CreateFile, MakeDirectory, CopyFile, Swap, Delete, Reencode, JsonEdit]


@dataclass(frozen=True)
class Mutation:
    """One mutation of an array's files."""

    kind: str
    target: str  # the key mutated (the first, for a swap)
    detail: str
    ops: tuple[Op, ...]

    @property
    def is_metadata(self) -> bool:
        return Path(self.target).name in METADATA_KEYS

    def apply(self, root: Path) -> None:
        for op in self.ops:
            op.apply(root)

    def code(self) -> list[str]:
        return [line for op in self.ops for line in op.code()]


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
_JSON_VALUE_CACHE: dict[str, str] = {}

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


def _json_value_text(expr: str) -> str:
    """The text a value expression stands for (expressions come from this module's generators)."""
    text = _JSON_VALUE_CACHE.get(expr)
    if text is None:
        text = str(eval(expr, {"json": json}))  # noqa: S307 - our own expressions, as in the reproducers
        _JSON_VALUE_CACHE[expr] = text
    return text


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


def crc32c_bytes(data: bytes) -> bytes:
    return struct.pack("<I", google_crc32c.value(data))


def _crc_ok(data: bytes) -> bool:
    """Whether ``data`` ends in the crc32c of the bytes before it (the crc32c codec's framing)."""
    return len(data) >= 4 and crc32c_bytes(data[:-4]) == data[-4:]


@dataclass
class ShardLayout:
    """A shard file split into its index and payload."""

    index_start: int
    index_end: int
    entries: list[tuple[int, int]]  # (offset, nbytes) per inner chunk, C order

    @property
    def payload(self) -> tuple[int, int]:
        """The byte range between (or before/after) the index."""
        return (self.index_end, -1) if self.index_start == 0 else (0, self.index_start)


def shard_layout(spec: ArraySpec, data: bytes) -> ShardLayout | None:
    """The index and inner chunk entries of a shard file, or None when it is too short."""
    size = spec.index_nbytes
    if len(data) < size:
        return None
    start = 0 if spec.index_location == "start" else len(data) - size
    n = math.prod(spec.inner_per_shard)
    raw = struct.unpack(f"<{2 * n}Q", data[start:start + 16 * n])
    return ShardLayout(start, start + size, [(raw[2 * i], raw[2 * i + 1]) for i in range(n)])


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


# ----------------------------------------------------------------------------------------------
# Selections and the checksum oracle


def _axis_indices(selection: Selection, shape: Sequence[int]) -> list[list[int]]:
    """The indices a (normalized, our own) selection selects along each axis."""
    if selection is Ellipsis:
        return [list(range(n)) for n in shape]
    assert isinstance(selection, tuple)
    out: list[list[int]] = []
    for item, n in zip(selection, shape):
        if isinstance(item, slice):
            out.append(list(range(*item.indices(n))))
        else:
            out.append([item % n])
    out += [list(range(n)) for n in shape[len(selection):]]
    return out


def format_selection(selection: Selection) -> str:
    """The selection as it is written between brackets: ``1:5:2, 3``."""
    if selection is Ellipsis:
        return "..."
    assert isinstance(selection, tuple)
    if not selection:
        return "()"

    def one(item: int | slice) -> str:
        if isinstance(item, slice):
            text = ":".join("" if v is None else str(v) for v in (item.start, item.stop))
            return text + (f":{item.step}" if item.step not in (None, 1) else "")
        return str(item)

    return ", ".join(one(item) for item in selection)


def random_selection(rng: random.Random, shape: Sequence[int]) -> Selection:
    """A random basic selection: per axis a slice (with a step), an integer or everything."""
    if not shape:
        return rng.choice((Ellipsis, ()))
    items: list[int | slice] = []
    for n in shape:
        r = rng.random()
        if r < 0.5:
            a = rng.randrange(n)
            b = rng.randint(a + 1, n)
            items.append(slice(a, b, rng.choice((1, 1, 2, 3))))
        elif r < 0.7:
            items.append(rng.randrange(-n, n))
        else:
            items.append(slice(None))
    return tuple(items)


def chunk_selection(rng: random.Random, arr: StoredArray, key: str | None) -> Selection:
    """One whole (inner) chunk, inside the stored file ``key`` when given."""
    spec = arr.spec
    if not spec.shape:
        return Ellipsis
    storage_index = arr.key_index.get(key) if key is not None else None
    if storage_index is None:
        storage_index = tuple(rng.randrange(n) for n in spec.storage_grid)
    per_file = tuple(s // c for s, c in zip(spec.storage_shape, spec.chunks))
    candidates = []
    for local in itertools.product(*(range(n) for n in per_file)):
        start = [(si * p + li) * c for si, p, li, c in zip(storage_index, per_file, local, spec.chunks)]
        if all(s < n for s, n in zip(start, spec.shape)):
            candidates.append(tuple(slice(s, min(s + c, n)) for s, c, n in zip(start, spec.chunks, spec.shape)))
    return rng.choice(candidates)


def checksum_failures(arr: StoredArray, after: Mapping[str, bytes], selection: Selection) -> list[str]:
    """The crc32c checks a read of ``selection`` must make that fail on the mutated files
    ``after``: one entry per failing check (a chunk, a shard index, an inner chunk)."""
    spec = arr.spec
    if not spec.has_checksums:
        return []
    axes = _axis_indices(selection, spec.shape)
    failures: list[str] = []
    storage_sets = [sorted({i // s for i in ax}) for ax, s in zip(axes, spec.storage_shape)]
    inner_sets = [sorted({i // c for i in ax}) for ax, c in zip(axes, spec.chunks)]
    for storage_index in itertools.product(*storage_sets):
        key = spec.chunk_key(storage_index)
        new = after.get(key)
        if new is None or new == arr.files.get(key):
            continue  # missing (valid: the fill value) or unchanged
        if spec.shards is None:
            if spec.crc32c and not _crc_ok(new):
                failures.append(f"chunk {key!r}")
            continue
        layout = shard_layout(spec, new)
        if layout is None:
            if spec.index_crc32c:
                failures.append(f"shard {key!r} shorter than its index")
            continue
        if spec.index_crc32c and not _crc_ok(new[layout.index_start:layout.index_end]):
            failures.append(f"shard index of {key!r}")
            continue
        if not spec.crc32c:
            continue
        per = spec.inner_per_shard
        local_sets = [[i - si * p for i in s if si * p <= i < (si + 1) * p]
                      for s, si, p in zip(inner_sets, storage_index, per)]
        for local in itertools.product(*local_sets):
            j = int(np.ravel_multi_index(local, per)) if per else 0
            off, nb = layout.entries[j]
            if off == MISSING or nb == MISSING:
                continue  # missing, or a half-missing entry: not a checksum matter
            if nb < 4 or off + nb > len(new):
                failures.append(f"inner chunk {local} of {key!r} at [{off}:{off + nb}] outside the shard")
            elif not _crc_ok(new[off:off + nb]):
                failures.append(f"inner chunk {local} of {key!r}")
    return failures


def touched_changes(arr: StoredArray, after: Mapping[str, bytes], selection: Selection) -> list[str]:
    """The stored files a read of ``selection`` covers that the mutation changed or deleted."""
    spec = arr.spec
    axes = _axis_indices(selection, spec.shape)
    sets = [sorted({i // s for i in ax}) for ax, s in zip(axes, spec.storage_shape)]
    keys = (spec.chunk_key(index) for index in itertools.product(*sets))
    return [k for k in keys if after.get(k) != arr.files.get(k)]


# ----------------------------------------------------------------------------------------------
# The worker process (reads with zarr_device; may crash or hang)


@dataclass
class ReadResult:
    """What one read in the worker gave."""

    status: str  # "ok", "error", "crash", "hang"
    value: np.ndarray | None = None
    error_type: str = ""
    typed: bool = False
    message: str = ""
    where: str = ""  # innermost frame of an exception
    shrunk: bool = False  # the selection was cut down (the metadata made the array huge)


def _selection_shape(selection: Selection, shape: Sequence[int]) -> tuple[int, ...] | None:
    """The result shape of a selection, None when it does not fit the shape."""
    items: tuple[Any, ...] = (Ellipsis,) if selection is Ellipsis else selection
    if Ellipsis in items:
        i = items.index(Ellipsis)
        items = items[:i] + (slice(None),) * (len(shape) - len(items) + 1) + items[i + 1:]
    if len(items) > len(shape):
        return None
    items = items + (slice(None),) * (len(shape) - len(items))
    return tuple(len(range(*it.indices(n))) for it, n in zip(items, shape) if isinstance(it, slice))


def _read_once(zd: Any, path: str, selection: Selection) -> ReadResult:
    """Opens and reads in the worker; never raises."""
    shrunk = False
    try:
        arr = zd.open_array(path)
        result_shape = _selection_shape(selection, arr.shape)
        if result_shape is not None and math.prod(result_shape) * arr.dtype.itemsize > MAX_READ_BYTES:
            selection = tuple(slice(0, min(n, 2)) for n in arr.shape)
            shrunk = True
        value = np.asarray(arr[selection])
        return ReadResult("ok", value=value, shrunk=shrunk)
    except BaseException as e:  # noqa: B036 - every exception is an outcome to record
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
        return ReadResult("error", error_type=f"{type(e).__module__}.{type(e).__qualname__}",
                          typed=isinstance(e, zd.ZarrDeviceError), message=str(e)[:2000], where=where,
                          shrunk=shrunk)


def _worker_main(read_fd: int, write_fd: int, memory_limit: int) -> None:
    """Serves reads until told to stop (run as a separate interpreter by :class:`ReadRunner`,
    which sends its stderr, C++ messages and faulthandler tracebacks included, to a log)."""
    import resource

    conn_in = multiprocessing.connection.Connection(read_fd, writable=False)
    conn = multiprocessing.connection.Connection(write_fd, readable=False)
    faulthandler.enable(all_threads=True)
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    try:
        import zarr_device as zd
    except BaseException as e:  # noqa: B036 - e.g. the package being reinstalled right now
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            message = conn_in.recv()
        except (EOFError, OSError):
            return
        if message[0] == "stop":
            return
        _, path, selection, dump_after = message
        sys.stderr.write(f"--- read {path}[{format_selection(selection)}]\n")
        sys.stderr.flush()
        faulthandler.dump_traceback_later(dump_after, exit=False)
        try:
            result = _read_once(zd, path, selection)
        finally:
            faulthandler.cancel_dump_traceback_later()
        try:
            conn.send(result)
        except Exception as e:  # e.g. a result that does not pickle
            conn.send(ReadResult("error", error_type=f"pickle.{type(e).__name__}", message=str(e)))


def _log_tail(path: Path, lines: int = 25) -> str:
    """The worker log's lines after its last read marker (what the failing read printed)."""
    try:
        text = path.read_bytes()[-20000:].decode(errors="replace")
    except OSError:
        return ""
    last = text.rsplit("--- read ", 1)[-1]
    return "\n".join(last.splitlines()[1:][-lines:])


_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); import mutation_fuzz; mutation_fuzz._worker_main(*map(int, sys.argv[2:]))"


class ReadRunner:
    """Runs reads in a worker interpreter, restarting it after a crash or a hang."""

    def __init__(self, log_dir: Path, timeout: float = 10.0, memory_limit: int = 4 << 30,
                 env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.env = None if env is None else {**os.environ, **env}  # the worker's environment
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._send: multiprocessing.connection.Connection | None = None
        self._recv: multiprocessing.connection.Connection | None = None
        self._log = log_dir / "worker.log"

    def _start(self) -> None:
        """Starts a worker; retries a while when it fails (the package may be being reinstalled)."""
        last = ""
        for attempt in range(10):
            self.starts += 1
            self._log = self.log_dir / f"worker-{self.starts}.log"
            to_child_r, to_child_w = os.pipe()
            from_child_r, from_child_w = os.pipe()
            with open(self._log, "ab") as log:
                process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, str(Path(__file__).resolve().parent), str(to_child_r),
                     str(from_child_w), str(self.memory_limit)],
                    pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    env=self.env)
            os.close(to_child_r)
            os.close(from_child_w)
            send = multiprocessing.connection.Connection(to_child_w, readable=False)
            recv = multiprocessing.connection.Connection(from_child_r, writable=False)
            status, detail = "failed", ""
            if recv.poll(120):
                try:
                    status, detail = recv.recv()
                except (EOFError, OSError):
                    detail = f"exit code {process.wait(10)}: {_log_tail(self._log)}"
            if status == "ready":
                self._process, self._send, self._recv = process, send, recv
                return
            last = detail
            send.close()
            recv.close()
            self._kill(process)
            time.sleep(2.0)
        raise RuntimeError(f"the read worker does not start: {last}")

    @staticmethod
    def _kill(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.kill()
        process.wait(10)

    def read(self, path: Path, selection: Selection) -> ReadResult:
        """One read of ``selection`` from the array at ``path``."""
        if self._process is None:
            self._start()
        assert self._process is not None and self._send is not None and self._recv is not None
        try:
            self._send.send(("read", str(path), selection, self.timeout * 0.8))
            if not self._recv.poll(self.timeout):
                self._drop()
                return ReadResult("hang", message=f"no result after {self.timeout:g} s\n{_log_tail(self._log)}")
            result: ReadResult = self._recv.recv()
            return result
        except (EOFError, OSError):
            pass
        code = self._process.wait(10)
        self._drop()
        reason = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return ReadResult("crash", message=f"worker died ({reason})\n{_log_tail(self._log)}")

    def _drop(self) -> None:
        for conn in (self._send, self._recv):
            if conn is not None:
                conn.close()
        if self._process is not None:
            self._kill(self._process)
        self._process, self._send, self._recv = None, None, None

    def close(self) -> None:
        """Stops the worker."""
        if self._process is not None and self._send is not None:
            try:
                self._send.send(("stop",))
                self._process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._drop()


# ----------------------------------------------------------------------------------------------
# Classification, the report and the loop


def native(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy in native byte order."""
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    return np.array(a, order="C")


def bits_equal(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Same shape, same type, same bytes (NaN payloads count)."""
    a, e = native(actual), native(expected)
    return a.shape == e.shape and a.dtype == e.dtype and a.tobytes() == e.tobytes()


@dataclass(frozen=True)
class Outcome:
    """One read's classification."""

    outcome: str
    detail: str = ""  # error class / exception text / checksum failures
    violation: str = ""  # why it breaks the rule ("" when it does not)
    unverified: bool = False  # same data although a checksum the read covers fails


def violation_reason(outcome: str, checksum_failed: Sequence[str], changed: Sequence[str]) -> str:
    """Why a read outcome breaks the rule, or "" (see the module docstring)."""
    if outcome in (GENERIC, CRASH, HANG):
        return outcome
    if outcome == DIFFERENT and checksum_failed:
        return "different data although a crc32c check fails: " + "; ".join(checksum_failed)
    if outcome == DIFFERENT and not changed:
        return "different data although no file the read covers changed"
    return ""


def classify(arr: StoredArray, mutation: Mutation, after: Mapping[str, bytes], selection: Selection,
             result: ReadResult) -> Outcome:
    """The outcome of one read of the mutated copy."""
    if result.status in ("crash", "hang"):
        return Outcome(CRASH if result.status == "crash" else HANG, result.message,
                       violation_reason(CRASH if result.status == "crash" else HANG, [], []))
    if result.status == "error":
        if result.typed:
            return Outcome(TYPED, result.error_type.rsplit(".", 1)[-1])
        text = f"{result.error_type}: {result.message} (at {result.where})"
        return Outcome(GENERIC, text, violation_reason(GENERIC, [], []))
    assert result.value is not None
    expected = np.asarray(arr.values[selection])
    failed = [] if mutation.is_metadata else checksum_failures(arr, after, selection)
    if not result.shrunk and bits_equal(result.value, expected):
        return Outcome(SAME, unverified=bool(failed))
    if mutation.is_metadata:
        return Outcome(DIFFERENT_META)
    changed = touched_changes(arr, after, selection)
    return Outcome(DIFFERENT, "; ".join(failed), violation_reason(DIFFERENT, failed, changed))


@dataclass
class Case:
    """One drawn case: an array, a mutation and the reads of the mutated copy."""

    seed: int
    iteration: int
    array: StoredArray
    mutation: Mutation
    selections: list[Selection]


def draw_case(seed: int, iteration: int, corpus: Sequence[StoredArray], mutator: Mutator) -> Case:
    """The case of ``(seed, iteration)``: depends on nothing else (given the same corpus)."""
    rng = random.Random(f"{seed}:{iteration}")
    while True:
        arr = rng.choice(corpus)
        kind = rng.choice(mutator.applicable(arr))
        mutation = mutator.draw(rng, arr, kind)
        if mutation is not None:
            break
    data_key = None if mutation.is_metadata else mutation.target
    selections: list[Selection] = [Ellipsis, random_selection(rng, arr.spec.shape),
                                   chunk_selection(rng, arr, data_key)]
    return Case(seed, iteration, arr, mutation, selections)


REPRO_PATH = "/tmp/zd-mutation-repro.zarr"


def reproducer(case: Case, selection: Selection) -> str:
    """A self-contained script: write the array with zarr-python, mutate it, read it."""
    lines = [
        "import json, pathlib",
        "import numcodecs, numpy as np, zarr",
        _CODEC_IMPORTS,
        "import zarr_device as zd",
        "",
        f"path = {REPRO_PATH!r}",
        *case.array.spec.creation_code(),
        "root = pathlib.Path(path)",
        *case.mutation.code(),
        f"print(zd.open_array(path)[{format_selection(selection)}])",
    ]
    return "\n".join(lines)


@dataclass
class ViolationGroup:
    """Violations with one cause (signature); the first example in full."""

    signature: str
    count: int
    kinds: Counter[str]
    arrays: Counter[str]
    outcome: str
    detail: str
    mutation: str
    array: str
    selection: str
    case: tuple[int, int]
    reproducer: str


def _normalize(text: str, workdir: str) -> str:
    """A message with its varying parts (paths, numbers, bytes) replaced, for grouping."""
    text = text.replace(workdir, "<dir>")
    text = re.sub(r"case-\d+", "case-*", text)
    text = re.sub(r"'c[/.][0-9/.]*'|'[0-9][0-9/.]*'", "'<key>'", text)
    text = re.sub(r"0x[0-9a-fA-F]+|\b\d+\b", "N", text)
    text = re.sub(r"b'[^']*'|b\"[^\"]*\"", "b'...'", text)
    return text[:240]


def _signature(outcome: Outcome, kind: str, spec: ArraySpec, workdir: str) -> str:
    """The grouping key of a violation: its kind of failure and what it names."""
    if outcome.outcome == GENERIC:  # type, where (no line), the message's first words
        text, _, where = outcome.detail.rpartition(" (at ")
        where = re.sub(r":\d+", "", where.rstrip(")"))
        kind_, _, message = text.partition(": ")
        words = " ".join(_normalize(message, workdir).split()[:6])
        return f"{GENERIC}: {kind_} at {where}: {words} ..."
    if outcome.outcome in (CRASH, HANG):
        first = outcome.detail.splitlines()[0] if outcome.detail else ""
        return f"{outcome.outcome}: {kind}: {_normalize(first, workdir)}"
    head, _, where = outcome.violation.partition(": ")
    where = re.sub(r" \(\d+(, \d+)*,?\)| \(\)", "", where.split(";")[0])
    layout = f"{spec.compressor or 'no compressor'}{'+crc32c' if spec.crc32c else ''}"
    if spec.shards is not None:
        layout += f", sharded (index {spec.index_location}{'+crc32c' if spec.index_crc32c else ''})"
    return f"{head} ({kind}; {layout}){': ' + _normalize(where, workdir) if where else ''}"


@dataclass
class FuzzReport:
    """Counts of outcomes per mutation kind, typed error classes and grouped violations."""

    seed: int
    workdir: str = ""
    cases: int = 0
    reads: int = 0
    seconds: float = 0.0
    worker_starts: int = 0
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    typed: dict[str, Counter[str]] = field(default_factory=dict)
    generic: Counter[str] = field(default_factory=Counter)
    unverified: Counter[str] = field(default_factory=Counter)
    groups: dict[str, ViolationGroup] = field(default_factory=dict)
    baseline_failures: list[str] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return sum(g.count for g in self.groups.values()) + len(self.baseline_failures)

    def add(self, case: Case, selection: Selection, outcome: Outcome) -> None:
        kind = case.mutation.kind
        self.reads += 1
        self.counts.setdefault(kind, Counter())[outcome.outcome] += 1
        if outcome.outcome == TYPED:
            self.typed.setdefault(kind, Counter())[outcome.detail] += 1
        if outcome.outcome == GENERIC:
            self.generic[_normalize(outcome.detail, self.workdir)] += 1
        if outcome.unverified:
            self.unverified[kind] += 1
        if not outcome.violation:
            return
        self.counts[kind]["violations"] += 1
        signature = _signature(outcome, kind, case.array.spec, self.workdir)
        group = self.groups.get(signature)
        if group is None:
            group = self.groups[signature] = ViolationGroup(
                signature, 0, Counter(), Counter(), outcome.outcome,
                outcome.detail if outcome.outcome != DIFFERENT else outcome.violation,
                case.mutation.detail, case.array.spec.describe(), format_selection(selection),
                (case.seed, case.iteration), reproducer(case, selection))
        group.count += 1
        group.kinds[kind] += 1
        group.arrays[case.array.spec.describe()] += 1

    def table(self) -> str:
        """Outcomes per mutation kind (one row each, and the totals)."""
        columns = ("reads", SAME, TYPED, DIFFERENT, DIFFERENT_META, GENERIC, CRASH, HANG, "violations")
        heads = ("reads", "same", "typed", "diff", "diff(meta)", "generic", "crash", "hang", "VIOLATIONS")
        rows: list[tuple[str, list[int]]] = []
        total: Counter[str] = Counter()
        for kind in sorted(self.counts):
            c = self.counts[kind]
            c_reads = sum(c[o] for o in OUTCOMES)
            total.update(c)
            rows.append((kind, [c_reads] + [c[o] for o in columns[1:]]))
        rows.append(("TOTAL", [sum(total[o] for o in OUTCOMES)] + [total[o] for o in columns[1:]]))
        width = max(len(k) for k, _ in rows)
        lines = [f"{'mutation':<{width}} " + " ".join(f"{h:>10}" for h in heads)]
        for kind, values in rows:
            lines.append(f"{kind:<{width}} " + " ".join(f"{v:>10}" for v in values))
        return "\n".join(lines)

    def details(self) -> str:
        """Typed error classes per kind, generic exceptions and unverified checksums."""
        lines = ["typed errors by class:"]
        for kind in sorted(self.typed):
            lines.append(f"  {kind}: " + ", ".join(f"{k} {n}" for k, n in self.typed[kind].most_common()))
        if self.generic:
            lines.append("generic exceptions:")
            lines += [f"  {n:6d}  {text}" for text, n in self.generic.most_common()]
        if self.unverified:
            lines.append("same data although a crc32c check the read covers fails (checksum not verified):")
            lines += [f"  {kind}: {n}" for kind, n in self.unverified.most_common()]
        return "\n".join(lines)

    def summary(self) -> str:
        return (f"seed {self.seed}: {self.cases} cases, {self.reads} reads in {self.seconds:.1f} s "
                f"({self.worker_starts} worker starts); {self.violations} violations in "
                f"{len(self.groups) + len(self.baseline_failures)} groups")

    def format_violations(self, reproducers: bool = True, limit: int | None = None) -> str:
        """The violation groups, most frequent first, each with one example."""
        lines = [f"baseline: {b}" for b in self.baseline_failures]
        groups = sorted(self.groups.values(), key=lambda g: -g.count)
        for n, g in enumerate(groups[:limit]):
            lines += [
                f"[{n + 1}] {g.signature}",
                f"    {g.count} reads; kinds: " + ", ".join(f"{k} {c}" for k, c in g.kinds.most_common()),
                f"    arrays: {len(g.arrays)} configurations, e.g. {g.array}",
                f"    example (seed {g.case[0]}, iteration {g.case[1]}): {g.mutation}; read [{g.selection}]",
                "    " + "\n    ".join(g.detail.splitlines()[:12]),
            ]
            if reproducers:
                lines += ["    reproducer:", "        " + "\n        ".join(g.reproducer.splitlines())]
        if limit is not None and len(groups) > limit:
            lines.append(f"... and {len(groups) - limit} more groups")
        return "\n".join(lines)


@dataclass
class FuzzConfig:
    """What :func:`run_fuzz` does."""

    seed: int = 0
    iterations: int | None = 1000  # None: until max_seconds
    first_iteration: int = 0
    max_seconds: float | None = None
    timeout: float = 10.0  # per read
    memory_limit: int = 4 << 30  # the worker's address space (RLIMIT_AS)
    workdir: Path | None = None  # kept (with up to 100 violating cases); default: a temporary one, removed
    specs: Sequence[ArraySpec] | None = None
    kinds: Sequence[str] | None = None  # restrict the mutation kinds
    progress: Callable[[FuzzReport], None] | None = None  # called about every 10 s
    on_read: Callable[[Case, Selection, Outcome], None] | None = None  # called after every read


def run_fuzz(config: FuzzConfig) -> FuzzReport:
    """Builds the corpus, checks that every array reads back unmutated, then runs the cases."""
    own_dir = config.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="zd-mutation-")) if config.workdir is None else Path(config.workdir)
    report = FuzzReport(config.seed, workdir=str(workdir))
    start = time.monotonic()
    runner = ReadRunner(workdir, config.timeout, config.memory_limit)
    try:
        corpus = build_corpus(workdir / "corpus", config.specs or default_specs())
        good: list[StoredArray] = []
        for arr in corpus:
            result = runner.read(arr.root, Ellipsis)
            if result.status == "ok" and result.value is not None and bits_equal(result.value, arr.values):
                good.append(arr)
            else:
                report.baseline_failures.append(
                    f"{arr.spec.describe()}: unmutated read gives {result.status} {result.error_type} "
                    f"{result.message[:300]}")
        mutator = Mutator(corpus)
        if config.kinds is not None:
            mutator.kinds = {k: v for k, v in mutator.kinds.items() if k in config.kinds}
            good = [a for a in good if mutator.applicable(a)]
        scratch = workdir / "scratch"
        scratch.mkdir(exist_ok=True)
        last_progress = time.monotonic()
        kept = 0
        for iteration in itertools.count(config.first_iteration):
            if config.iterations is not None and iteration >= config.first_iteration + config.iterations:
                break
            if config.max_seconds is not None and time.monotonic() - start > config.max_seconds:
                break
            if not good:
                break
            case = draw_case(config.seed, iteration, good, mutator)
            root = scratch / f"case-{iteration}"
            shutil.rmtree(root, ignore_errors=True)  # left by an interrupted run in the same workdir
            shutil.copytree(case.array.root, root)
            case.mutation.apply(root)
            after = read_files(root)
            violated = False
            for selection in case.selections:
                outcome = classify(case.array, case.mutation, after, selection, runner.read(root, selection))
                report.add(case, selection, outcome)
                violated = violated or bool(outcome.violation)
                if config.on_read is not None:
                    config.on_read(case, selection, outcome)
            if violated and not own_dir and kept < 100:
                kept += 1  # the mutated copy stays in the given workdir, for a look
            else:
                shutil.rmtree(root)
            report.cases += 1
            if config.progress is not None and time.monotonic() - last_progress > 10:
                last_progress = time.monotonic()
                report.seconds = last_progress - start
                report.worker_starts = runner.starts
                config.progress(report)
    finally:
        runner.close()
        report.seconds = time.monotonic() - start
        report.worker_starts = runner.starts
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


def run_reproducer(code: str, timeout: float = 60.0) -> str:
    """Runs a reproducer in a fresh interpreter; returns its exit status and last output lines."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s"
    status = f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit {proc.returncode}"
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return f"{status}: " + " | ".join(line[:300] for line in tail)
