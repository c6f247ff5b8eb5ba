#!/usr/bin/env python3
"""(Re)creates the golden fixtures under python/tests/golden/.

Each case is a small array (or group) written by a reference implementation, zarr-python or
tensorstore, next to the values it must read back as:

    python/tests/golden/<writer>/<case>/        the Zarr store (array or group at its root)
    python/tests/golden/<writer>/<case>.npy     the expected values of the array
    python/tests/golden/manifest.json           one entry per case (see `Case` below)

Types NumPy has no native type for (bfloat16, float8_*) are stored in the .npy as their raw bits
(uint16 / uint8); the manifest gives the dtype name, and `expected_bits` is true for them.

The data is deterministic (seeded), and every array leaves regions unwritten, so that some chunks
(and some inner chunks of shards) are missing from the store and read as the fill value.

Usage:
    python scripts/make_golden.py [--out DIR]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import shutil
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import ml_dtypes
import numcodecs
import numpy as np
import tensorstore as ts
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "python" / "tests" / "golden"

# Types with no native NumPy type: the .npy holds their bits as this unsigned integer type.
EXTENSION_DTYPES: dict[str, np.dtype[Any]] = {
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "float8_e3m4": np.dtype(ml_dtypes.float8_e3m4),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
}

CORE_DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


@dataclass
class Case:
    """One manifest entry."""

    name: str  # unique: "<writer>/<case>" or "<writer>/<case>:<node path>"
    writer: str  # "zarr-python" | "tensorstore"
    zarr_format: int
    kind: str  # "array" | "group"
    store: str  # the store directory, relative to the golden directory
    path: str  # the node's path inside the store ("" for the root)
    dtype: str | None = None  # Zarr v3 name of the data type
    shape: list[int] | None = None
    chunks: list[int] | None = None  # the inner chunk shape (read chunk)
    shards: list[int] | None = None  # the shard shape, None without sharding
    codecs: Any = None  # v3: the "codecs" list of zarr.json; v2: compressor/filters/order
    fill_value: Any = None  # as written in the metadata
    expected: str | None = None  # .npy path relative to the golden directory
    expected_bits: bool = False  # the .npy holds raw bits (bfloat16, float8)
    attributes: dict[str, Any] = field(default_factory=dict)
    chunk_key_encoding: Any = None
    v2_dtype: str | None = None  # v2 only: the dtype string of .zarray
    ts_data_type: str | None = None  # tensorstore only: the data_type written to zarr.json
    members: dict[str, str] | None = None  # groups only: member name -> "array" | "group"
    missing_chunks: list[str] = field(default_factory=list)  # chunk keys absent from the store
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if value is None:
                continue
            out[key] = value
        return out


# ----------------------------------------------------------------------------------------------
# Deterministic data


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def make_values(dtype_name: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Seeded values of the given type, with special float values sprinkled in."""
    rng = np.random.default_rng(_seed(name))
    n = int(np.prod(shape, dtype=np.int64))
    if dtype_name in EXTENSION_DTYPES:
        dt = EXTENSION_DTYPES[dtype_name]
        bits_dt = np.uint16 if dt.itemsize == 2 else np.uint8
        bits = rng.integers(0, np.iinfo(bits_dt).max, size=n, endpoint=True, dtype=bits_dt)
        return bits.view(dt).reshape(shape)
    dt = np.dtype(dtype_name)
    if dt.kind == "b":
        return (rng.random(n) < 0.5).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        vals = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dt)
        if n >= 2:
            vals[0] = info.min
            vals[-1] = info.max
        return vals.reshape(shape)
    if dt.kind == "f":
        vals = (rng.standard_normal(n) * 100.0).astype(dt)
        specials = _float_specials(dt)
        for i, v in enumerate(specials):
            if 2 * i + 1 < n:
                vals[2 * i + 1] = v
        return vals.reshape(shape)
    if dt.kind == "c":
        part = np.dtype(f"f{dt.itemsize // 2}")
        re = make_values(part.name, (n,), name + ".re")
        im = make_values(part.name, (n,), name + ".im")
        vals = np.empty(n, dtype=dt)
        vals.real = re
        vals.imag = im
        return vals.reshape(shape)
    raise ValueError(dtype_name)


