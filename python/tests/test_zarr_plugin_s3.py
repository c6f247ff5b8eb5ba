"""The zarr-python plug-in on a real S3 server (the ``s3_server`` fixture, SeaweedFS), through
zarr-python's two remote stores, ``ObjectStore`` (obstore) and ``FsspecStore`` (s3fs):
``zarr.open_array`` with the plug-in on gives the bits plain zarr-python gives, as NumPy arrays
and as torch tensors, and its writes are what zarr-python reads back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import assert_bits_equal, random_values
from s3_server import S3Server
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr_plugin_helpers import as_numpy, chunk_keys, open_off, open_on

import zarr_device

# Every array here is one the engine serves: falling back would be a failure.
pytestmark = pytest.mark.filterwarnings("error::zarr_device.zarr_plugin.pipeline.FallbackWarning")

SHAPE = (37, 50)

# (id, dtype, zarr.create_array keyword arguments)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("zstd", "float32", {"chunks": (8, 16), "compressors": ZstdCodec(level=1)}),
    ("raw-int16", "int16", {"chunks": (37, 7), "compressors": None}),
    ("sharded", "int64", {"chunks": (5, 10), "shards": (15, 50), "compressors": [ZstdCodec(), Crc32cCodec()]}),
    ("bfloat16", "bfloat16", {"chunks": (8, 16), "shards": (16, 32), "compressors": ZstdCodec(level=1)}),
]

ROWS, COLS = np.array([36, 0, 17, 5]), np.array([49, 3, 20])

# Selections of every kind, as functions of the zarr.Array they read.
READS: dict[str, Callable[[zarr.Array], Any]] = {
    "strided": lambda z: z[3:30:4, :],
    "row": lambda z: z[-1, 7:45],
    "column": lambda z: z[10:11, 49],
    "oindex": lambda z: z.oindex[ROWS, COLS],
    "vindex": lambda z: z.vindex[ROWS, COLS[[0, 1, 2, 0]]],
    "mask": lambda z: z.vindex[np.arange(SHAPE[0] * SHAPE[1]).reshape(SHAPE) % 7 == 3],
    "block": lambda z: z.blocks[-1, 0],
}


def _store(server: S3Server, kind: str, prefix: str) -> Any:
    return server.object_store(prefix) if kind == "obstore" else server.fsspec_store(prefix)


@pytest.mark.parametrize("like", ["numpy", "torch"])
@pytest.mark.parametrize("kind", ["obstore", "fsspec"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reads_equal_zarr_python(s3_server: S3Server, s3_prefix: str, kind: str, like: str, case: Any) -> None:
    if like == "torch":
        pytest.importorskip("torch")
    name, dtype, kwargs = case
    store = _store(s3_server, kind, s3_prefix)
    data = random_values(dtype, SHAPE, np.random.default_rng(len(name)))
    zarr.create_array(store, name="a", shape=SHAPE, dtype=dtype, fill_value=0, **kwargs)[...] = data

    # Plain zarr-python's results, read before the plug-in is on (zarr-python picks the buffers
    # of a read when it reads).
    off = open_off(store, "a")
    expected = {label: np.asarray(read(off)) for label, read in READS.items()}
    with zarr_device.enable(like=like):
        on = open_on(store, "a", like=like)
        whole = on[...]
        assert type(whole).__module__.split(".")[0] == like
        assert_bits_equal(as_numpy(whole), data, f"{name} whole")
        for label, read in READS.items():
            assert_bits_equal(as_numpy(read(on)), expected[label], f"{name} {label}")


@pytest.mark.parametrize("kind", ["obstore", "fsspec"])
def test_writes_are_read_by_zarr_python(s3_server: S3Server, s3_prefix: str, kind: str) -> None:
    store = _store(s3_server, kind, s3_prefix)
    data = random_values("float64", SHAPE, np.random.default_rng(9))
    zarr.create_array(store, name="a", shape=SHAPE, dtype="float64", chunks=(8, 16), fill_value=0,
                      compressors=ZstdCodec(level=1))  # fmt: skip
    on = open_on(store, "a")
    on[...] = data
    on[4:9, 10:30] = -1.0  # partial chunks: read, updated and written back
    on.oindex[ROWS, COLS] = 2.5
    data[4:9, 10:30] = -1.0
    data[np.ix_(ROWS, COLS)] = 2.5
    off = open_off(store, "a")
    assert_bits_equal(np.asarray(off[...]), data)
    assert chunk_keys(store, "a") == {f"a/c/{i}/{j}" for i in range(5) for j in range(4)}


@pytest.mark.gpu
@pytest.mark.parametrize("like", ["cupy", "torch"])
@pytest.mark.parametrize("kind", ["obstore", "fsspec"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reads_land_on_the_gpu(s3_server: S3Server, s3_prefix: str, kind: str, like: str, case: Any) -> None:
    """From S3 onto a CUDA device: every selection's result lives on cuda:0, as the framework
    named, with plain zarr-python's bits; what CuPy cannot hold (bfloat16) is read as torch."""
    if zarr_device.cuda_device_count() == 0:
        pytest.skip("no CUDA device visible to zarr_device")
    framework = pytest.importorskip(like)
    name, dtype, kwargs = case
    if like == "cupy" and dtype == "bfloat16":
        pytest.skip("CuPy has no bfloat16 (read as torch)")
    store = _store(s3_server, kind, s3_prefix)
    data = random_values(dtype, SHAPE, np.random.default_rng(len(name)))
    zarr.create_array(store, name="a", shape=SHAPE, dtype=dtype, fill_value=0, **kwargs)[...] = data
    off = open_off(store, "a")
    expected = {label: np.asarray(read(off)) for label, read in READS.items()}
    with zarr_device.enable(device="cuda:0", like=like):
        on = open_on(store, "a", device="cuda:0", like=like)
        whole = on[...]
        if like == "cupy":
            assert isinstance(whole, framework.ndarray) and whole.device.id == 0
        else:
            assert isinstance(whole, framework.Tensor) and str(whole.device) == "cuda:0"
        assert_bits_equal(as_numpy(whole), data, f"{name} whole on the GPU")
        for label, read in READS.items():
            assert_bits_equal(as_numpy(read(on)), expected[label], f"{name} {label} on the GPU")
