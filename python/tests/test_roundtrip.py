"""Interoperability: arrays written by zarr_device are read bit-exact by zarr-python and tensorstore,
arrays written by zarr-python are read bit-exact by zarr_device, and partial writes (read-modify-
write of partial chunks and shards) leave the same values as zarr-python does."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from conftest import (
    CORE_DTYPES,
    EXTENSION_DTYPES,
    assert_bits_equal,
    basic_selections,
    bytes_codec,
    fill_from_json,
    fill_to_json,
    numpy_dtype,
    random_values,
    selection_id,
    tensorstore_read,
    write_v3_metadata,
    zarr_python_array,
    zd_supported_dtypes,
)

zd = pytest.importorskip("zarr_device")
zarr = pytest.importorskip("zarr")

pytestmark = pytest.mark.filterwarnings("ignore:Combining a .sharding_indexed. codec")

# ----------------------------------------------------------------------------------------------
# Codec chains (Zarr v3 JSON), as functions of the data type


def _zstd(level: int = 3, checksum: bool = False) -> dict[str, Any]:
    return {"name": "zstd", "configuration": {"level": level, "checksum": checksum}}


def _gzip(level: int = 5) -> dict[str, Any]:
    return {"name": "gzip", "configuration": {"level": level}}


def _blosc(cname: str, shuffle: str, itemsize: int, clevel: int = 5) -> dict[str, Any]:
    return {
        "name": "blosc",
        "configuration": {"cname": cname, "clevel": clevel, "shuffle": shuffle, "typesize": itemsize, "blocksize": 0},
    }


def _transpose(ndim: int) -> dict[str, Any]:
    return {"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}}


def _shard(inner: list[int], codecs: list[dict[str, Any]], location: str = "end",
           index_codecs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": inner,
            "codecs": codecs,
            "index_codecs": index_codecs
            if index_codecs is not None
            else [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": location,
        },
    }


CRC = {"name": "crc32c"}


def _shuffle(elementsize: int) -> dict[str, Any]:
    return {"name": "numcodecs.shuffle", "configuration": {"elementsize": elementsize}}

# name -> builder(dtype, ndim) -> codecs; sharded chains also need inner chunks (see SHARDED)
Chain = Callable[[np.dtype[Any], int], list[dict[str, Any]]]
CHAINS: dict[str, Chain] = {
    "bytes_little": lambda dt, nd: [bytes_codec(dt, "little")],
    "bytes_big": lambda dt, nd: [bytes_codec(dt, "big")],
    "transpose": lambda dt, nd: [_transpose(nd), bytes_codec(dt)],
    "transpose_big_zstd": lambda dt, nd: [_transpose(nd), bytes_codec(dt, "big"), _zstd(1)],
    "zstd": lambda dt, nd: [bytes_codec(dt), _zstd(3)],
    "zstd_negative_level": lambda dt, nd: [bytes_codec(dt), _zstd(-5)],
    "zstd_checksum": lambda dt, nd: [bytes_codec(dt), _zstd(1, True)],
    "gzip": lambda dt, nd: [bytes_codec(dt), _gzip(5)],
    "crc32c": lambda dt, nd: [bytes_codec(dt), CRC],
    "zstd_crc32c": lambda dt, nd: [bytes_codec(dt), _zstd(3), CRC],
    # numcodecs' shuffle (as zarr-python writes it), with its element size and without (the item
    # size then), before zstd and alone.
    "shuffle_zstd": lambda dt, nd: [bytes_codec(dt), _shuffle(dt.itemsize), {"name": "numcodecs.zstd", "configuration": {"level": 1}}],
    "shuffle_default_zstd_crc32c": lambda dt, nd: [bytes_codec(dt), {"name": "numcodecs.shuffle", "configuration": {}}, _zstd(1), CRC],
    "shuffle_2": lambda dt, nd: [bytes_codec(dt), _shuffle(2 if dt.itemsize % 2 == 0 else 1)],
    **{
        f"blosc_{cname}_{shuffle}": (lambda c, s: lambda dt, nd: [bytes_codec(dt), _blosc(c, s, dt.itemsize)])(
            cname, shuffle
        )
        for cname in ["lz4", "lz4hc", "blosclz", "zstd", "zlib"]
        for shuffle in ["noshuffle", "shuffle", "bitshuffle"]
    },
}

SHAPE = (11, 7)
CHUNKS = (4, 3)
SHARD = (8, 6)
INNER = [4, 3]

SHARDED: dict[str, Chain] = {
    "shard_end_bytes": lambda dt, nd: [_shard(INNER, [bytes_codec(dt)], "end")],
    "shard_start_zstd_crc32c": lambda dt, nd: [_shard(INNER, [bytes_codec(dt), _zstd(3), CRC], "start")],
    "shard_end_transpose_gzip": lambda dt, nd: [_shard(INNER, [_transpose(nd), bytes_codec(dt, "big"), _gzip(1)], "end")],
    "shard_index_bytes_only": lambda dt, nd: [_shard(INNER, [bytes_codec(dt), _zstd(1)], "start", [bytes_codec("uint64")])],
    "shard_blosc_inner": lambda dt, nd: [_shard(INNER, [bytes_codec(dt), _blosc("lz4", "bitshuffle", dt.itemsize)], "end")],
    "shard_then_zstd": lambda dt, nd: [_shard(INNER, [bytes_codec(dt)], "end"), _zstd(1)],
    "shard_shuffle_zstd": lambda dt, nd: [_shard(INNER, [bytes_codec(dt), _shuffle(dt.itemsize), _zstd(1)], "end")],
}

# Chains tensorstore does not open (a whole-shard compressor after sharding_indexed; numcodecs'
# codecs).
TENSORSTORE_REFUSES = {"shard_then_zstd", "shuffle_zstd", "shuffle_default_zstd_crc32c", "shuffle_2",
                       "shard_shuffle_zstd"}

# A few representative types for the full chain matrix, every type for a few chains.
MATRIX_DTYPES = ["float32", "int16", "complex128", "bool"]
EVERY_DTYPE_CHAINS = ["bytes_little", "bytes_big", "zstd", "transpose_big_zstd", "shard_start_zstd_crc32c"]

FILL_VALUES: dict[str, Any] = {
    "bool": True,
    "int8": -7,
    "int16": 1234,
    "int32": -42,
    "int64": -(2**62),
    "uint8": 200,
    "uint16": 7,
    "uint32": 2**32 - 1,
    "uint64": 2**64 - 1,
    "float16": -0.0,
    "float32": float("nan"),
    "float64": float("-inf"),
    "complex64": complex(float("nan"), 1.5),
    "complex128": complex(-2.5, float("inf")),
}


def _chain(name: str, dt: np.dtype[Any], ndim: int) -> tuple[list[dict[str, Any]], tuple[int, ...], tuple[int, ...] | None]:
    """(codecs, chunk grid shape, shard shape or None)."""
    if name in SHARDED:
        return SHARDED[name](dt, ndim), SHARD, SHARD
    return CHAINS[name](dt, ndim), CHUNKS, None


def _create_zd(path: Path, name: str, dtype: str, fill: Any = None, **kw: Any) -> Any:
    """With an explicit codec chain, ``chunks`` is the chunk grid (the shard shape when the chain
    starts with sharding_indexed)."""
    dt = numpy_dtype(dtype)
    codecs, grid, shards = _chain(name, dt, len(SHAPE))
    arr = zd.create(str(path), shape=SHAPE, dtype=dtype, chunks=grid, codecs=codecs, fill_value=fill, **kw)
    assert tuple(arr.chunks) == (tuple(INNER) if shards else CHUNKS)
    assert (tuple(arr.shards) if arr.shards is not None else None) == shards
    return arr


def _region_model(dtype: str, fill: Any, seed: int) -> tuple[np.ndarray, tuple[slice, ...], np.ndarray]:
    """Values for a region that leaves whole chunks, shards and inner chunks of shards unwritten,
    and writes partial edge chunks."""
    dt = numpy_dtype(dtype)
    rng = np.random.default_rng(seed)
    region = (slice(1, 10), slice(0, 3))
    values = random_values(dt, (9, 3), rng)
    model = np.empty(SHAPE, dtype=dt)
    model[...] = fill_from_json(_fill_json(fill, dt), dt) if fill is not None else np.zeros((), dtype=dt)
    model[region] = values
    return values, region, model


def _fill_json(fill: Any, dt: np.dtype[Any]) -> Any:
    return fill_to_json(fill, dt)


# ----------------------------------------------------------------------------------------------
# zarr_device writes, zarr-python / tensorstore read


def _write_cases() -> list[Any]:
    cases = []
    for dtype in MATRIX_DTYPES:
        for name in list(CHAINS) + list(SHARDED):
            cases.append(pytest.param(dtype, name, id=f"{dtype}-{name}"))
    for dtype in CORE_DTYPES:
        if dtype in MATRIX_DTYPES:
            continue
        for name in EVERY_DTYPE_CHAINS:
            cases.append(pytest.param(dtype, name, id=f"{dtype}-{name}"))
    return cases


@pytest.mark.parametrize("dtype,chain", _write_cases())
def test_zd_write_read_by_peers(tmp_path: Path, dtype: str, chain: str) -> None:
    seed = sum(map(ord, dtype + chain))
    fill = FILL_VALUES[dtype] if seed % 2 else None
    values, region, model = _region_model(dtype, fill, seed)
    arr = _create_zd(tmp_path / "a", chain, dtype, fill)
    arr[region] = values
    # chunks (shards) the region does not touch are not stored
    untouched = ["c/0/1", "c/1/1"] if chain in SHARDED else ["c/0/2", "c/1/2", "c/2/2"]
    for key in untouched:
        assert not (tmp_path / "a" / key).exists(), key
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["zarr_format"] == 3 and meta["node_type"] == "array"
    assert meta["data_type"] == dtype
    assert meta["shape"] == list(SHAPE)
    # zarr_device reads its own data
    assert_bits_equal(arr[...], model, "zarr_device readback")
    assert_bits_equal(zd.open_array(str(tmp_path / "a"))[...], model, "zarr_device reopened")
    # zarr-python
    z = zarr_python_array(tmp_path / "a", mode="r")
    assert z.shape == SHAPE
    assert_bits_equal(z[...], model, "zarr-python")
    # tensorstore (which refuses bytes->bytes codecs after sharding_indexed)
    if chain not in TENSORSTORE_REFUSES:
        assert_bits_equal(tensorstore_read(tmp_path / "a"), model, "tensorstore")


@pytest.mark.parametrize("dtype", list(EXTENSION_DTYPES))
@pytest.mark.parametrize("chain", ["bytes_little", "bytes_big", "zstd", "transpose_big_zstd", "shard_start_zstd_crc32c", "blosc_lz4_shuffle"])
def test_zd_write_extension_dtype_read_by_tensorstore(tmp_path: Path, dtype: str, chain: str) -> None:
    seed = sum(map(ord, dtype + chain))
    values, region, model = _region_model(dtype, None, seed)
    if dtype not in zd_supported_dtypes():
        with pytest.raises(zd.FormatError):
            _create_zd(tmp_path / "a", chain, dtype)
        return
    arr = _create_zd(tmp_path / "a", chain, dtype)
    assert arr.dtype == EXTENSION_DTYPES[dtype]
    arr[region] = values
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["data_type"] == dtype
    assert_bits_equal(arr[...], model, "zarr_device readback")
    assert_bits_equal(tensorstore_read(tmp_path / "a"), model, "tensorstore")


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_zd_extension_dtype_given_as_numpy_dtype(tmp_path: Path, dtype: str) -> None:
    dt = EXTENSION_DTYPES[dtype]
    arr = zd.create(str(tmp_path / "a"), shape=(5, 3), dtype=dt, chunks=(2, 2))
    values = random_values(dt, (5, 3), np.random.default_rng(3))
    arr[...] = values
    assert json.loads((tmp_path / "a" / "zarr.json").read_text())["data_type"] == dtype
    assert_bits_equal(tensorstore_read(tmp_path / "a"), values, "tensorstore")


@pytest.mark.parametrize(
    "dtype,fill",
    [("bfloat16", 1.5), ("bfloat16", float("nan")), ("bfloat16", float("-inf")), ("float8_e4m3fn", -2.0),
     ("float8_e5m2", float("inf")), ("float8_e4m3fnuz", 0.5), ("float8_e5m2fnuz", -1.0)],
)
def test_zd_extension_fill_value_read_by_tensorstore(tmp_path: Path, dtype: str, fill: float) -> None:
    dt = EXTENSION_DTYPES[dtype]
    arr = zd.create(str(tmp_path / "a"), shape=(9,), dtype=dtype, chunks=(4,), fill_value=fill)
    arr[0:3] = np.arange(3).astype(dt)
    want = np.full((9,), fill, dtype=dt)
    want[0:3] = np.arange(3).astype(dt)
    got = tensorstore_read(tmp_path / "a")
    mine = np.asarray(zd.open_array(str(tmp_path / "a"))[...])
    assert_bits_equal(got[:3], want[:3], "tensorstore, written part")
    assert_bits_equal(mine[:3], want[:3], "zarr_device, written part")
    if math.isnan(fill):
        # any NaN of the format will do for a "NaN" fill value
        assert np.isnan(got[3:].astype(np.float32)).all()
        assert np.isnan(mine[3:].astype(np.float32)).all()
    else:
        assert_bits_equal(got, want, "tensorstore")
        assert_bits_equal(mine, want, "zarr_device")


@pytest.mark.parametrize("dtype", CORE_DTYPES)
def test_zd_fill_values_read_by_zarr_python(tmp_path: Path, dtype: str) -> None:
    dt = numpy_dtype(dtype)
    fill = FILL_VALUES[dtype]
    arr = zd.create(str(tmp_path / "a"), shape=(10,), dtype=dtype, chunks=(4,), fill_value=fill)
    values = random_values(dt, (3,), np.random.default_rng(5))
    arr[1:4] = values
    z = zarr_python_array(tmp_path / "a", mode="r")
    want = np.empty((10,), dtype=dt)
    want[...] = fill_from_json(_fill_json(fill, dt), dt)
    want[1:4] = values
    assert_bits_equal(z[...], want, "zarr-python")
    assert_bits_equal(arr[...], want, "zarr_device")
    # the fill value zarr-python decodes equals the one requested
    got_fill = np.asarray(z.fill_value, dtype=dt)
    assert_bits_equal(got_fill, fill_from_json(_fill_json(fill, dt), dt), "zarr-python fill_value")


@pytest.mark.parametrize(
    "compressors,names",
    [
        (None, ["bytes"]),
        ("zstd", ["bytes", "zstd"]),
        ("gzip", ["bytes", "gzip"]),
        ("blosc", ["bytes", "blosc"]),
        ({"name": "gzip", "configuration": {"level": 9}}, ["bytes", "gzip"]),
        ([{"name": "zstd", "configuration": {"level": 2, "checksum": True}}, {"name": "crc32c"}], ["bytes", "zstd", "crc32c"]),
    ],
    ids=["none", "zstd", "gzip", "blosc", "gzip_dict", "list"],
)
@pytest.mark.parametrize("sharded", [False, True], ids=["chunked", "sharded"])
def test_zd_compressors_argument(tmp_path: Path, compressors: Any, names: list[str], sharded: bool) -> None:
    shape, chunks, shards = (13, 9), (4, 3), (8, 6)
    arr = zd.create(str(tmp_path / "a"), shape=shape, dtype="float64", chunks=chunks,
                    shards=shards if sharded else None, compressors=compressors)
    assert tuple(arr.chunks) == chunks
    assert (tuple(arr.shards) if arr.shards is not None else None) == (shards if sharded else None)
    values = random_values("float64", shape, np.random.default_rng(11))
    arr[...] = values
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    codecs = meta["codecs"]
    if sharded:
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(shards)
        assert codecs[0]["name"] == "sharding_indexed"
        assert codecs[0]["configuration"]["chunk_shape"] == list(chunks)
        codecs = codecs[0]["configuration"]["codecs"]
    else:
        assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(chunks)
    assert [c["name"] for c in codecs] == names
    assert [c["name"] for c in arr.codecs] == [c["name"] for c in meta["codecs"]]
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], values, "zarr-python")
    assert_bits_equal(tensorstore_read(tmp_path / "a"), values, "tensorstore")


def test_shards_equal_to_chunks_is_still_sharded(tmp_path: Path) -> None:
    """A shard holding a single inner chunk is still a sharded array (its chunks carry an index)."""
    arr = zd.create(str(tmp_path / "a"), shape=(6, 4), dtype="int16", chunks=(3, 2), shards=(3, 2))
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed"
    assert tuple(arr.chunks) == (3, 2)
    assert arr.shards is not None and tuple(arr.shards) == (3, 2)
    reopened = zd.open_array(str(tmp_path / "a"))
    assert reopened.shards is not None and tuple(reopened.shards) == (3, 2)


def test_zd_order_f(tmp_path: Path) -> None:
    """order='F' is stored as a transpose codec (v3), which zarr-python honours."""
    values = random_values("int32", (5, 4, 3), np.random.default_rng(1))
    arr = zd.create(str(tmp_path / "a"), shape=(5, 4, 3), dtype="int32", chunks=(2, 3, 2), order="F")
    arr[...] = values
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "transpose"
    assert meta["codecs"][0]["configuration"]["order"] == [2, 1, 0]
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], values, "zarr-python")


@pytest.mark.parametrize(
    "cke,key",
    [
        ({"name": "default", "configuration": {"separator": "/"}}, "c/1/0"),
        ({"name": "default", "configuration": {"separator": "."}}, "c.1.0"),
        ({"name": "v2", "configuration": {"separator": "."}}, "1.0"),
        ({"name": "v2", "configuration": {"separator": "/"}}, "1/0"),
    ],
    ids=["default_slash", "default_dot", "v2_dot", "v2_slash"],
)
def test_zd_chunk_key_encoding(tmp_path: Path, cke: dict[str, Any], key: str) -> None:
    values = random_values("uint16", (7, 5), np.random.default_rng(2))
    arr = zd.create(str(tmp_path / "a"), shape=(7, 5), dtype="uint16", chunks=(3, 3), chunk_key_encoding=cke)
    arr[...] = values
    assert (tmp_path / "a" / key).is_file()
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["chunk_key_encoding"]["name"] == cke["name"]
    assert meta["chunk_key_encoding"].get("configuration", {}).get("separator", "/" if cke["name"] == "default" else ".") == cke["configuration"]["separator"]
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], values, "zarr-python")


def test_zd_attributes_and_dimension_names(tmp_path: Path) -> None:
    attrs = {"units": "m/s", "nested": {"a": [1, 2.5, None, True]}, "text": "\u00fcber"}
    arr = zd.create(str(tmp_path / "a"), shape=(4, 3), dtype="float32", chunks=(2, 2), attributes=attrs,
                    dimension_names=["time", None])
    assert dict(arr.attrs) == attrs
    z = zarr_python_array(tmp_path / "a", mode="r")
    assert dict(z.attrs) == attrs
    assert tuple(z.metadata.dimension_names) == ("time", None)
    assert dict(zd.open_array(str(tmp_path / "a")).attrs) == attrs


def test_zd_group_read_by_zarr_python(tmp_path: Path) -> None:
    root = zd.create_group(str(tmp_path / "g"), attributes={"title": "t"})
    sub = root.create_group("sub")
    a = sub.create_array("arr", shape=(6,), dtype="int64", chunks=(4,), attributes={"k": 1})
    a[...] = np.arange(6, dtype=np.int64) * -3
    zg = zarr.open_group(str(tmp_path / "g"), mode="r")
    assert dict(zg.attrs) == {"title": "t"}
    zsub = zg["sub"]
    assert isinstance(zsub, zarr.Group)
    za = zsub["arr"]
    assert dict(za.attrs) == {"k": 1}
    assert_bits_equal(za[...], np.arange(6, dtype=np.int64) * -3, "zarr-python")
    g = zd.open_group(str(tmp_path / "g"))
    assert "sub" in g and sorted(g.keys()) == ["sub"]
    assert_bits_equal(g["sub"]["arr"][...], np.arange(6, dtype=np.int64) * -3, "zarr_device")


def test_zd_zero_d(tmp_path: Path) -> None:
    arr = zd.create(str(tmp_path / "a"), shape=(), dtype="complex64", fill_value=complex(1, 2))
    assert arr.shape == () and arr.ndim == 0 and arr.size == 1
    assert_bits_equal(np.asarray(arr[...]), np.array(1 + 2j, dtype=np.complex64), "fill")
    arr[...] = np.array(-3.5 + 0.25j, dtype=np.complex64)
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], np.array(-3.5 + 0.25j, dtype=np.complex64), "zarr-python")
    assert_bits_equal(np.asarray(arr[()]), np.array(-3.5 + 0.25j, dtype=np.complex64), "zarr_device")


def test_zd_mode_w_overwrites_and_w_minus_refuses(tmp_path: Path) -> None:
    zd.create(str(tmp_path / "a"), shape=(4,), dtype="int8", chunks=(2,))[...] = np.arange(4, dtype=np.int8)
    with pytest.raises(zd.ZarrDeviceError):
        zd.create(str(tmp_path / "a"), shape=(4,), dtype="int8", chunks=(2,), mode="w-")
    arr = zd.create(str(tmp_path / "a"), shape=(6,), dtype="int16", chunks=(3,), mode="w", fill_value=9)
    assert_bits_equal(arr[...], np.full(6, 9, dtype=np.int16), "overwritten array has no old chunks")
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], np.full(6, 9, dtype=np.int16), "zarr-python")


# ----------------------------------------------------------------------------------------------
# zarr-python writes, zarr_device reads


@pytest.mark.parametrize("dtype,chain", _write_cases())
def test_zarr_python_write_zd_read(tmp_path: Path, dtype: str, chain: str) -> None:
    seed = sum(map(ord, chain + dtype)) + 1
    dt = numpy_dtype(dtype)
    fill = FILL_VALUES[dtype] if seed % 2 else None
    codecs, grid, _ = _chain(chain, dt, len(SHAPE))
    write_v3_metadata(tmp_path / "a", shape=SHAPE, dtype=dtype, chunk_shape=grid, codecs=codecs, fill_value=fill)
    values, region, model = _region_model(dtype, fill, seed)
    z = zarr_python_array(tmp_path / "a")
    z[region] = values
    assert_bits_equal(z[...], model, "zarr-python readback")
    arr = zd.open_array(str(tmp_path / "a"))
    assert_bits_equal(arr[...], model, "zarr_device")
    for sel in basic_selections(SHAPE)[::3]:
        assert_bits_equal(np.asarray(arr[sel]), np.asarray(model[sel]), f"zarr_device [{selection_id(sel)}]")


@pytest.mark.parametrize("checksum", [False, True], ids=["zstd", "zstd-crc32c"])
def test_large_chunks_decoded_from_pieces_equal_zarr_python(tmp_path: Path, checksum: bool) -> None:
    """Chunks stored in more than 8 MiB (read and decoded a piece at a time, within a memory
    budget smaller than one of them) give zarr-python's values, whole and in part; damage under
    a crc32c is a ChecksumError naming the chunk."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    rng = np.random.default_rng(11)
    values = rng.integers(0, 2**31, size=(3, 1536, 1536), dtype=np.int32)  # 9 MiB a chunk, barely compressible
    values[1, :700] = 5  # a chunk that compresses well, beside ones that hardly do
    compressors = [ZstdCodec(level=1)] + ([Crc32cCodec()] if checksum else [])
    z = zarr.create_array(str(tmp_path / "a"), shape=values.shape, chunks=(1, 1536, 1536), dtype="int32",
                          compressors=compressors, fill_value=0)
    z[...] = values
    stored = (tmp_path / "a" / "c" / "0" / "0" / "0").stat().st_size
    assert stored > 8 << 20
    previous = zd.set_config(max_inflight_bytes=4 << 20)
    try:
        arr = zd.open_array(str(tmp_path / "a"))
        assert_bits_equal(arr[...], np.asarray(z[...]), "whole")
        assert_bits_equal(arr[2], values[2], "one chunk")
        assert_bits_equal(arr[:, 3:900:7, 5], values[:, 3:900:7, 5], "part of each chunk")
        if checksum:
            chunk = tmp_path / "a" / "c" / "2" / "0" / "0"
            damaged = bytearray(chunk.read_bytes())
            damaged[len(damaged) // 3] ^= 0x40
            chunk.write_bytes(bytes(damaged))
            with pytest.raises(zd.ChecksumError, match="c/2/0/0"):
                arr[...]
    finally:
        zd.set_config(max_inflight_bytes=previous.max_inflight_bytes)


# ----------------------------------------------------------------------------------------------
# Partial writes: the same sequence of writes through zarr_device and zarr-python


PARTIAL_CONFIGS: list[tuple[str, str, tuple[int, ...]]] = [
    ("int32", "zstd", (11, 7)),
    ("float64", "bytes_big", (11, 7)),
    ("uint8", "transpose_big_zstd", (11, 7)),
    ("float32", "shard_end_bytes", (11, 7)),
    ("int16", "shard_start_zstd_crc32c", (11, 7)),
    ("complex64", "shard_then_zstd", (11, 7)),
    ("float16", "shard_index_bytes_only", (11, 7)),
    ("bool", "blosc_zstd_bitshuffle", (11, 7)),
]


def _random_write_selection(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[Any, ...]:
    sel: list[Any] = []
    for n in shape:
        kind = rng.integers(0, 4)
        if kind == 0:
            sel.append(int(rng.integers(-n, n)))
        else:
            start = int(rng.integers(-n, n))
            stop = int(rng.integers(-n, n + 2))
            step = int(rng.integers(1, 4))
            sel.append(slice(start, stop, step))
    return tuple(sel)


@pytest.mark.parametrize("dtype,chain,shape", PARTIAL_CONFIGS, ids=[f"{d}-{c}" for d, c, _ in PARTIAL_CONFIGS])
def test_partial_writes_match_zarr_python(tmp_path: Path, dtype: str, chain: str, shape: tuple[int, ...]) -> None:
    dt = numpy_dtype(dtype)
    rng = np.random.default_rng(sum(map(ord, chain)))
    fill = FILL_VALUES[dtype]
    codecs, grid, shards = _chain(chain, dt, len(shape))
    write_v3_metadata(tmp_path / "zp", shape=shape, dtype=dtype, chunk_shape=grid, codecs=codecs, fill_value=fill)
    z = zarr_python_array(tmp_path / "zp")
    arr = zd.create(str(tmp_path / "zd"), shape=shape, dtype=dtype, chunks=grid, codecs=codecs, fill_value=fill)
    model = np.empty(shape, dtype=dt)
    model[...] = fill_from_json(_fill_json(fill, dt), dt)
    writes = [
        (slice(1, 3), slice(1, 2)),  # inside one chunk / inner chunk
        (slice(2, 10), slice(2, 6)),  # across chunk and shard boundaries
        (slice(None), slice(None, None, 3)),
    ] + [_random_write_selection(shape, rng) for _ in range(12)]
    for i, sel in enumerate(writes):
        target_shape = model[sel].shape
        values = random_values(dt, target_shape, rng)
        model[sel] = values
        z[sel] = values
        if i % 2:
            arr[sel] = values
        else:
            arr.write(sel, values)
        assert_bits_equal(arr[...], model, f"zarr_device after write {i} [{selection_id(sel)}]")
    assert_bits_equal(z[...], model, "zarr-python model")
    # each implementation reads the other's store
    assert_bits_equal(zarr_python_array(tmp_path / "zd", mode="r")[...], model, "zarr-python reads zarr_device")
    assert_bits_equal(zd.open_array(str(tmp_path / "zp"))[...], model, "zarr_device reads zarr-python")
    if chain not in TENSORSTORE_REFUSES:
        assert_bits_equal(tensorstore_read(tmp_path / "zd"), model, "tensorstore reads zarr_device")


def test_partial_write_into_existing_zarr_python_array(tmp_path: Path) -> None:
    """zarr_device updates part of an array zarr-python wrote (read-modify-write of its chunks)."""
    shape = (9, 10)
    codecs = [_shard([2, 3], [bytes_codec("float32"), _zstd(2), CRC], "end")]
    write_v3_metadata(tmp_path / "a", shape=shape, dtype="float32", chunk_shape=(4, 6), codecs=codecs, fill_value=-1.0)
    z = zarr_python_array(tmp_path / "a")
    rng = np.random.default_rng(9)
    model = random_values("float32", shape, rng)
    z[...] = model
    arr = zd.open_array(str(tmp_path / "a"), mode="r+")
    sels: list[Any] = [(slice(3, 5), slice(5, 7)), (-1, slice(None, None, 4)), (Ellipsis, 0), (slice(0, 9, 4), slice(1, 10, 3))]
    for sel in sels:
        values = random_values("float32", model[sel].shape, rng)
        model[sel] = values
        arr[sel] = values
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], model, "zarr-python")
    assert_bits_equal(arr[...], model, "zarr_device")