def _float_specials(dt: np.dtype[Any]) -> list[Any]:
    """NaN, a NaN with a non-default payload, -0.0, +/-inf: all must survive bit for bit."""
    payload_nan = {
        2: np.array([0x7E01], dtype=np.uint16).view(np.float16)[0],
        4: np.array([0x7FA00001], dtype=np.uint32).view(np.float32)[0],
        8: np.array([0xFFF8000000000123], dtype=np.uint64).view(np.float64)[0],
    }[dt.itemsize]
    return [dt.type(np.nan), payload_nan, dt.type(-0.0), dt.type(np.inf), dt.type(-np.inf)]


def written_region(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[slice, ...]:
    """The region a case writes: partial edge chunks, and the last chunk row left unwritten."""
    region = []
    for n, c in zip(shape, chunks):
        stop = n - c if n - c >= 2 else n
        start = 1 if stop - 1 >= 1 and n > c else 0
        region.append(slice(start, stop))
    return tuple(region)


def model(
    values: np.ndarray, fill: Any, region: tuple[slice, ...] | None = None
) -> np.ndarray:
    full = np.empty(values.shape, dtype=values.dtype)
    full[...] = fill
    if region is None:
        full[...] = values
    else:
        full[region] = values[region]
    return full


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.array(a, order="C")
    b = np.array(b, order="C")
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    if b.dtype.byteorder not in "=|":
        b = b.astype(b.dtype.newbyteorder("="))
    return (
        a.shape == b.shape
        and a.dtype.itemsize == b.dtype.itemsize
        and a.tobytes() == b.tobytes()
    )


# ----------------------------------------------------------------------------------------------
# Writers


class Golden:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.cases: list[Case] = []

    def _store_dir(self, writer: str, case: str) -> Path:
        path = self.out / writer / case
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _save_expected(self, writer: str, stem: str, values: np.ndarray) -> tuple[str, bool]:
        rel = f"{writer}/{stem}.npy"
        values = np.array(values, order="C")
        bits = False
        if values.dtype in EXTENSION_DTYPES.values():
            values = values.view(np.uint16 if values.dtype.itemsize == 2 else np.uint8)
            bits = True
        elif values.dtype.byteorder not in "=|":
            values = values.astype(values.dtype.newbyteorder("="))
        np.save(self.out / rel, values, allow_pickle=False)
        return rel, bits

    def _missing(self, store: Path, node: str, meta: dict[str, Any], fmt: int) -> list[str]:
        """Chunk keys of the (outer) chunk grid that are absent from the store."""
        if fmt == 3:
            shape = meta["shape"]
            grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
            cke = meta["chunk_key_encoding"]
            sep = cke.get("configuration", {}).get("separator", "/" if cke["name"] == "default" else ".")
            prefix = "c" + sep if cke["name"] == "default" else ""
        else:
            shape = meta["shape"]
            grid = meta["chunks"]
            sep = meta.get("dimension_separator", ".")
            prefix = ""
        counts = [math.ceil(s / c) for s, c in zip(shape, grid)]
        missing = []
        for idx in np.ndindex(*counts):
            if not idx:
                key = "c" if fmt == 3 and cke["name"] == "default" else "0"
            else:
                key = prefix + sep.join(str(i) for i in idx)
            if not (store / node / key).exists():
                missing.append(key)
        return missing

    # -- zarr-python ----------------------------------------------------------------------------

    def zarr_array(
        self,
        case: str,
        dtype: str,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        *,
        zarr_format: Literal[2, 3] = 3,
        description: str = "",
        region: tuple[slice, ...] | None | Literal["auto"] = "auto",
        values: np.ndarray | None = None,
        store_name: str | None = None,
        node: str = "",
        group: zarr.Group | None = None,
        **kwargs: Any,
    ) -> Case:
        writer = "zarr-python"
        store_rel = store_name or case
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if group is None:
                store = self._store_dir(writer, case)
                arr = zarr.create_array(
                    str(store), shape=shape, dtype=dtype, chunks=chunks, zarr_format=zarr_format, **kwargs
                )
            else:
                store = self.out / writer / store_rel
                arr = group.create_array(node.rsplit("/", 1)[-1], shape=shape, dtype=dtype, chunks=chunks, **kwargs)
            fill = arr.fill_value
            if values is None:
                values = make_values(np.dtype(dtype).newbyteorder("=").name if dtype not in EXTENSION_DTYPES else dtype, shape, f"{writer}/{case}/{node}")
                values = values.astype(arr.dtype)
            grid = tuple(arr.shards) if arr.shards is not None else chunks
            written: tuple[slice, ...] | None
            if region == "auto":
                written = written_region(shape, grid) if shape else None
            else:
                written = region
            if written is None:
                arr[...] = values
            else:
                arr[written] = values[written]
            readback = arr[...]
        want = model(values, fill if fill is not None else 0, written)
        if not bits_equal(np.asarray(readback), want):
            raise AssertionError(f"{case}: zarr-python did not read back what it wrote")
        return self._record(writer, case, store_rel, node, zarr_format, want, description)

    def _record(
        self,
        writer: str,
        case: str,
        store_rel: str,
        node: str,
        zarr_format: int,
        expected: np.ndarray,
        description: str,
        dtype_name: str | None = None,
    ) -> Case:
        store = self.out / writer / store_rel
        stem = case if not node else f"{store_rel}__{node.replace('/', '__')}"
        rel, bits = self._save_expected(writer, stem, expected)
        if zarr_format == 3:
            meta = json.loads((store / node / "zarr.json").read_text())
            codecs = meta["codecs"]
            chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
            shards = None
            if codecs and codecs[0]["name"] == "sharding_indexed":
                shards = chunks
                chunks = codecs[0]["configuration"]["chunk_shape"]
            entry = Case(
                name=f"{writer}/{case}" if not node else f"{writer}/{store_rel}:{node}",
                writer=writer,
                zarr_format=3,
                kind="array",
                store=f"{writer}/{store_rel}",
                path=node,
                dtype=dtype_name or meta["data_type"],
                shape=meta["shape"],
                chunks=chunks,
                shards=shards,
                codecs=codecs,
                fill_value=meta["fill_value"],
                expected=rel,
                expected_bits=bits,
                attributes=meta.get("attributes", {}),
                chunk_key_encoding=meta["chunk_key_encoding"],
                ts_data_type=meta["data_type"] if writer == "tensorstore" else None,
                missing_chunks=self._missing(store, node, meta, 3),
                description=description,
            )
        else:
            meta = json.loads((store / node / ".zarray").read_text())
            attrs_file = store / node / ".zattrs"
            attrs = json.loads(attrs_file.read_text()) if attrs_file.exists() else {}
            v2_dtype = meta["dtype"]
            entry = Case(
                name=f"{writer}/{case}" if not node else f"{writer}/{store_rel}:{node}",
                writer=writer,
                zarr_format=2,
                kind="array",
                store=f"{writer}/{store_rel}",
                path=node,
                dtype=np.dtype(v2_dtype).newbyteorder("=").name if np.dtype(v2_dtype).kind != "b" else "bool",
                shape=meta["shape"],
                chunks=meta["chunks"],
                codecs={
                    "compressor": meta["compressor"],
                    "filters": meta["filters"],
                    "order": meta["order"],
                    "dimension_separator": meta.get("dimension_separator", "."),
                },
                fill_value=meta["fill_value"],
                expected=rel,
                attributes=attrs,
                chunk_key_encoding={"name": "v2", "configuration": {"separator": meta.get("dimension_separator", ".")}},
                v2_dtype=v2_dtype,
                missing_chunks=self._missing(store, node, meta, 2),
                description=description,
            )
        self.cases.append(entry)
        return entry

    def zarr_group(self, case: str, description: str) -> None:
        writer = "zarr-python"
        store = self._store_dir(writer, case)
        root = zarr.create_group(str(store), attributes={"title": "root group", "version": 3, "tags": ["a", "b"]})
        sub = root.create_group("sub", attributes={"level": 1, "nested": {"x": 1.5, "y": None}})
        sub.create_group("deeper", attributes={"level": 2})
        self.zarr_array(
            case, "int16", (7, 5), (3, 2), store_name=case, node="a", group=root,
            attributes={"units": "m", "scale": 0.5}, description="array member of a group",
        )
        self.zarr_array(
            case, "float32", (13,), (4,), store_name=case, node="sub/b", group=sub,
            attributes={"long_name": "nested array"}, fill_value=-1.0, description="array in a nested group",
        )
        def members(g: zarr.Group) -> dict[str, str]:
            return {
                k: ("group" if isinstance(v, zarr.Group) else "array") for k, v in sorted(g.members())
            }

        for node, g in [("", root), ("sub", sub), ("sub/deeper", sub["deeper"])]:
            assert isinstance(g, zarr.Group)
            self.cases.append(
                Case(
                    name=f"{writer}/{case}" + (f":{node}" if node else ""),
                    writer=writer,
                    zarr_format=3,
                    kind="group",
                    store=f"{writer}/{case}",
                    path=node,
                    attributes=dict(g.attrs),
                    members=members(g),
                    description=description,
                )
            )

    # -- tensorstore ----------------------------------------------------------------------------

    def ts_array(
        self,
        case: str,
        dtype: str,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        codecs: list[dict[str, Any]],
        *,
        fill_value: Any = None,
        description: str = "",
    ) -> Case | None:
        writer = "tensorstore"
        store = self._store_dir(writer, case)
        metadata: dict[str, Any] = {
            "shape": list(shape),
            "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "codecs": codecs,
        }
        if fill_value is not None:
            metadata["fill_value"] = fill_value
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store)}, "metadata": metadata}
        try:
            t = ts.open(spec, create=True).result()
        except Exception as exc:  # a type or codec this tensorstore does not write
            print(f"skip tensorstore/{case}: {exc}")
            shutil.rmtree(store, ignore_errors=True)
            return None
        values = make_values(dtype, shape, f"{writer}/{case}")
        grid = chunks
        region = written_region(shape, grid)
        t[region].write(values[region]).result()
        readback = t.read().result()
        fill = np.zeros((), dtype=values.dtype)
        if fill_value is not None:
            fill = np.asarray(t.fill_value).astype(values.dtype)
        want = model(values, fill, region)
        if not bits_equal(np.asarray(readback), want):
            raise AssertionError(f"{case}: tensorstore did not read back what it wrote")
        return self._record(writer, case, case, "", 3, want, description, dtype_name=dtype)


