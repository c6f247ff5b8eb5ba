"""Dask over zarr-device: arrays pickle (zarr_device.Array as its store and path, zarr-python
arrays with the plug-in's pipeline), ``dask.array.from_array`` over a zarr_device.Array on the
process scheduler, and ``dask.array.from_zarr`` on a ``dask.distributed`` cluster of worker
processes with the plug-in switched on in each (:class:`zarr_device.dask.EnableOnWorkers`)."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage
from conftest import assert_bits_equal, random_values
from zarr.codecs import ZstdCodec

import zarr_device
from zarr_device.zarr_plugin.pipeline import DevicePipeline

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
from zarr_device.dask import EnableOnWorkers  # noqa: E402

# Seconds any one cluster operation may take before the test fails instead of hanging.
TIMEOUT_S = 60

SHAPE, CHUNKS = (40, 30), (8, 7)


def _zarr_python_array(path: Path, dtype: str = "float32") -> np.ndarray:
    data = random_values(dtype, SHAPE, np.random.default_rng(3))
    zarr.create_array(zarr.storage.LocalStore(path), shape=SHAPE, dtype=dtype, chunks=CHUNKS,
                      compressors=ZstdCodec(level=1), fill_value=0)[...] = data  # fmt: skip
    return data


# -- pickling ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["r", "r+"])
def test_local_arrays_pickle_as_their_directory(tmp_path: Path, mode: str) -> None:
    data = _zarr_python_array(tmp_path / "a")
    arr = zarr_device.open_array(tmp_path / "a", mode=mode)
    copy = pickle.loads(pickle.dumps(arr))
    assert copy.store.root == arr.store.root and copy.path == arr.path and copy.read_only == (mode == "r")
    assert_bits_equal(copy[...], data)
    if mode == "r+":
        copy[0, :] = 1.5  # the copy writes to the same directory
        assert_bits_equal(arr[0, :], np.full(SHAPE[1], 1.5, dtype="float32"))


def test_arrays_of_zarr_python_stores_pickle_their_store(tmp_path: Path) -> None:
    root = tmp_path / "f"
    root.mkdir()
    store = zarr.storage.FsspecStore.from_url(f"file://{root}", storage_options={"auto_mkdir": True})
    data = random_values("int16", (9,), np.random.default_rng(1))
    zarr.create_array(store, name="a", shape=(9,), dtype="int16", chunks=(4,))[...] = data
    copy = pickle.loads(pickle.dumps(zarr_device.open_array(store, path="a")))
    assert isinstance(copy.store, zarr_device.ZarrStoreAdapter)
    assert_bits_equal(copy[...], data)


def test_memory_store_arrays_refuse_to_pickle() -> None:
    arr = zarr_device.create(zarr_device.MemoryStore(), shape=(4,), dtype="int8", chunks=(2,))
    with pytest.raises(zarr_device.UsageError, match="MemoryStore cannot be pickled.*LocalStore"):
        pickle.dumps(arr)


def test_zarr_python_arrays_keep_the_plugin_when_pickled(tmp_path: Path) -> None:
    data = _zarr_python_array(tmp_path / "a")
    with zarr_device.enable(strict=True):
        z = zarr.open_array(tmp_path / "a")
    copy = pickle.loads(pickle.dumps(z))
    pipeline = copy._async_array.codec_pipeline  # noqa: SLF001
    assert isinstance(pipeline, DevicePipeline) and pipeline.strict
    assert pipeline is not z._async_array.codec_pipeline  # noqa: SLF001
    assert_bits_equal(copy[3:30, ::2], data[3:30, ::2])


# -- dask ------------------------------------------------------------------------------------------------
def test_from_array_on_the_process_scheduler(tmp_path: Path) -> None:
    data = _zarr_python_array(tmp_path / "a", "int32")
    arr = zarr_device.open_array(tmp_path / "a")
    x = da.from_array(arr, chunks=(16, 10))
    assert x.npartitions == 9
    result = (x[2:, ::3] * 2).compute(scheduler="processes", num_workers=2)
    assert_bits_equal(result, data[2:, ::3] * 2)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two worker processes of one thread each, the plug-in on in every one; closed at the end."""
    cluster = distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        dashboard_address=None,
        silence_logs=logging.ERROR,
        death_timeout=TIMEOUT_S,
    )
    try:
        with distributed.Client(cluster, timeout=TIMEOUT_S) as c:
            c.register_plugin(EnableOnWorkers(like="numpy"))
            yield c
    finally:
        cluster.close(timeout=TIMEOUT_S)


def _worker_state(path: str) -> tuple[bool, str]:
    # Runs in a worker: whether the plug-in is on there, and the pipeline of an array it opens.
    import zarr as zarr_in_worker

    from zarr_device.zarr_plugin import is_enabled as enabled_in_worker

    opened = zarr_in_worker.open_array(path)
    return enabled_in_worker(), type(opened._async_array.codec_pipeline).__name__  # noqa: SLF001


