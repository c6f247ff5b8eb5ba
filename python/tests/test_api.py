"""The Python API's contract: opening, creating, groups, stores, selections, DLPack hand-over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zarr_device as zd


def test_create_open_and_describe(tmp_path: Path) -> None:
    arr = zd.create(
        tmp_path / "a.zarr",
        shape=(10, 7),
        dtype="int32",
        chunks=(4, 3),
        fill_value=-1,
        attributes={"units": "m"},
        dimension_names=["y", "x"],
    )
    assert (arr.shape, arr.chunks, arr.shards, arr.dtype) == ((10, 7), (4, 3), None, np.int32)
    again = zd.open_array(tmp_path / "a.zarr")
    assert again.attrs == {"units": "m"}
    assert again.fill_value == -1
    assert again.metadata["dimension_names"] == ["y", "x"]
    assert [c["name"] for c in again.codecs] == ["bytes", "zstd"]
    np.testing.assert_array_equal(again[:], np.full((10, 7), -1, np.int32))


def test_read_only_mode_refuses_writes(tmp_path: Path) -> None:
    zd.create(tmp_path / "a.zarr", shape=(4,), dtype="uint8", chunks=(2,))
    arr = zd.open_array(tmp_path / "a.zarr")
    with pytest.raises(zd.UsageError, match="read-only"):
        arr[0] = 1
    writable = zd.open_array(tmp_path / "a.zarr", mode="r+")
    writable[1:3] = 7
    np.testing.assert_array_equal(arr[:], [0, 7, 7, 0])


def test_create_refuses_to_overwrite_unless_asked(tmp_path: Path) -> None:
    zd.create(tmp_path / "a.zarr", shape=(4,), dtype="uint8")
    with pytest.raises(zd.UsageError, match="already exists"):
        zd.create(tmp_path / "a.zarr", shape=(4,), dtype="uint8")
    arr = zd.create(tmp_path / "a.zarr", shape=(5,), dtype="float64", mode="w")
    assert arr.shape == (5,)


def test_missing_node_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(zd.NodeNotFoundError) as info:
        zd.open(tmp_path / "nothing.zarr")
    assert isinstance(info.value, FileNotFoundError)


def test_groups(tmp_path: Path) -> None:
    root = zd.create_group(tmp_path / "g.zarr", attributes={"a": 1})
    sub = root.create_group("sub", attributes={"b": 2})
    sub.create_array("x", shape=(3,), dtype="float32", chunks=(2,))
    root.create_array("y", shape=(2, 2), dtype="int8")
    opened = zd.open_group(tmp_path / "g.zarr")
    assert sorted(opened) == ["sub", "y"]
    assert opened.attrs == {"a": 1}
    child = opened["sub"]
    assert isinstance(child, zd.Group) and child.attrs == {"b": 2}
    assert isinstance(child["x"], zd.Array)
    assert set(opened.arrays()) == {"y"} and set(opened.groups()) == {"sub"}
    with pytest.raises(KeyError):
        opened["missing"]
    with pytest.raises(zd.NodeNotFoundError):
        zd.open_array(tmp_path / "g.zarr")


def test_memory_store_round_trip() -> None:
    store = zd.MemoryStore()
    arr = zd.create(store, path="deep/a", shape=(9, 9), dtype="float32", chunks=(4, 4), shards=(8, 8))
    data = np.arange(81, dtype=np.float32).reshape(9, 9)
    arr[:] = data
    np.testing.assert_array_equal(zd.open_array(store, path="deep/a")[2:7, ::3], data[2:7, ::3])


def test_zarr_python_store_feeds_the_engine() -> None:
    zarr = pytest.importorskip("zarr")
    store = zarr.storage.MemoryStore()
    z = zarr.create_array(store, shape=(20, 30), chunks=(6, 7), shards=(12, 14), dtype="uint16")
    data = np.arange(600, dtype=np.uint16).reshape(20, 30)
    z[:] = data
    arr = zd.open_array(store)
    assert isinstance(arr.store, zd.ZarrStoreAdapter)
    np.testing.assert_array_equal(arr[:], data)
    np.testing.assert_array_equal(arr[3:17:2, 5], data[3:17:2, 5])
    # and writes through it are read by zarr-python
    writable = zd.open_array(store, mode="r+")
    writable[0, :] = 9
    np.testing.assert_array_equal(zarr.open_array(store)[0, :], np.full(30, 9, np.uint16))


def test_zarr_python_store_gets_a_window_of_chunks_at_once() -> None:
    """A store that answers after a delay, as a distant server does: the engine's two threads
    would have two requests in flight, one per chunk each; a window of chunks handed to zarr-python's
    event loop has as many as its ``async.concurrency`` allows."""
    zarr = pytest.importorskip("zarr")
    import asyncio

    class Slow(zarr.storage.WrapperStore):  # type: ignore[misc]
        in_flight = 0
        most = 0

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if "/c/" not in f"/{key}":
                return await self._store.get(key, prototype, byte_range)
            Slow.in_flight += 1
            Slow.most = max(Slow.most, Slow.in_flight)
            try:
                await asyncio.sleep(0.02)
                return await self._store.get(key, prototype, byte_range)
            finally:
                Slow.in_flight -= 1

    inner = zarr.storage.MemoryStore()
    data = np.arange(64 * 16, dtype=np.int32).reshape(64, 16)
    zarr.create_array(inner, name="full", shape=data.shape, chunks=(2, 16), dtype="int32", fill_value=0)[...] = data
    zarr.create_array(inner, name="empty", shape=(8,), chunks=(2,), dtype="int32", fill_value=5)
    store = Slow(inner)
    old = zd.get_config()
    zd.set_config(threads=2)
    try:
        with zarr.config.set({"async.concurrency": 8}):
            np.testing.assert_array_equal(zd.open_array(store, path="full")[...], data)
            np.testing.assert_array_equal(zd.open_array(store, path="empty")[...], np.full(8, 5, np.int32))
    finally:
        zd.set_config(threads=old.threads)
    assert Slow.most == 8, Slow.most


def test_zarr_python_store_gets_shards_wanted_in_part_in_two_calls_of_ranges() -> None:
    """A selection that wants part of each shard: the shards' indexes come in one
    ``get_partial_values`` call of the store, then the inner chunks wanted of them all in
    another, not one request each."""
    zarr = pytest.importorskip("zarr")

    class Counting(zarr.storage.WrapperStore):  # type: ignore[misc]
        partial_calls: list[int] = []
        ranged_gets = 0

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if byte_range is not None:
                Counting.ranged_gets += 1
            return await self._store.get(key, prototype, byte_range)

        async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
            key_ranges = list(key_ranges)
            Counting.partial_calls.append(len(key_ranges))
            return await self._store.get_partial_values(prototype, key_ranges)

    inner = zarr.storage.MemoryStore()
    data = np.arange(64 * 64, dtype=np.int32).reshape(64, 64)
    z = zarr.create_array(inner, shape=data.shape, chunks=(8, 8), shards=(32, 32), dtype="int32",
                          compressors=[zarr.codecs.ZstdCodec()])
    z[...] = data
    arr = zd.open_array(Counting(inner))
    # Rows 4-19 of every column: three rows of inner chunks (12 of them) of each of the two shards
    # they cross, in part.
    np.testing.assert_array_equal(arr[4:20, :], data[4:20, :])
    # The indexes, then one range per shard: the 12 inner chunks it wants of each are neighbours.
    assert Counting.partial_calls == [2, 2], Counting.partial_calls
    assert Counting.ranged_gets == 0  # nothing one request each


def test_a_failing_store_is_a_store_error_in_its_own_words() -> None:
    """What a zarr-python store raises reaches the user as StoreError naming the chunk and the
    exception's first line: no Python traceback, no client debug dump after it."""
    zarr = pytest.importorskip("zarr")

    class Denied(zarr.storage.WrapperStore):  # type: ignore[misc]
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if key.startswith("c/"):
                raise PermissionError("The operation lacked valid authentication credentials for "
                                      "path c/0\n\nDebug source:\nPermissionDenied { path: \"c/0\" }")
            return await self._store.get(key, prototype, byte_range)

    inner = zarr.storage.MemoryStore()
    zarr.create_array(inner, shape=(4,), chunks=(2,), dtype="int32")[...] = np.arange(4)
    with pytest.raises(zd.StoreError) as info:
        zd.open_array(Denied(inner))[...]
    message = str(info.value)
    assert "PermissionError: The operation lacked valid authentication credentials" in message
    assert "chunk 'c/0'" in message or "'c/0'" in message
    assert "Traceback" not in message and "Debug source" not in message
    assert "\n" not in message