# ----------------------------------------------------------------------------------------------
# The cases


def zstd(level: int = 0, checksum: bool = False) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}


def bytes_le() -> dict[str, Any]:
    return {"name": "bytes", "configuration": {"endian": "little"}}


def make_zarr_python_v3(g: Golden) -> None:
    # Every core data type with the default codecs (bytes + zstd).
    for dt in CORE_DTYPES:
        g.zarr_array(f"v3_dtype_{dt}", dt, (7, 5), (3, 2), description=f"{dt}, default codecs")

    # Byte order.
    for dt in ["int32", "float64", "complex64", "uint16"]:
        for endian in ["little", "big"]:
            g.zarr_array(
                f"v3_bytes_{endian}_{dt}", dt, (13,), (4,),
                serializer=BytesCodec(endian=endian), compressors=None,
                description=f"bytes codec, {endian} endian, no compression",
            )
    g.zarr_array(
        "v3_bytes_big_zstd_float32_2d", "float32", (7, 5), (3, 2),
        serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=3)],
        description="big endian bytes + zstd",
    )

    # Transpose.
    g.zarr_array(
        "v3_transpose_3d_int32", "int32", (4, 6, 5), (3, 4, 2),
        filters=[TransposeCodec(order=(2, 0, 1))], compressors=None,
        description="transpose [2,0,1] + bytes",
    )
    g.zarr_array(
        "v3_transpose_2d_float64_zstd", "float64", (7, 5), (3, 2),
        filters=[TransposeCodec(order=(1, 0))], compressors=[ZstdCodec(level=5)],
        description="transpose [1,0] + bytes + zstd",
    )
    g.zarr_array(
        "v3_transpose_3d_uint16_big", "uint16", (4, 6, 5), (3, 4, 2),
        filters=[TransposeCodec(order=(1, 2, 0))], serializer=BytesCodec(endian="big"), compressors=None,
        description="transpose [1,2,0] + big endian bytes",
    )

    # zstd levels and checksum.
    for level in [-3, 1, 9, 22]:
        g.zarr_array(
            f"v3_zstd_level{level}_float32", "float32", (7, 5), (3, 2),
            compressors=[ZstdCodec(level=level)], description=f"zstd level {level}",
        )
    g.zarr_array(
        "v3_zstd_checksum_int64", "int64", (13,), (4,),
        compressors=[ZstdCodec(level=3, checksum=True)], description="zstd with content checksum",
    )

    # gzip.
    for level in [1, 6, 9]:
        g.zarr_array(
            f"v3_gzip_level{level}_int32", "int32", (7, 5), (3, 2),
            compressors=[GzipCodec(level=level)], description=f"gzip level {level}",
        )

    # blosc: every cname x every shuffle.
    cnames: list[Literal["lz4", "lz4hc", "blosclz", "zstd", "zlib"]] = ["lz4", "lz4hc", "blosclz", "zstd", "zlib"]
    shuffles: list[Literal["noshuffle", "shuffle", "bitshuffle"]] = ["noshuffle", "shuffle", "bitshuffle"]
    for cname in cnames:
        for shuffle in shuffles:
            g.zarr_array(
                f"v3_blosc_{cname}_{shuffle}_float32", "float32", (7, 5), (3, 2),
                compressors=[BloscCodec(cname=cname, clevel=5, shuffle=shuffle, typesize=4)],
                description=f"blosc {cname} {shuffle}",
            )
    g.zarr_array(
        "v3_blosc_zstd_bitshuffle_int16_3d", "int16", (4, 6, 5), (3, 4, 2),
        compressors=[BloscCodec(cname="zstd", clevel=9, shuffle="bitshuffle", typesize=2)],
        description="blosc zstd bitshuffle on int16",
    )
    g.zarr_array(
        "v3_blosc_lz4_shuffle_bool", "bool", (13,), (4,),
        compressors=[BloscCodec(cname="lz4", clevel=1, shuffle="shuffle", typesize=1)],
        description="blosc lz4 shuffle on bool",
    )

    # crc32c.
    g.zarr_array(
        "v3_crc32c_int32", "int32", (13,), (4,), compressors=[Crc32cCodec()], description="bytes + crc32c",
    )
    g.zarr_array(
        "v3_zstd_crc32c_float64", "float64", (7, 5), (3, 2),
        compressors=[ZstdCodec(level=3), Crc32cCodec()], description="bytes + zstd + crc32c",
    )

    # Sharding.
    def shard(inner: tuple[int, ...], codecs: list[Any], location: str, index_codecs: list[Any] | None = None) -> ShardingCodec:
        kwargs: dict[str, Any] = {"chunk_shape": inner, "codecs": codecs, "index_location": location}
        if index_codecs is not None:
            kwargs["index_codecs"] = index_codecs
        return ShardingCodec(**kwargs)

    for location in ["start", "end"]:
        g.zarr_array(
            f"v3_shard_{location}_float32", "float32", (10, 9), (4, 6),
            serializer=shard((2, 3), [BytesCodec()], location), compressors=None,
            description=f"sharding, index at {location}, inner bytes, default index codecs",
        )
        g.zarr_array(
            f"v3_shard_{location}_zstd_crc32c_int16", "int16", (10, 9), (4, 6),
            serializer=shard((2, 3), [BytesCodec(), ZstdCodec(level=3), Crc32cCodec()], location),
            compressors=None,
            description=f"sharding, index at {location}, inner bytes+zstd+crc32c",
        )
    g.zarr_array(
        "v3_shard_3d_transpose_gzip_uint32", "uint32", (4, 6, 5), (4, 4, 4),
        serializer=shard((2, 2, 2), [TransposeCodec(order=(2, 1, 0)), BytesCodec(endian="big"), GzipCodec(level=5)], "end"),
        compressors=None,
        description="sharding 3-d, inner transpose + big endian bytes + gzip",
    )
    g.zarr_array(
        "v3_shard_index_bytes_only_float64", "float64", (13,), (8,),
        serializer=shard((2,), [BytesCodec(), ZstdCodec()], "end", index_codecs=[BytesCodec()]),
        compressors=None,
        description="sharding with index codecs [bytes] (no crc32c)",
    )
    g.zarr_array(
        "v3_shard_outer_zstd_int8", "int8", (10, 9), (4, 6),
        serializer=shard((2, 3), [BytesCodec()], "end"), compressors=[ZstdCodec(level=1)],
        description="sharding followed by an outer zstd on the whole shard",
    )
    g.zarr_array(
        "v3_shard_blosc_inner_float32", "float32", (10, 9), (4, 6),
        serializer=shard((2, 3), [BytesCodec(), BloscCodec(cname="lz4", shuffle="shuffle", typesize=4)], "start"),
        compressors=None,
        description="sharding with inner blosc",
    )

    # Chunk key encodings.
    for label, cke in [
        ("default_slash", {"name": "default", "separator": "/"}),
        ("default_dot", {"name": "default", "separator": "."}),
        ("v2_dot", {"name": "v2", "separator": "."}),
        ("v2_slash", {"name": "v2", "separator": "/"}),
    ]:
        g.zarr_array(
            f"v3_cke_{label}_int32", "int32", (4, 6, 5), (3, 4, 2),
            chunk_key_encoding=cke, description=f"chunk key encoding {cke}",
        )

    # Fill values.
    g.zarr_array("v3_fill_nan_float32", "float32", (7, 5), (3, 2), fill_value=np.nan, description="fill NaN")
    g.zarr_array("v3_fill_nan_float16", "float16", (13,), (4,), fill_value=np.nan, description="fill NaN on float16")
    g.zarr_array("v3_fill_inf_float64", "float64", (7, 5), (3, 2), fill_value=np.inf, description="fill Infinity")
    g.zarr_array("v3_fill_neginf_float32", "float32", (13,), (4,), fill_value=-np.inf, description="fill -Infinity")
    g.zarr_array("v3_fill_negzero_float64", "float64", (13,), (4,), fill_value=-0.0, description="fill -0.0")
    g.zarr_array("v3_fill_42_int32", "int32", (7, 5), (3, 2), fill_value=42, description="fill 42")
    g.zarr_array("v3_fill_minus7_int8", "int8", (13,), (4,), fill_value=-7, description="fill -7")
    g.zarr_array("v3_fill_max_uint64", "uint64", (13,), (4,), fill_value=np.iinfo(np.uint64).max, description="fill 2**64-1")
    g.zarr_array("v3_fill_true_bool", "bool", (13,), (4,), fill_value=True, description="fill true")
    g.zarr_array("v3_fill_complex128", "complex128", (13,), (4,), fill_value=complex(1.5, -2.0), description="fill [1.5, -2.0]")
    g.zarr_array("v3_fill_complex64_nan", "complex64", (13,), (4,), fill_value=complex(np.nan, np.inf), description="fill [NaN, Infinity]")

    # Attributes and dimension names.
    g.zarr_array(
        "v3_attributes_float64", "float64", (7, 5), (3, 2),
        attributes={"units": "K", "scale_factor": 0.25, "valid_range": [0, 100], "nested": {"a": [1, {"b": None}], "c": True}, "unicode": "\u00e9t\u00e9"},
        dimension_names=["y", "x"],
        description="attributes and dimension names",
    )

    # A group with a nested group and arrays.
    g.zarr_group("v3_group", "group with attributes, nested groups and arrays")

    # 0-d arrays.
    g.zarr_array("v3_0d_float64", "float64", (), (), values=np.array(3.25), description="0-d array, written")
    g.zarr_array("v3_0d_int32_unwritten", "int32", (), (), fill_value=-5, region=(), values=np.array(-5, dtype=np.int32), description="0-d array, never written (fill)")

    # Chunk larger than the array, and an array with a size-0 dimension.
    g.zarr_array("v3_chunk_larger_than_array_int16", "int16", (7, 5), (16, 16), region=None, description="one chunk larger than the array")
    g.zarr_array("v3_empty_dim_float32", "float32", (0, 5), (3, 2), region=None, description="size-0 dimension")