def test_the_plugin_is_on_in_every_worker(client: Any, tmp_path: Path) -> None:
    _zarr_python_array(tmp_path / "a")
    states = client.run(_worker_state, str(tmp_path / "a"))
    assert len(states) == 2 and all(s == (True, "DevicePipeline") for s in states.values()), states


def _pipeline_name(z: Any) -> str:
    # Runs in a worker: the codec pipeline of a zarr.Array sent there.
    return type(z._async_array.codec_pipeline).__name__  # noqa: SLF001


def test_from_zarr_on_a_cluster(client: Any, tmp_path: Path) -> None:
    data = _zarr_python_array(tmp_path / "a", "int32")
    with zarr_device.enable(like="numpy"):
        x = da.from_zarr(str(tmp_path / "a"))
        z = zarr.open_array(tmp_path / "a")
    assert x.chunks[0][0] == CHUNKS[0] and x.chunks[1][0] == CHUNKS[1]
    # The array dask sends to the workers reads through the engine there.
    assert client.submit(_pipeline_name, z).result(timeout=TIMEOUT_S) == "DevicePipeline"
    futures = client.compute([x, x[5:37:2, 3:].sum(axis=0)])
    whole, column_sums = (f.result(timeout=TIMEOUT_S) for f in futures)
    assert_bits_equal(whole, data)
    assert_bits_equal(column_sums, data[5:37:2, 3:].sum(axis=0))


def test_from_array_of_a_zarr_device_array_on_a_cluster(client: Any, tmp_path: Path) -> None:
    data = _zarr_python_array(tmp_path / "a", "uint16")
    x = da.from_array(zarr_device.open_array(tmp_path / "a"), chunks=(10, 30))
    assert_bits_equal(client.compute(x).result(timeout=TIMEOUT_S), data)


# -- on a GPU --------------------------------------------------------------------------------------------
def _needs_cuda() -> Any:
    if zarr_device.cuda_device_count() == 0:
        pytest.skip("no CUDA device visible to zarr_device (or a build without CUDA)")
    return pytest.importorskip("cupy")


def _block_kinds(block: Any) -> np.ndarray:
    # Runs in a worker: where each block was read to, as a 1 x 1 block of the module's name.
    return np.array([[type(block).__module__.split(".")[0]]], dtype=object)


def _kinds_of_blocks(x: Any) -> Any:
    """A dask array of each of ``x``'s blocks' array module ("cupy", "numpy")."""
    return x.map_blocks(_block_kinds, chunks=(1, 1), dtype=object, meta=np.empty((0, 0), object))


@pytest.mark.gpu
def test_from_zarr_blocks_land_on_the_gpu_threaded(tmp_path: Path) -> None:
    cupy = _needs_cuda()
    data = _zarr_python_array(tmp_path / "a")
    with zarr_device.enable(device="cuda:0", like="cupy"):
        x = da.from_zarr(str(tmp_path / "a"))
        assert isinstance(x._meta, cupy.ndarray)  # noqa: SLF001 - dask's meta comes from a 0-size read
        kinds = _kinds_of_blocks(x)
        assert set(kinds.compute(scheduler="threads").ravel()) == {"cupy"}
        whole = x.compute(scheduler="threads")
        part = x[5:37:2, 3:].sum(axis=0).compute(scheduler="threads")
    assert isinstance(whole, cupy.ndarray) and isinstance(part, cupy.ndarray)
    assert_bits_equal(cupy.asnumpy(whole), data)
    np.testing.assert_allclose(cupy.asnumpy(part), data[5:37:2, 3:].sum(axis=0), rtol=1e-5)


@pytest.mark.gpu
def test_from_zarr_blocks_land_on_the_gpu_in_worker_processes(tmp_path: Path) -> None:
    cupy = _needs_cuda()
    data = _zarr_python_array(tmp_path / "a")
    # Workers of their own (spawned, so each makes its own CUDA context), the plug-in on CUDA there.
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                       dashboard_address=None, silence_logs=logging.ERROR,
                                       death_timeout=TIMEOUT_S)
    try:
        with distributed.Client(cluster, timeout=TIMEOUT_S) as c:
            c.register_plugin(EnableOnWorkers(device="cuda:0", like="cupy"))
            with zarr_device.enable(device="cuda:0", like="cupy"):
                x = da.from_zarr(str(tmp_path / "a"))
            kinds = _kinds_of_blocks(x)
            assert set(c.compute(kinds).result(timeout=TIMEOUT_S).ravel()) == {"cupy"}
            whole = c.compute(x).result(timeout=TIMEOUT_S)
    finally:
        cluster.close(timeout=TIMEOUT_S)
    assert isinstance(whole, cupy.ndarray)
    assert_bits_equal(cupy.asnumpy(whole), data)
