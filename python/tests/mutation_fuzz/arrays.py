"""The corpus: the arrays zarr-python is asked to write (:class:`ArraySpec`), the arrays as
written (:class:`StoredArray`: values and every stored file's bytes), and the layout of a stored
shard (its index and inner chunk entries)."""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import google_crc32c
import numpy as np


METADATA_KEYS = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})


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
# Shard files (their index and its entries) and crc32c

MISSING = 2**64 - 1  # a shard index entry's "no inner chunk" marker (offset and nbytes)


def crc32c_bytes(data: bytes) -> bytes:
    return struct.pack("<I", google_crc32c.value(data))


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