def test_read_into_out_and_errors(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(6, 5), dtype="float64", chunks=(4, 4))
    arr[:] = np.arange(30.0).reshape(6, 5)
    out = np.zeros((2, 5))
    assert arr.read((slice(1, 3),), out=out) is out
    np.testing.assert_array_equal(out, np.arange(5.0, 15.0).reshape(2, 5))
    with pytest.raises(zd.UsageError, match="shape"):
        arr.read(..., out=np.zeros((6, 4)))
    with pytest.raises(zd.UsageError, match="C-contiguous"):
        arr.read(..., out=np.zeros((5, 6)).T)


@pytest.mark.parametrize(
    "selection",
    [(7, 0), (slice(None, None, -1),), (None,), ([1, 2],), (0, 0, 0), (..., ...), (True,)],
)
def test_bad_selections_raise_selection_error(tmp_path: Path, selection: Any) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(6, 5), dtype="uint8")
    with pytest.raises(zd.SelectionError):
        arr[selection]


def test_write_broadcasts_and_checks_shape(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(4, 6), dtype="int64", chunks=(3, 4))
    arr[1:3, ::2] = np.array([1, 2, 3])
    expected = np.zeros((4, 6), np.int64)
    expected[1:3, ::2] = [1, 2, 3]
    np.testing.assert_array_equal(arr[:], expected)
    with pytest.raises(zd.UsageError, match="do not fit"):
        arr[0:2, 0:2] = np.ones((3, 3), dtype=np.int64)


