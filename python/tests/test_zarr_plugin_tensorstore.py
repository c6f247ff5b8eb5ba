"""The plug-in against tensorstore, both ways, bit for bit: arrays tensorstore wrote (the golden
fixtures, and fresh ones of many data types, codec chains, chunk key encodings, Zarr v2 and v3,
with chunks left missing) read by zarr-python with the plug-in on, whole and through every kind
of selection, equal tensorstore's own reads and zarr-python's without the plug-in; arrays the
plug-in wrote, through every kind of selection, read by tensorstore equal what was written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage
from conftest import (
    GOLDEN_ARRAY_CASES,
    assert_bits_equal,
    golden_expected,
    golden_store,
    numpy_dtype,
    random_values,
)
from zarr_plugin_helpers import as_numpy, open_off

import zarr_device
from zarr_device.zarr_plugin import DevicePipeline

ts = pytest.importorskip("tensorstore")

# Every array here is one the engine serves (strict: a fall back would be an error).
pytestmark = pytest.mark.filterwarnings("error::zarr_device.zarr_plugin.pipeline.FallbackWarning")


def _selections(shape: tuple[int, int]) -> list[tuple[str, Any]]:
    rows, cols = shape
    rng = np.random.default_rng(7)
    return [
        ("all", Ellipsis),
        ("box", (slice(1, rows - 1), slice(2, cols))),
        ("steps", (slice(0, None, 3), slice(1, None, 2))),
        ("row", (rows - 1, slice(None))),
        ("oindex", ("o", (np.array([rows - 1, 0, 4]), np.array([1, cols - 1, 3])))),
        ("vindex", ("v", (np.array([0, rows - 1, 5]), np.array([cols - 1, 0, 2])))),
        ("mask", ("v", rng.random(shape) < 0.3)),
    ]


def _read(array: zarr.Array, selection: Any) -> np.ndarray:
    if isinstance(selection, tuple) and len(selection) == 2 and selection[0] in ("o", "v"):
        accessor = array.oindex if selection[0] == "o" else array.vindex
        return as_numpy(accessor[selection[1]])
    return as_numpy(array[selection])


def _expected(values: np.ndarray, selection: Any) -> np.ndarray:
    if isinstance(selection, tuple) and len(selection) == 2 and selection[0] == "o":
        return values[np.ix_(*selection[1])]
    if isinstance(selection, tuple) and len(selection) == 2 and selection[0] == "v":
        return values[selection[1]]
    return values[selection]


def _read_with_plugin(store: Any, expected: np.ndarray, what: str, path: str = "") -> None:
    """Whole and selected reads through the plug-in (strict) equal ``expected``, bit for bit."""
    with zarr_device.enable(strict=True):
        array = zarr.open_array(store, path=path, mode="r")
        assert isinstance(array._async_array.codec_pipeline, DevicePipeline)  # noqa: SLF001
        if expected.ndim != 2:
            assert_bits_equal(as_numpy(array[...]), expected, what)
            return
        for name, selection in _selections(expected.shape):
            assert_bits_equal(_read(array, selection), _expected(expected, selection), f"{what}, {name}")


# -- the golden fixtures tensorstore wrote -------------------------------------------------------
TENSORSTORE_CASES = [c for c in GOLDEN_ARRAY_CASES if c["writer"] == "tensorstore"]


@pytest.mark.parametrize("case", TENSORSTORE_CASES, ids=[c["name"] for c in TENSORSTORE_CASES])
def test_tensorstore_golden_arrays_through_the_plugin(case: dict[str, Any]) -> None:
    store = zarr.storage.LocalStore(golden_store(case), read_only=True)
    _read_with_plugin(store, golden_expected(case), case["name"], path=case["path"])


def test_the_golden_fixtures_hold_tensorstore_arrays() -> None:
    assert len(TENSORSTORE_CASES) >= 20  # the parametrization above is not empty by accident


# -- arrays tensorstore writes now ---------------------------------------------------------------
SHAPE = (13, 10)  # partial chunks at both edges
CHUNKS = (4, 3)


def _bytes(endian: str = "little") -> dict[str, Any]:
    return {"name": "bytes", "configuration": {"endian": endian}}


V3_CHAINS: dict[str, list[dict[str, Any]]] = {
    "raw": [_bytes()],
    "zstd": [_bytes(), {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
    "gzip-big-endian": [_bytes("big"), {"name": "gzip", "configuration": {"level": 5}}],
    "blosc-lz4-shuffle": [
        _bytes(),
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0}},
    ],
    "transpose-crc32c": [{"name": "transpose", "configuration": {"order": [1, 0]}}, _bytes(), {"name": "crc32c"}],
    "sharded-end": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [2, 3],
                "codecs": [_bytes(), {"name": "zstd", "configuration": {"level": 1}}],
                "index_codecs": [_bytes(), {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ],
    "sharded-start-transposed": [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [4, 1],
                "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, _bytes("big")],
                "index_codecs": [_bytes()],
                "index_location": "start",
            },
        }
    ],
}
KEY_ENCODINGS: dict[str, dict[str, Any]] = {
    "default-slash": {"name": "default", "configuration": {"separator": "/"}},
    "default-dot": {"name": "default", "configuration": {"separator": "."}},
    "v2-dot": {"name": "v2", "configuration": {"separator": "."}},
}
DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64", "complex64", "bfloat16"]


def _tensorstore_write(spec: dict[str, Any], values: np.ndarray) -> None:
    """Creates the array and writes ``values`` to all but its last rows of chunks (left missing,
    so reads fill them)."""
    array = ts.open(spec, create=True, delete_existing=True).result()
    rows = values.shape[0] // CHUNKS[0] * CHUNKS[0] - CHUNKS[0]
    array[:rows].write(values[:rows]).result()


def _tensorstore_read(spec: dict[str, Any]) -> np.ndarray:
    return np.asarray(ts.open({k: spec[k] for k in ("driver", "kvstore")}, open=True, read=True).result().read().result())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chain", list(V3_CHAINS))
def test_tensorstore_v3_writes_read_through_the_plugin(tmp_path: Path, chain: str, dtype: str) -> None:
    codecs = V3_CHAINS[chain]
    if numpy_dtype(dtype).itemsize == 1:  # one-byte types have no byte order to state
        codecs = json.loads(json.dumps(codecs).replace(', "configuration": {"endian": "big"}', "").replace(
            ', "configuration": {"endian": "little"}', ""))
    if chain.startswith("blosc"):
        codecs[1]["configuration"]["typesize"] = numpy_dtype(dtype).itemsize
    values = random_values(dtype, SHAPE, np.random.default_rng(11))
    fill = values[0, 0] if dtype != "bool" else True
    for name, encoding in KEY_ENCODINGS.items():
        path = tmp_path / f"{chain}-{name}"
        grid = [8, 6] if chain.startswith("sharded") else list(CHUNKS)
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {
                "shape": list(SHAPE),
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
                "chunk_key_encoding": encoding,
                "data_type": dtype,
                "codecs": codecs,
                "fill_value": json.loads(json.dumps(_fill_json(fill, dtype))),
            },
        }
        _tensorstore_write(spec, values)
        expected = _tensorstore_read(spec)
        rows = SHAPE[0] // CHUNKS[0] * CHUNKS[0] - CHUNKS[0]
        assert_bits_equal(expected[:rows], values[:rows], f"tensorstore itself, {chain} {name}")
        store = zarr.storage.LocalStore(path, read_only=True)
        assert_bits_equal(open_off(store)[...], expected, f"zarr-python without the plug-in, {chain} {name}")
        _read_with_plugin(store, expected, f"{dtype} {chain} {name}")


def _fill_json(value: Any, dtype: str) -> Any:
    from zarr_device.basics.numpy_dtypes import float_fill_to_json

    dt = numpy_dtype(dtype)
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        return int(value)
    if dt.kind == "c":
        half = np.dtype(f"f{dt.itemsize // 2}")
        return [float_fill_to_json(value.real, half), float_fill_to_json(value.imag, half)]
    return float_fill_to_json(value, dt)


V2_COMPRESSORS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "zstd": {"id": "zstd", "level": 3},
    "zlib": {"id": "zlib", "level": 4},
    "blosc-zstd-bitshuffle": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
}


@pytest.mark.parametrize("dtype", ["int16", "uint32", "float32", "float64", "complex128"])
@pytest.mark.parametrize("compressor", list(V2_COMPRESSORS))
@pytest.mark.parametrize("order", ["C", "F"])
def test_tensorstore_v2_writes_read_through_the_plugin(tmp_path: Path, dtype: str, compressor: str, order: str) -> None:
    values = random_values(dtype, SHAPE, np.random.default_rng(12))
    for separator, byte_order in (("/", "<"), (".", ">")):
        path = tmp_path / f"{compressor}-{order}-{byte_order}"
        spec = {
            "driver": "zarr",
            "kvstore": {"driver": "file", "path": str(path)},
            "metadata": {
                "shape": list(SHAPE),
                "chunks": list(CHUNKS),
                "dtype": byte_order + numpy_dtype(dtype).str[1:],
                "compressor": V2_COMPRESSORS[compressor],
                "order": order,
                "fill_value": None,
                "dimension_separator": separator,
            },
        }
        _tensorstore_write(spec, values)
        expected = _tensorstore_read(spec)
        store = zarr.storage.LocalStore(path, read_only=True)
        assert_bits_equal(open_off(store)[...], expected, f"zarr-python without the plug-in, {path.name}")
        _read_with_plugin(store, expected, f"{dtype} v2 {path.name}")


# -- what the plug-in writes, read by tensorstore -------------------------------------------------
WRITE_CHAINS = {
    "zstd": {"compressors": {"name": "zstd", "configuration": {"level": 1}}},
    "big-endian-gzip": {"serializer": {"name": "bytes", "configuration": {"endian": "big"}}, "compressors": {"name": "gzip", "configuration": {"level": 1}}},
    "transpose-crc32c": {"filters": [{"name": "transpose", "configuration": {"order": [1, 0]}}], "compressors": [{"name": "crc32c"}]},
    "sharded": {"shards": (8, 6), "compressors": {"name": "zstd", "configuration": {"level": 1}}},
}


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float32", "float64", "complex64", "bfloat16"])
@pytest.mark.parametrize("chain", list(WRITE_CHAINS))
def test_plugin_writes_read_by_tensorstore(tmp_path: Path, chain: str, dtype: str) -> None:
    kwargs = dict(WRITE_CHAINS[chain])
    if numpy_dtype(dtype).itemsize == 1:  # one-byte types have no byte order to state
        kwargs.pop("serializer", None)
    rng = np.random.default_rng(13)
    dt = numpy_dtype(dtype)
    fill = np.zeros((), dt)[()]
    store = zarr.storage.LocalStore(tmp_path / "a")
    zarr_device.register_with_zarr()
    zarr.create_array(store, shape=SHAPE, chunks=CHUNKS, dtype=dt, fill_value=fill, **kwargs)
    expected = np.full(SHAPE, fill, dtype=dt)
    rows, cols = np.array([3, 10, 12]), np.array([0, 4, 9])  # coordinates, each once
    with zarr_device.enable(strict=True):
        array = zarr.open_array(store)
        for box in ((slice(0, 8), slice(0, 6)), (slice(5, 12), slice(2, 9))):  # whole chunks, then parts
            new = random_values(dtype, expected[box].shape, rng)
            array[box] = new
            expected[box] = new
        picked = (np.array([12, 0, 6]), np.array([9, 1]))
        new = random_values(dtype, (3, 2), rng)
        array.oindex[picked] = new
        expected[np.ix_(*picked)] = new
        new = random_values(dtype, (3,), rng)
        array.vindex[rows, cols] = new
        expected[rows, cols] = new
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path / "a")}}
    assert_bits_equal(_tensorstore_read(spec), expected, f"tensorstore reads what the plug-in wrote ({chain})")
    assert_bits_equal(open_off(store)[...], expected, f"zarr-python without the plug-in ({chain})")