def test_scalar_broadcast_write(tmp_path: Path) -> None:
    arr = zd.create(str(tmp_path / "a"), shape=(6, 5), dtype="int32", chunks=(4, 2), shards=(4, 4))
    arr[1:5, ::2] = 7
    arr[0] = np.arange(5, dtype=np.int32)
    model = np.zeros((6, 5), dtype=np.int32)
    model[1:5, ::2] = 7
    model[0] = np.arange(5)
    assert_bits_equal(arr[...], model, "zarr_device")
    assert_bits_equal(zarr_python_array(tmp_path / "a", mode="r")[...], model, "zarr-python")


def test_memory_store_roundtrip() -> None:
    store = zd.MemoryStore()
    arr = zd.create(store, path="x/y", shape=(5, 4), dtype="float32", chunks=(2, 3), shards=(4, 3))
    values = random_values("float32", (5, 4), np.random.default_rng(4))
    arr[...] = values
    again = zd.open_array(store, path="x/y")
    assert_bits_equal(again[...], values, "MemoryStore")


@pytest.mark.parametrize(("dtype", "endian"), [(">f4", "big"), ("<f4", "little"), ("float32", "little"), (">i2", "big"), (">i1", None)])
def test_zd_byte_order_given_as_a_string(tmp_path: Path, dtype: str, endian: str | None) -> None:
    """A dtype string with a byte order stores chunks in it, as the NumPy dtype of it does."""
    values = np.arange(10).astype(dtype)
    arr = zd.create(tmp_path / "a", shape=(10,), dtype=dtype, chunks=(4,), compressors=None)
    arr[...] = values
    bytes_codec = json.loads((tmp_path / "a" / "zarr.json").read_text())["codecs"][0]
    if endian is not None:
        assert bytes_codec["configuration"]["endian"] == endian
        assert (tmp_path / "a" / "c" / "0").read_bytes() == values[:4].tobytes()
    assert_bits_equal(zarr.open_array(str(tmp_path / "a"))[...], values, dtype)
