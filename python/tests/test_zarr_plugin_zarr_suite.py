"""What zarr-python's own test suite, run with the plug-in on (scripts/zarr-python-suite.sh), found:
each test here failed before its fix. Arrays compare equal to their pickled copies and to a group's
view of them; a moved local store is read at its new place; a codec zarr.config points at another
implementation keeps it; the engine opens an array with one metadata read; zarr_device's data
types do not break zarr-python's dtype matching; float8_e8m0fnu fill values are the same bits in
zarr-python and in the engine."""

from __future__ import annotations

import json
import logging
import pickle
import warnings
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import zarr
import zarr.storage
from conftest import assert_bits_equal
from zarr.codecs import BloscCodec
from zarr.core.buffer import cpu as cpu_buffer
from zarr.core.sync import sync
from zarr.registry import register_buffer, register_codec
from zarr_plugin_helpers import as_numpy, open_off, pipeline_of

import zarr_device
from zarr_device.basics.numpy_dtypes import float_fill_from_json, float_fill_to_json
from zarr_device.zarr_plugin import DevicePipeline, FallbackWarning


def test_arrays_equal_their_pickled_copies_and_group_members(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(tmp_path)
    with zarr_device.enable():
        group = zarr.open_group(store, mode="w")
        array = group.create_array("a", shape=(10,), chunks=(5,), dtype="int32")
        array[:] = np.arange(10, dtype="int32")
        copy = pickle.loads(pickle.dumps(array))
        assert isinstance(pipeline_of(copy), DevicePipeline)
        assert copy == array
        assert group["a"] == array
        assert pipeline_of(copy) == pipeline_of(array) and hash(pipeline_of(copy)) == hash(pipeline_of(array))
        other = group.create_array("b", shape=(12,), chunks=(5,), dtype="int32")
        assert pipeline_of(other) != pipeline_of(array)
        np.testing.assert_array_equal(as_numpy(copy[:]), np.arange(10))


def test_moved_local_store_is_read_where_it_went(tmp_path: Path) -> None:
    data = np.arange(16, dtype="int64").reshape(4, 4)
    with zarr_device.enable():
        store = sync(zarr.storage.LocalStore.open(root=tmp_path / "origin"))
        array = zarr.create_array(store, data=data, chunks=(2, 2))
        assert_bits_equal(as_numpy(array[...]), data, "before the move")
        sync(store.move(tmp_path / "moved"))
        assert not (tmp_path / "origin").exists()
        assert_bits_equal(as_numpy(array[...]), data, "after the move")
        array[0, 0] = -1
    data[0, 0] = -1
    assert_bits_equal(open_off(zarr.storage.LocalStore(tmp_path / "moved"))[...], data, "written after the move")


class _CountingBlosc(BloscCodec):
    """A blosc codec of the user's own, which zarr.config names for "blosc"."""

    encoded = 0

    async def _encode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        type(self).encoded += 1
        return await super()._encode_single(chunk_bytes, chunk_spec)


def test_codec_pointed_elsewhere_by_zarr_config_keeps_its_implementation() -> None:
    register_codec("blosc", _CountingBlosc)
    name = f"{_CountingBlosc.__module__}.{_CountingBlosc.__qualname__}"
    store = zarr.storage.MemoryStore()
    with zarr_device.enable(), zarr.config.set({"codecs.blosc": name}):
        array = zarr.create_array(store, shape=(20,), chunks=(10,), dtype="int32", compressors=[{"name": "blosc", "configuration": {}}])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            array[:] = np.arange(20, dtype="int32")
        assert _CountingBlosc.encoded == 2
        assert [w for w in caught if issubclass(w.category, FallbackWarning) and "codecs.blosc" in str(w.message)]
    with zarr_device.enable():  # zarr-python's own blosc again: the engine serves the array
        array = zarr.open_array(store)
        assert pipeline_of(array).reason is None
        np.testing.assert_array_equal(as_numpy(array[:]), np.arange(20))


def test_codecs_with_dotted_names_left_as_configured_stay_with_the_engine() -> None:
    """Codec names hold dots ("numcodecs.zstd"): not taken for nested zarr.config keys."""
    import zarr.codecs.numcodecs as numcodecs_v3

    store = zarr.storage.MemoryStore()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs' codecs are not in the Zarr v3 spec: zarr warns
        zstd = numcodecs_v3.Zstd(level=1)
        zarr.create_array(store, shape=(20,), chunks=(10,), dtype="int32", compressors=[zstd])
    with zarr_device.enable(strict=True), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        array = zarr.open_array(store)
        assert pipeline_of(array).reason is None
        array[:] = np.arange(20, dtype="int32")
        np.testing.assert_array_equal(as_numpy(array[:]), np.arange(20))


def test_engine_opens_an_array_with_one_metadata_read() -> None:
    store = zarr.storage.LoggingStore(zarr.storage.MemoryStore(), log_level="DEBUG")
    logging.getLogger(f"LoggingStore({store._store})").setLevel(logging.WARNING)  # noqa: SLF001
    with zarr_device.enable():
        array = zarr.create(shape=(10,), store=store, overwrite=True)
        before = dict(store.counter)
        array[:] = 1  # one whole chunk: nothing to read but the array's metadata
    gets = store.counter["get"] - before.get("get", 0)
    exists = store.counter["exists"] - before.get("exists", 0)
    assert (gets, exists) == (1, 1), dict(store.counter)


def test_batches_written_at_once_open_the_array_once() -> None:
    """zarr-python writes its batches (here one per shard) from several threads at once: the
    engine still opens the array, reading its metadata, once."""
    for attempt in range(5):  # the race this guards against came and went
        store = zarr.storage.LoggingStore(zarr.storage.MemoryStore(), log_level="DEBUG")
        logging.getLogger(f"LoggingStore({store._store})").setLevel(logging.WARNING)  # noqa: SLF001
        with zarr_device.enable():
            zarr.create_array(store, data=np.arange(300, dtype="int64"), chunks=(1,), shards=(100,), fill_value=-1)
        metadata_gets = store.counter["get"]  # no shard is read: each is written whole
        assert metadata_gets == 2, f"attempt {attempt}: zarr-python's read and the engine's, not {metadata_gets}"


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_new_style_numpy_dtypes_with_zarr_device_types_registered(tmp_path: Path, zarr_format: int) -> None:
    values = np.array(["a", "bb", "", "dddd", "e"], dtype=np.dtypes.StringDType())
    zarr_device.register_with_zarr()
    a = zarr.create_array(
        zarr.storage.MemoryStore(), shape=(5,), chunks=(5,), dtype=values.dtype, zarr_format=zarr_format
    )
    a[:] = values
    assert list(a[:]) == list(values)


def test_float8_e8m0fnu_fill_values_are_the_engines_bits(tmp_path: Path) -> None:
    """float8_e8m0fnu has no zero: 0 (tensorstore's default fill value JSON) stands for its
    smallest value, 2^-127 (bits 0x00), in the engine; zarr-python's fill value and reads agree."""
    dt = np.dtype(ml_dtypes.float8_e8m0fnu)
    smallest = np.zeros((), np.uint8).view(dt)[()]
    for number in (0, 0.0, -0.0, 1e-300):
        assert_bits_equal(np.asarray(float_fill_from_json(number, dt)), np.asarray(smallest), f"fill {number!r}")
    assert float_fill_to_json(0.0, dt) == float(smallest)
    assert_bits_equal(np.asarray(float_fill_from_json(1.0, dt)), np.asarray(np.float32(1.0)).astype(dt), "fill 1.0")
    assert np.isnan(float(float_fill_from_json(-1.0, dt)))
    zarr_device.register_with_zarr()
    for fill in (0.0, None):
        path = tmp_path / f"fill-{fill}"
        kwargs = {} if fill is None else {"fill_value": fill}
        created = zarr.create_array(str(path), shape=(4,), chunks=(2,), dtype="float8_e8m0fnu", **kwargs)
        stored = json.loads((path / "zarr.json").read_text())["fill_value"]
        assert float_fill_from_json(stored, dt).view(np.uint8) == 0, stored
        assert_bits_equal(np.asarray(created.fill_value, dtype=dt), np.asarray(smallest), "zarr-python fill_value")
        expected = np.full(4, smallest, dtype=dt)
        assert_bits_equal(zarr_device.open_array(str(path))[...], expected, "engine, missing chunks")
        assert_bits_equal(open_off(zarr.storage.LocalStore(path))[...], expected, "zarr-python, missing chunks")
        with zarr_device.enable():
            assert_bits_equal(as_numpy(zarr.open_array(str(path))[...]), expected, "plug-in, missing chunks")


class _CountedBuffer(cpu_buffer.Buffer):
    """A host buffer class that counts the values zarr-python's stores make of it: a stand-in for
    the CuPy buffers that ``zarr.config.enable_gpu()`` names, which copy each value to the GPU."""

    made = 0

    @classmethod
    def from_buffer(cls, buffer: Any) -> Any:
        cls.made += 1
        return super().from_buffer(buffer)

    @classmethod
    def from_bytes(cls, bytes_like: Any) -> Any:
        cls.made += 1
        return super().from_bytes(bytes_like)


def test_the_engine_asks_zarr_python_stores_for_host_bytes_whatever_buffer_is_configured() -> None:
    """zarr-python's suite on a GPU (test_gpu_basic[2-memory]): under enable_gpu() the engine asked
    a MemoryStore for its values, and their sizes, as CuPy buffers, copying each to the GPU and
    back (and warning of the slow path). It asks for host buffers whatever the config names."""
    register_buffer(_CountedBuffer)
    counted = f"{_CountedBuffer.__module__}.{_CountedBuffer.__qualname__}"
    store = zarr.storage.MemoryStore()
    data = np.arange(8 * 9, dtype="float32").reshape(8, 9)
    with zarr_device.enable():
        zarr.create_array(store, shape=data.shape, chunks=(4, 4), dtype="float32", zarr_format=2)[...] = data
    with zarr.config.set({"buffer": counted}):
        engine = zarr_device.open_array(store)  # its store adapter made under this config
        with zarr_device.enable():
            zarr.config.set({"buffer": counted})
            plugged = zarr.open_array(store)
            _CountedBuffer.made = 0
            assert_bits_equal(as_numpy(plugged[...]), data, "plug-in")
            assert_bits_equal(engine[...], data, "engine")
            assert_bits_equal(engine[1:7, 2:5], data[1:7, 2:5], "engine, part")
    assert _CountedBuffer.made == 0