def make_zarr_python_v2(g: Golden) -> None:
    import numcodecs as nc

    for order in ["C", "F"]:
        g.zarr_array(
            f"v2_order_{order}_float64", "float64", (7, 5), (3, 2), zarr_format=2, order=order,
            compressors=nc.Zlib(level=1), description=f"v2 order {order}",
        )
        g.zarr_array(
            f"v2_order_{order}_int16_3d", "int16", (4, 6, 5), (3, 4, 2), zarr_format=2, order=order,
            compressors=None, description=f"v2 order {order}, 3-d, no compressor",
        )
    compressors: list[tuple[str, Any]] = [
        ("zlib", nc.Zlib(level=5)),
        ("gzip", nc.GZip(level=6)),
        ("zstd", nc.Zstd(level=3)),
        ("zstd_checksum", nc.Zstd(level=1, checksum=True)),
        ("blosc_lz4_shuffle", nc.Blosc(cname="lz4", clevel=5, shuffle=nc.Blosc.SHUFFLE)),
        ("blosc_zstd_bitshuffle", nc.Blosc(cname="zstd", clevel=3, shuffle=nc.Blosc.BITSHUFFLE)),
        ("blosc_blosclz_noshuffle", nc.Blosc(cname="blosclz", clevel=9, shuffle=nc.Blosc.NOSHUFFLE)),
        ("blosc_lz4hc_shuffle", nc.Blosc(cname="lz4hc", clevel=5, shuffle=nc.Blosc.SHUFFLE)),
        ("blosc_zlib_bitshuffle", nc.Blosc(cname="zlib", clevel=5, shuffle=nc.Blosc.BITSHUFFLE)),
        ("lz4", nc.LZ4(acceleration=1)),
        ("none", None),
    ]
    for label, comp in compressors:
        g.zarr_array(
            f"v2_{label}_int32", "int32", (7, 5), (3, 2), zarr_format=2, compressors=comp,
            description=f"v2 compressor {label}",
        )
    g.zarr_array(
        "v2_blosc_lz4_shuffle_float64_F", "float64", (4, 6, 5), (3, 4, 2), zarr_format=2, order="F",
        compressors=nc.Blosc(cname="lz4", clevel=5, shuffle=nc.Blosc.SHUFFLE), description="v2 blosc + order F",
    )
    for sep, label in [(".", "dot"), ("/", "slash")]:
        g.zarr_array(
            f"v2_separator_{label}_uint8", "uint8", (4, 6, 5), (3, 4, 2), zarr_format=2,
            chunk_key_encoding={"name": "v2", "separator": sep}, compressors=nc.Zstd(level=1),
            description=f"v2 dimension_separator {sep!r}",
        )
    g.zarr_array("v2_fill_nan_float32", "float32", (7, 5), (3, 2), zarr_format=2, fill_value=np.nan, description="v2 fill NaN")
    g.zarr_array("v2_fill_null_int32", "int32", (7, 5), (3, 2), zarr_format=2, fill_value=None, description="v2 fill null (missing chunks read as 0)")
    g.zarr_array("v2_fill_null_float64", "float64", (13,), (4,), zarr_format=2, fill_value=None, description="v2 fill null on float64")
    g.zarr_array("v2_fill_7_uint16", "uint16", (13,), (4,), zarr_format=2, fill_value=7, description="v2 fill 7")
    for dt in [">i4", ">f8", ">u2", ">c8"]:
        g.zarr_array(
            f"v2_bigendian_{np.dtype(dt).name}", dt, (7, 5), (3, 2), zarr_format=2,
            compressors=nc.Zlib(level=1), description=f"v2 big endian {dt}",
        )
    for dt in ["bool", "int8", "uint64", "float16", "complex128"]:
        g.zarr_array(
            f"v2_dtype_{dt}", dt, (7, 5), (3, 2), zarr_format=2, compressors=nc.Zstd(level=1),
            description=f"v2 {dt}",
        )
    g.zarr_array(
        "v2_attributes_int32", "int32", (13,), (4,), zarr_format=2, attributes={"a": 1, "b": [1, 2], "c": {"d": "e"}},
        description="v2 with .zattrs",
    )
    g.zarr_array("v2_0d_float32", "float32", (), (), zarr_format=2, values=np.array(-2.5, dtype=np.float32), description="v2 0-d")