def test_fill_value_chunks_are_not_stored(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(8,), dtype="float32", chunks=(4,), fill_value=1.5)
    arr[:] = 1.5
    assert not (tmp_path / "a.zarr" / "c").exists()
    arr[5] = 2.0
    assert sorted(p.name for p in (tmp_path / "a.zarr" / "c").iterdir()) == ["1"]
    arr[5] = 1.5
    assert not list((tmp_path / "a.zarr" / "c").iterdir())


def test_update_attributes(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(2,), dtype="uint8", attributes={"a": 1})
    arr.update_attributes({"b": [1, 2]})
    stored = json.loads((tmp_path / "a.zarr" / "zarr.json").read_text())
    assert stored["attributes"] == {"a": 1, "b": [1, 2]}
    assert zd.open_array(tmp_path / "a.zarr").attrs == {"a": 1, "b": [1, 2]}


def test_in_flight_budget_and_threads_do_not_change_results(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(64, 64), dtype="float32", chunks=(8, 8), shards=(16, 32))
    data = np.random.default_rng(3).standard_normal((64, 64)).astype(np.float32)
    arr[:] = data
    previous = zd.set_config(threads=4, max_inflight_bytes=1)
    try:
        np.testing.assert_array_equal(zd.open_array(tmp_path / "a.zarr")[5:60:3, 1:], data[5:60:3, 1:])
    finally:
        zd.set_config(threads=previous.threads, max_inflight_bytes=previous.max_inflight_bytes)


def test_dlpack_hand_over_to_torch_is_zero_copy(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    arr = zd.create(tmp_path / "a.zarr", shape=(16, 8), dtype="float32", chunks=(4, 8))
    arr[:] = np.arange(128, dtype=np.float32).reshape(16, 8)
    result = arr.read((slice(2, 10),))
    tensor = torch.from_dlpack(result)
    assert tensor.data_ptr() == result.ctypes.data
    assert torch.equal(tensor, torch.arange(16, 80, dtype=torch.float32).reshape(8, 8))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "uint16", "complex64"])
def test_read_as_torch(tmp_path: Path, name: str) -> None:
    torch = pytest.importorskip("torch")
    arr = zd.create(tmp_path / "a.zarr", shape=(5, 6), dtype=name, chunks=(2, 4))
    data = (np.arange(30).reshape(5, 6) % 7).astype(arr.dtype)
    arr[:] = data
    tensor = arr.read((slice(1, 4), ...), like="torch")
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (3, 6)
    assert bytes(tensor.contiguous().view(torch.uint8).numpy()) == data[1:4].tobytes()
    out = torch.zeros((5, 6), dtype=tensor.dtype)
    assert arr.read(out=out) is out


def test_numpy_interop(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(3, 3), dtype="uint32")
    arr[:] = 5
    assert np.asarray(arr).sum() == 45
    assert len(arr) == 3


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float32", "int64"])
def test_write_from_torch_tensors(tmp_path: Path, name: str) -> None:
    torch = pytest.importorskip("torch")
    arr = zd.create(tmp_path / "a.zarr", shape=(6, 10), dtype=name, chunks=(4, 4))
    data = (np.arange(60).reshape(6, 10) % 9).astype(arr.dtype)
    tensor = torch.from_numpy(data.view(np.uint8)).view(getattr(torch, name)).reshape(6, 10)
    arr[:] = tensor
    assert arr[:].tobytes() == data.tobytes()
    arr[1:3, ::3] = tensor[:2, :4]  # a non-contiguous view of a tensor
    data[1:3, ::3] = data[:2, :4]
    assert arr[:].tobytes() == data.tobytes()


def test_direct_io_local_store_reads_the_same(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a.zarr", shape=(300, 700), dtype="float64", chunks=(64, 256),
                    shards=(128, 512), compressors=None)
    data = np.random.default_rng(5).standard_normal((300, 700))
    arr[:] = data
    direct = zd.LocalStore(tmp_path / "a.zarr", io="direct")
    assert "direct" in repr(direct)
    np.testing.assert_array_equal(zd.open_array(direct)[:], data)
    np.testing.assert_array_equal(zd.open_array(direct)[7:290:3, 5:], data[7:290:3, 5:])
    with pytest.raises(zd.UsageError):
        zd.LocalStore(tmp_path, io="mmap")  # type: ignore[arg-type]
