"""The golden cases tensorstore writes (zarr3, including the types NumPy has no native type for),
how it writes an array, and the names it gives the types it writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

from .fixtures import Case, Golden
from .values import EXTENSION_DTYPES, bits_equal, make_values, model, written_region


def ts_array(
    golden: Golden,
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
    store = golden.store_dir(writer, case)
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
    return golden.record(writer, case, case, "", 3, want, description, dtype_name=dtype)


def zstd(level: int = 0, checksum: bool = False) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}


def bytes_le() -> dict[str, Any]:
    return {"name": "bytes", "configuration": {"endian": "little"}}


def make_tensorstore(g: Golden) -> dict[str, str]:
    """Returns {requested dtype: data_type tensorstore wrote}."""
    ts_array(g, "ts_float32_zstd", "float32", (7, 5), (3, 2), [bytes_le(), zstd(3)], description="tensorstore float32 + zstd")
    ts_array(
        g, "ts_float32_shard", "float32", (10, 9), (4, 6),
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 3], "codecs": [bytes_le(), zstd(1)],
            "index_codecs": [bytes_le(), {"name": "crc32c"}], "index_location": "end"}}],
        description="tensorstore float32 sharded",
    )
    ts_array(
        g, "ts_float32_shard_start", "float32", (13,), (8,),
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [bytes_le()],
            "index_codecs": [bytes_le(), {"name": "crc32c"}], "index_location": "start"}}],
        description="tensorstore float32 sharded, index at start",
    )
    names: dict[str, str] = {}
    for dt in EXTENSION_DTYPES:
        note = " (no zero in this type: fill_value 0.0 is read as bits 0x00)" if dt == "float8_e8m0fnu" else ""
        raw = ts_array(g, f"ts_{dt}_raw", dt, (7, 5), (3, 2), [bytes_le()], description=f"tensorstore {dt}, raw bytes{note}")
        ts_array(g, f"ts_{dt}_zstd", dt, (13,), (4,), [bytes_le(), zstd(3)], description=f"tensorstore {dt} + zstd{note}")
        if raw is not None:
            assert raw.ts_data_type is not None
            names[dt] = raw.ts_data_type
    ts_array(
        g, "ts_bfloat16_shard", "bfloat16", (10, 9), (4, 6),
        [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2, 3], "codecs": [bytes_le(), zstd(1)],
            "index_codecs": [bytes_le(), {"name": "crc32c"}], "index_location": "end"}}],
        description="tensorstore bfloat16 sharded",
    )
    ts_array(g, "ts_bfloat16_fill", "bfloat16", (13,), (4,), [bytes_le()], fill_value=1.5, description="bfloat16 fill 1.5")
    ts_array(g, "ts_float8_e4m3fn_fill_nan", "float8_e4m3fn", (13,), (4,), [bytes_le()], fill_value="NaN", description="float8_e4m3fn fill NaN")
    ts_array(g, "ts_float8_e5m2_fill_neginf", "float8_e5m2", (13,), (4,), [bytes_le()], fill_value="-Infinity", description="float8_e5m2 fill -Infinity")
    ts_array(
        g, "ts_transpose_int32", "int32", (4, 6, 5), (3, 4, 2),
        [{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, bytes_le(), zstd(1)],
        description="tensorstore transpose [2,0,1]",
    )
    ts_array(
        g, "ts_transpose_bfloat16_big", "bfloat16", (7, 5), (3, 2),
        [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}],
        description="tensorstore bfloat16 transpose + big endian",
    )
    ts_array(g, "ts_big_endian_float64", "float64", (13,), (4,), [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip", "configuration": {"level": 5}}], description="tensorstore big endian + gzip")
    ts_array(g, "ts_blosc_uint16", "uint16", (7, 5), (3, 2), [bytes_le(), {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2, "blocksize": 0}}], description="tensorstore blosc")
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