def make_tensorstore(g: Golden) -> dict[str, str]:
    """Returns {requested dtype: data_type tensorstore wrote}."""
    g.ts_array("ts_float32_zstd", "float32", (7, 5), (3, 2), [bytes_le(), zstd(3)], description="tensorstore float32 + zstd")
    g.ts_array(
        "ts_float32_shard", "float32", (10, 9), (4, 6),
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 3], "codecs": [bytes_le(), zstd(1)],
            "index_codecs": [bytes_le(), {"name": "crc32c"}], "index_location": "end"}}],
        description="tensorstore float32 sharded",
    )
    g.ts_array(
        "ts_float32_shard_start", "float32", (13,), (8,),
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [bytes_le()],
            "index_codecs": [bytes_le(), {"name": "crc32c"}], "index_location": "start"}}],
        description="tensorstore float32 sharded, index at start",
    )
    names: dict[str, str] = {}
    for dt in EXTENSION_DTYPES:
        note = " (no zero in this type: fill_value 0.0 is read as bits 0x00)" if dt == "float8_e8m0fnu" else ""
        raw = g.ts_array(f"ts_{dt}_raw", dt, (7, 5), (3, 2), [bytes_le()], description=f"tensorstore {dt}, raw bytes{note}")
        g.ts_array(f"ts_{dt}_zstd", dt, (13,), (4,), [bytes_le(), zstd(3)], description=f"tensorstore {dt} + zstd{note}")
        if raw is not None:
            assert raw.ts_data_type is not None
            names[dt] = raw.ts_data_type
    g.ts_array(
        "ts_bfloat16_shard", "bfloat16", (10, 9), (4, 6),
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 3], "codecs": [bytes_le(), zstd(1)],
            "index_codecs": [bytes_le(), {"name": "crc32c"}], "index_location": "end"}}],
        description="tensorstore bfloat16 sharded",
    )
    g.ts_array("ts_bfloat16_fill", "bfloat16", (13,), (4,), [bytes_le()], fill_value=1.5, description="bfloat16 fill 1.5")
    g.ts_array("ts_float8_e4m3fn_fill_nan", "float8_e4m3fn", (13,), (4,), [bytes_le()], fill_value="NaN", description="float8_e4m3fn fill NaN")
    g.ts_array("ts_float8_e5m2_fill_neginf", "float8_e5m2", (13,), (4,), [bytes_le()], fill_value="-Infinity", description="float8_e5m2 fill -Infinity")
    g.ts_array(
        "ts_transpose_int32", "int32", (4, 6, 5), (3, 4, 2),
        [{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, bytes_le(), zstd(1)],
        description="tensorstore transpose [2,0,1]",
    )
    g.ts_array(
        "ts_transpose_bfloat16_big", "bfloat16", (7, 5), (3, 2),
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}],
        description="tensorstore bfloat16 transpose + big endian",
    )
    g.ts_array("ts_big_endian_float64", "float64", (13,), (4,), [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 5}}], description="tensorstore big endian + gzip")
    g.ts_array("ts_blosc_uint16", "uint16", (7, 5), (3, 2), [bytes_le(), {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2, "blocksize": 0}}], description="tensorstore blosc")
    return names


def tensorstore_other_dtype_names(tmp: Path) -> dict[str, str | None]:
    """Other type names probed on tensorstore: the sub-byte types it also writes (not golden cases)
    and a float8 spelling it refuses. Requested name -> data_type written, or None if refused."""
    out: dict[str, str | None] = {}
    for dt in ["int4", "float4_e2m1fn", "float8_e4m3"]:
        path = tmp / dt
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)},
                "metadata": {"shape": [4], "data_type": dt,
                             "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}}}
        try:
            ts.open(spec, create=True).result()
            out[dt] = json.loads((path / "zarr.json").read_text())["data_type"]
        except Exception:
            out[dt] = None
    return out


def _reproducible_gzip() -> None:
    """gzip streams carry a modification time; pin it to 0 so reruns give identical files."""
    init = gzip.GzipFile.__init__

    @functools.wraps(init)
    def patched(self: gzip.GzipFile, *args: Any, **kwargs: Any) -> None:
        if len(args) < 5:
            kwargs.setdefault("mtime", 0)
        init(self, *args, **kwargs)

    gzip.GzipFile.__init__ = patched  # type: ignore[method-assign]


def main() -> None:
    _reproducible_gzip()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    out: Path = args.out
    for writer in ["zarr-python", "tensorstore"]:
        if (out / writer).exists():
            shutil.rmtree(out / writer)
    out.mkdir(parents=True, exist_ok=True)
    g = Golden(out)
    make_zarr_python_v3(g)
    make_zarr_python_v2(g)
    ts_names = make_tensorstore(g)
    with tempfile.TemporaryDirectory() as tmp:
        other_names = tensorstore_other_dtype_names(Path(tmp))
    manifest = {
        "format": 1,
        "generator": "scripts/make_golden.py",
        "versions": {
            "zarr-python": zarr.__version__,
            "numcodecs": numcodecs.__version__,
            "numpy": np.__version__,
            "ml_dtypes": ml_dtypes.__version__,
        },
        "tensorstore_dtype_names": ts_names,
        "tensorstore_other_dtype_names": other_names,
        "cases": [c.to_json() for c in g.cases],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{len(g.cases)} cases, {total / 1024:.0f} KiB in {out}")


if __name__ == "__main__":
    main()
