"""Reads into CUDA device memory: they must equal the CPU path bit for bit, hand memory over
without copies, fail with the CPU path's typed errors, and leak nothing when they fail.

Every test here needs a CUDA device that zarr_device can use; without one the module is skipped.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# JAX would otherwise take most of the GPU's memory the first time it is used, leaving too little
# for torch and the engine in the same process.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (
    CORE_DTYPES,
    EXTENSION_DTYPES,
    basic_selections,
    bytes_codec,
    crc32c,
    declare_content_size,
    golden_expected,
    golden_store,
    native,
    numpy_dtype,
    random_values,
    rss_bytes,
    selection_id,
    zd_supported_dtypes,
)

import zarr_device as zd
from zarr_device import _core
from zarr_device.io.devices import DeviceSpec, cuda_build_info, cuda_device_count
from zarr_device.core.selection import normalize_selection

N_GPUS = cuda_device_count()

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(N_GPUS == 0, reason="no CUDA device visible to zarr_device (or a build without CUDA)"),
]

torch = pytest.importorskip("torch")

DEV = "cuda:0"
MIB = 1 << 20


# ----------------------------------------------------------------------------------------------
# helpers


def torch_has(dtype: str) -> bool:
    return isinstance(getattr(torch, dtype, None), torch.dtype)


@functools.lru_cache(maxsize=None)
def torch_takes_dlpack(dtype: str) -> bool:
    """Whether this torch has the type and imports it through DLPack (float8 came late)."""
    if not torch_has(dtype):
        return False
    try:
        torch.from_dlpack(torch.zeros(2, dtype=getattr(torch, dtype)).__dlpack__())
    except Exception:
        return False
    return True


def host_bytes(a: Any) -> bytes:
    return bytes(native(np.asarray(a)).tobytes())


def tensor_bytes(t: Any) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes())


def raw_read_bytes(arr: Any, sel: Any, device: int = 0) -> bytes:
    """The engine's CUDA read of ``sel`` into a plain byte buffer (any data type, whether or not a
    framework has it)."""
    s = normalize_selection(sel, arr.shape)
    nbytes = math.prod(s.shape) * arr.dtype.itemsize
    buf = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    if nbytes:
        stream = torch.cuda.current_stream(device)
        stream.synchronize()
        options = _core.ReadOptions(consumer_stream=stream.cuda_stream)
        _core_array(arr).read_cuda(list(s.slices), device, buf.data_ptr(), nbytes, options)
    return bytes(buf.cpu().numpy().tobytes())


def _core_array(arr: Any) -> Any:
    return arr._core


def gpu_read_bytes(arr: Any, sel: Any, dtype: str) -> bytes:
    """``arr[sel]`` read to cuda:0 through the public API (as torch where torch has the type)."""
    if not torch_has(dtype):
        return raw_read_bytes(arr, sel)
    t = arr.read(sel, device=DEV, like="torch")
    want_shape = normalize_selection(sel, arr.shape).shape
    assert isinstance(t, torch.Tensor) and t.device == torch.device(DEV)
    assert tuple(t.shape) == want_shape and t.dtype == getattr(torch, dtype) and t.is_contiguous()
    return tensor_bytes(t)


def make_array(path: Path, dtype: str = "float32", shape: tuple[int, ...] = (300, 200),
               chunks: tuple[int, ...] = (64, 64), seed: int = 0, **kwargs: Any) -> tuple[Any, np.ndarray]:
    kwargs.setdefault("compressors", "zstd")
    arr = zd.create(path, shape=shape, dtype=dtype, chunks=chunks, **kwargs)
    values = random_values(dtype, shape, np.random.default_rng(seed))
    arr[...] = values
    return zd.open_array(path), values


def capsule_name(capsule: Any) -> bytes:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    name: bytes = get_name(capsule)
    return name


# ----------------------------------------------------------------------------------------------
# the device itself


def test_device_count_and_build_info() -> None:
    info = cuda_build_info()
    assert info["compiled"] is True
    assert N_GPUS == _core.cuda_device_count() >= 1
    if torch.cuda.is_available():
        assert N_GPUS == torch.cuda.device_count()


def test_device_past_the_last_one(tmp_path: Path) -> None:
    arr, _ = make_array(tmp_path / "a", shape=(8, 8), chunks=(4, 4))
    with pytest.raises(zd.DeviceError) as info:
        arr.read(device=f"cuda:{N_GPUS}", like="torch")
    assert f"only {N_GPUS} CUDA device" in str(info.value)


# ----------------------------------------------------------------------------------------------
# golden cases: whole and through selections, equal to the CPU read bit for bit


def test_golden_to_cuda(golden_array_case: dict[str, Any]) -> None:
    case = golden_array_case
    if case["dtype"] not in zd_supported_dtypes():
        pytest.skip(f"{case['dtype']} is not supported")
    arr = zd.open_array(str(golden_store(case)), path=case["path"])
    dtype = case["dtype"]
    expected = host_bytes(golden_expected(case))
    assert gpu_read_bytes(arr, Ellipsis, dtype) == expected, f"{case['name']}: whole array"
    assert raw_read_bytes(arr, Ellipsis) == expected, f"{case['name']}: whole array, raw"
    for sel in basic_selections(arr.shape):
        want = host_bytes(arr.read(sel))
        assert gpu_read_bytes(arr, sel, dtype) == want, f"{case['name']} [{selection_id(sel)}]"

    # the framework-neutral result: a DLPack array with the right description
    result = arr.read(device=DEV)
    assert isinstance(result, _core.DeviceArray)
    assert tuple(result.shape) == arr.shape and result.dtype == dtype and result.device == 0
    assert tuple(result.__dlpack_device__()) == (2, 0)
    if torch_takes_dlpack(dtype):
        t = torch.from_dlpack(result)
        assert t.dtype == getattr(torch, dtype) and t.device == torch.device(DEV)
        assert tensor_bytes(t) == expected, f"{case['name']}: DLPack"


# ----------------------------------------------------------------------------------------------
# results: torch, DLPack, CuPy, JAX, out=


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "float8_e5m2", "bool", "complex64", "uint16"])
def test_like_torch_and_dlpack_types(tmp_path: Path, dtype: str) -> None:
    arr, values = make_array(tmp_path / "a", dtype, shape=(130, 70), chunks=(32, 32))
    t = arr.read(device=DEV, like="torch")
    assert t.dtype == getattr(torch, dtype)
    assert tensor_bytes(t) == host_bytes(values)
    if not torch_takes_dlpack(dtype):
        pytest.skip(f"torch {torch.__version__} cannot import {dtype} through DLPack")
    viewed = torch.from_dlpack(arr.read(device=DEV))
    assert viewed.dtype == getattr(torch, dtype)  # bfloat16 and float8 carry DLPack's own codes
    assert tensor_bytes(viewed) == host_bytes(values)


def test_device_array_is_shared_not_copied(tmp_path: Path) -> None:
    arr, values = make_array(tmp_path / "a")
    result = arr.read(device=DEV)
    first = torch.from_dlpack(result)
    second = torch.from_dlpack(result)
    assert first.data_ptr() == second.data_ptr() == result.ptr != 0
    assert first.device == torch.device(DEV)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        assert cupy.from_dlpack(result).data.ptr == first.data_ptr()
    # the consumers keep the memory alive after the producer is gone
    del result, second
    gc.collect()
    churn = [torch.full((MIB,), 7.0, device=DEV) for _ in range(16)]
    torch.cuda.synchronize()
    assert tensor_bytes(first) == host_bytes(values)
    del churn


def test_device_array_capsules(tmp_path: Path) -> None:
    arr, values = make_array(tmp_path / "a", shape=(40, 30), chunks=(16, 16))
    result = arr.read(device=DEV)
    assert capsule_name(result.__dlpack__()) == b"dltensor"  # what JAX asks for
    assert capsule_name(result.__dlpack__(max_version=(1, 0))) == b"dltensor_versioned"
    assert capsule_name(result.__dlpack__(max_version=(0, 8))) == b"dltensor"
    stream = torch.cuda.Stream(device=DEV)
    t = torch.from_dlpack(result.__dlpack__(stream=stream.cuda_stream))
    with torch.cuda.stream(stream):
        assert tensor_bytes(t) == host_bytes(values)


def test_empty_and_scalar_results(tmp_path: Path) -> None:
    arr, values = make_array(tmp_path / "a", shape=(10, 7), chunks=(4, 3))
    empty = arr.read((slice(3, 3),), device=DEV)
    assert tuple(empty.shape) == (0, 7)
    assert tuple(torch.from_dlpack(empty).shape) == (0, 7)
    assert tuple(arr.read((slice(3, 3),), device=DEV, like="torch").shape) == (0, 7)
    scalar = arr.read((2, 5), device=DEV, like="torch")
    assert scalar.shape == () and tensor_bytes(scalar) == host_bytes(values[2, 5])
    assert tensor_bytes(torch.from_dlpack(arr.read((2, 5), device=DEV))) == host_bytes(values[2, 5])


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", "complex128"])
def test_like_cupy(tmp_path: Path, dtype: str) -> None:
    cupy = pytest.importorskip("cupy")
    arr, values = make_array(tmp_path / "a", dtype, shape=(100, 90), chunks=(32, 32))
    sel = (slice(5, 95, 2), slice(10, None))
    result = arr.read(sel, device=DEV, like="cupy")
    assert isinstance(result, cupy.ndarray) and result.device.id == 0
    assert result.dtype == numpy_dtype(dtype) and result.flags.c_contiguous
    assert cupy.asnumpy(result).tobytes() == host_bytes(values[sel])


def test_like_cupy_refuses_bfloat16(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    arr, _ = make_array(tmp_path / "a", "bfloat16", shape=(8, 8), chunks=(4, 4))
    with pytest.raises(zd.UsageError, match="like='torch'"):
        arr.read(device=DEV, like="cupy")


def _jax_gpu() -> Any:
    jax = pytest.importorskip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    if not gpus:
        pytest.skip("JAX sees no GPU")
    return jax


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "float8_e3m4", "int32", "bool"])
def test_like_jax(tmp_path: Path, dtype: str) -> None:
    jax = _jax_gpu()
    if dtype.startswith("float8"):
        if not hasattr(jax.numpy, dtype):
            pytest.skip(f"this JAX has no {dtype}")
        try:  # JAX's own DLPack round trip: does this JAX give the type a DLPack code at all?
            jax.dlpack.from_dlpack(jax.device_put(jax.numpy.zeros(4, dtype), jax.devices("gpu")[0]))
        except Exception as e:
            pytest.skip(f"this JAX cannot take {dtype} through DLPack: {e}")
    arr, values = make_array(tmp_path / "a", dtype, shape=(120, 50), chunks=(32, 16))
    sel = (slice(3, 117), slice(None, None, 2))
    result = arr.read(sel, device=DEV, like="jax")
    assert isinstance(result, jax.Array)
    (where,) = result.devices()
    assert where.platform == "gpu" and where.local_hardware_id == 0
    assert tuple(result.shape) == values[sel].shape
    assert host_bytes(np.asarray(result)) == host_bytes(values[sel])


def test_jax_takes_the_engine_buffer_without_a_copy(tmp_path: Path) -> None:
    jax = _jax_gpu()
    arr, values = make_array(tmp_path / "a", "bfloat16", shape=(256, 128), chunks=(64, 64))
    nbytes = values.nbytes
    buffer = _core.DeviceBuffer(0, nbytes)
    assert buffer.nbytes == nbytes and buffer.device == 0 and buffer.ptr % 256 == 0
    _core_array(arr).read_cuda([(0, 1, 256), (0, 1, 128)], 0, buffer.ptr, nbytes, _core.ReadOptions())
    result = jax.dlpack.from_dlpack(_core.DeviceArray(buffer, [256, 128], "bfloat16"))
    assert result.unsafe_buffer_pointer() == buffer.ptr
    ptr = buffer.ptr
    del buffer
    gc.collect()
    assert result.unsafe_buffer_pointer() == ptr
    assert host_bytes(np.asarray(result)) == host_bytes(values)


def test_out_torch(tmp_path: Path) -> None:
    arr, values = make_array(tmp_path / "a")
    big = torch.full((302, 200), -1.0, device=DEV)
    out = big[1:301]  # contiguous, at an offset into its storage
    assert arr.read(out=out) is out  # the device comes from out
    assert tensor_bytes(out) == host_bytes(values)
    assert bool((big[0] == -1).all()) and bool((big[301] == -1).all())  # nothing written outside
    out.zero_()
    assert arr.read(out=out, device=DEV, like="torch") is out
    assert tensor_bytes(out) == host_bytes(values)
    with pytest.raises(zd.UsageError, match="contiguous"):
        arr.read(out=torch.empty((200, 300), device=DEV).T)
    with pytest.raises(zd.UsageError, match="dtype"):
        arr.read(out=torch.empty((300, 200), device=DEV, dtype=torch.float64))
    with pytest.raises(zd.UsageError, match="shape"):
        arr.read((slice(0, 10),), out=out)
    with pytest.raises(zd.UsageError, match="out lives on"):
        arr.read(out=out, device="cpu")
    with pytest.raises(zd.UsageError):
        arr.read(out=out, like="cupy")


def test_out_cupy(tmp_path: Path) -> None:
    cupy = pytest.importorskip("cupy")
    arr, values = make_array(tmp_path / "a", "int32")
    with cupy.cuda.Device(0):
        big = cupy.full((302, 200), -1, dtype=cupy.int32)
    out = big[1:301]
    assert arr.read(out=out) is out
    assert cupy.asnumpy(out).tobytes() == host_bytes(values)
    assert int((big[0] == -1).all()) == 1 and int((big[301] == -1).all()) == 1
    with pytest.raises(zd.UsageError, match="contiguous"):
        arr.read(out=cupy.empty((200, 300), dtype=cupy.int32).T)
    with pytest.raises(zd.UsageError, match="dtype"):
        arr.read(out=cupy.empty((300, 200), dtype=cupy.int64))


def test_reads_order_their_work_on_the_frameworks_current_stream(tmp_path: Path) -> None:
    """The stream a read's writes wait on is the one the caller's framework has current (a CuPy
    stream context, torch.cuda.stream), found without entering a device context; and a read into
    CuPy under a side stream gets its values, also from a thread whose current device is another
    one's (a read there enters the device)."""
    cupy = pytest.importorskip("cupy")
    from zarr_device.io.adapters import adapter
    from zarr_device.io.devices import CUDA_STREAM_LEGACY

    arr, values = make_array(tmp_path / "a", "int32")
    cupy_adapter, torch_adapter = adapter("cupy"), adapter("torch")
    assert cupy_adapter.stream(0) == (int(cupy.cuda.get_current_stream(0).ptr) or CUDA_STREAM_LEGACY)
    with cupy.cuda.Device(0):
        side = cupy.cuda.Stream(non_blocking=True)
    with side:
        assert cupy_adapter.stream(0) == int(side.ptr)
        result = arr.read(device=DEV, like="cupy")
        assert cupy.asnumpy(result).tobytes() == host_bytes(values)
    assert cupy_adapter.stream(0) != int(side.ptr)
    assert torch_adapter.stream(0) == (torch.cuda.current_stream(0).cuda_stream or CUDA_STREAM_LEGACY)
    torch_side = torch.cuda.Stream(device=DEV)
    with torch.cuda.stream(torch_side):
        assert torch_adapter.stream(0) == torch_side.cuda_stream
    if N_GPUS > 1:
        with cupy.cuda.Device(1):
            other = arr.read(device=DEV, like="cupy")
            assert cupy.cuda.runtime.getDevice() == 1
        assert other.device.id == 0 and cupy.asnumpy(other).tobytes() == host_bytes(values)


def test_framework_path_on_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path other devices take (a pinned host staging, then non-blocking torch copies), run
    against a CUDA device: the staging is pinned and the values arrive intact; with a staging far
    smaller than the array, each half is refilled only after the GPU's copies out of it (events),
    and the values still arrive intact."""
    from zarr_device.io.adapters import torch as torch_adapter

    staged: list[Any] = []
    real = torch_adapter.pinned_empty

    def spy(shape: tuple[int, ...], zarr_name: str) -> Any:
        staged.append(real(shape, zarr_name))
        return staged[-1]

    monkeypatch.setattr(torch_adapter, "pinned_empty", spy)
    target = DeviceSpec("framework", 0, DEV)
    arr, values = make_array(tmp_path / "a", "bfloat16")
    result = arr.read(device=target, like="torch")
    assert result.device == torch.device(DEV)
    assert len(staged) == 1 and staged[0].is_pinned()
    assert tensor_bytes(result) == host_bytes(values)
    big, big_values = make_array(tmp_path / "b", "float32", shape=(2048, 1024), chunks=(128, 1024))
    previous = zd.set_config(staging_bytes="2MiB")
    try:
        got = zd.read_many({"b": big, "a": arr}, device=target, like="torch")
    finally:
        zd.set_config(staging_bytes=previous.staging_bytes)
    assert staged[-1].numel() <= 2 << 20 and staged[-1].is_pinned()
    assert tensor_bytes(got["b"]) == host_bytes(big_values)
    assert tensor_bytes(got["a"]) == host_bytes(values)


# ----------------------------------------------------------------------------------------------
# property test: random arrays, GPU read == CPU read


CODEC_KINDS = [
    "none", "zstd", "zstd_checksum", "gzip", "blosc", "crc32c", "zstd_crc32c", "transpose", "big_endian",
    "transpose_big_endian_gzip",
]
GPU_DTYPES = [d for d in CORE_DTYPES + list(EXTENSION_DTYPES) if torch_has(d) and d in zd_supported_dtypes()]


@dataclass
class Setup:
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    dtype: str
    codec: str
    seed: int

    def inner_codecs(self) -> list[dict[str, Any]]:
        dt = numpy_dtype(self.dtype)
        order = list(range(len(self.shape)))[::-1]
        transpose = [{"name": "transpose", "configuration": {"order": order}}]
        zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": self.codec == "zstd_checksum"}}
        chains: dict[str, list[dict[str, Any]]] = {
            "none": [bytes_codec(dt)],
            "zstd": [bytes_codec(dt), zstd],
            "zstd_checksum": [bytes_codec(dt), zstd],
            "gzip": [bytes_codec(dt), {"name": "gzip", "configuration": {"level": 1}}],
            "blosc": [bytes_codec(dt), {"name": "blosc", "configuration": {
                "cname": "zstd", "clevel": 3, "shuffle": "bitshuffle" if dt.itemsize == 1 else "shuffle",
                "typesize": dt.itemsize, "blocksize": 0}}],
            "crc32c": [bytes_codec(dt), {"name": "crc32c"}],
            "zstd_crc32c": [bytes_codec(dt), zstd, {"name": "crc32c"}],
            "transpose": transpose + [bytes_codec(dt)],
            "big_endian": [bytes_codec(dt, "big")],
            "transpose_big_endian_gzip": transpose + [bytes_codec(dt, "big"), {"name": "gzip", "configuration": {"level": 1}}],
        }
        return chains[self.codec]

    def codecs(self) -> list[dict[str, Any]]:
        if self.shards is None:
            return self.inner_codecs()
        return [{
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(self.chunks),
                "codecs": self.inner_codecs(),
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end" if self.seed % 2 else "start",
            },
        }]

    def fill(self) -> Any:
        dt = numpy_dtype(self.dtype)
        if self.seed % 3 == 0:
            return None
        if dt.kind == "b":
            return True
        if dt.kind in "iu":
            return 3
        if dt.kind == "c":
            return complex(2.0, -0.5)
        if self.dtype.startswith("float8"):
            return 1.0  # representable in every float8 type (float8_e8m0fnu has no sign or zero)
        return float("nan") if self.seed % 3 == 1 else -1.5


@st.composite
def setups(draw: st.DrawFn, max_extent: int, max_chunk: int, max_elements: int | None = None,
           max_chunk_elements: int | None = None) -> Setup:
    """Random arrays of 0-3 dimensions; with ``max_elements`` (``max_chunk_elements``) the bound
    per dimension shrinks with the dimension count, so that arrays (chunks) stay that small."""
    ndim = draw(st.integers(0, 3))
    extent, chunk = max_extent, max_chunk
    if ndim and max_elements is not None:
        extent = min(max_extent, int(round(max_elements ** (1 / ndim))))
    if ndim and max_chunk_elements is not None:
        chunk = min(max_chunk, max(1, int(round(max_chunk_elements ** (1 / ndim)))))
    shape = tuple(draw(st.lists(st.integers(0, extent), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, chunk), min_size=ndim, max_size=ndim)))
    shards = None
    if ndim > 0 and draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    return Setup(shape, chunks, shards, draw(st.sampled_from(GPU_DTYPES)), draw(st.sampled_from(CODEC_KINDS)),
                 draw(st.integers(0, 2**32 - 1)))


def _index(n: int) -> st.SearchStrategy[Any]:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    slices = st.builds(slice, bound, bound, st.one_of(st.none(), st.integers(1, 4)))
    return slices if n == 0 else st.one_of(st.integers(-n, n - 1), slices)


@st.composite
def selections(draw: st.DrawFn, shape: tuple[int, ...]) -> Any:
    items = [draw(_index(n)) for n in shape]
    if items and draw(st.booleans()):
        at = draw(st.integers(0, len(items)))
        items = items[:at] + [Ellipsis] + items[draw(st.integers(at, len(items))):]
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def _check_setup(setup: Setup, data: st.DataObject) -> None:
    rng = np.random.default_rng(setup.seed)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a"
        arr = zd.create(path, shape=setup.shape, dtype=setup.dtype, chunks=setup.shards or setup.chunks,
                        codecs=setup.codecs(), fill_value=setup.fill())
        region = []
        for n in setup.shape:  # a random region is written; chunks outside it stay missing (fill)
            a = int(rng.integers(0, n + 1))
            region.append(slice(a, int(rng.integers(a, n + 1))))
        values = random_values(setup.dtype, tuple(s.stop - s.start for s in region), rng)
        arr[tuple(region)] = values
        arr = zd.open_array(path)
        assert gpu_read_bytes(arr, Ellipsis, setup.dtype) == host_bytes(arr.read()), "whole array"
        for _ in range(4):
            sel = data.draw(selections(setup.shape), label="selection")
            assert gpu_read_bytes(arr, sel, setup.dtype) == host_bytes(arr.read(sel)), f"[{selection_id(sel)}]"


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), setup=setups(max_extent=9, max_chunk=5))
def test_small_arrays_gpu_equals_cpu(data: st.DataObject, setup: Setup) -> None:
    _check_setup(setup, data)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), setup=setups(max_extent=20000, max_chunk=20000, max_elements=250_000,
                                   max_chunk_elements=40_000))
def test_larger_arrays_gpu_equals_cpu(data: st.DataObject, setup: Setup) -> None:
    """Arrays of up to 250k elements in chunks of up to 40k (up to 320 KiB): large enough for the
    GPU decoders and batched copies."""
    _check_setup(setup, data)


# ----------------------------------------------------------------------------------------------
# bad input: the same typed errors as the CPU path

SHAPE = (256, 256)
CHUNKS = (128, 128)
KEY = "c/1/1"
ZSTD = {"name": "zstd", "configuration": {"level": 3, "checksum": False}}
CHAINS: dict[str, list[dict[str, Any]]] = {
    "bytes": [bytes_codec("float32")],
    "zstd": [bytes_codec("float32"), ZSTD],
    "zstd_checksum": [bytes_codec("float32"), {"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
    "gzip": [bytes_codec("float32"), {"name": "gzip", "configuration": {"level": 5}}],
    "blosc": [bytes_codec("float32"), {"name": "blosc", "configuration": {
        "cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}],
    "crc32c": [bytes_codec("float32"), {"name": "crc32c"}],
    "zstd_crc32c": [bytes_codec("float32"), ZSTD, {"name": "crc32c"}],
}


def _damaged(tmp_path: Path, chain: str, damage: Callable[[bytearray], bytes], name: str = "a") -> Path:
    """An array with every chunk written, whose chunk KEY is then rewritten by ``damage``."""
    path = tmp_path / name
    arr = zd.create(path, shape=SHAPE, dtype="float32", chunks=CHUNKS, codecs=CHAINS[chain])
    arr[...] = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32) + 10.0
    chunk = path / KEY
    chunk.write_bytes(damage(bytearray(chunk.read_bytes())))
    return path


def _same_error(path: Path, key: str = KEY) -> type[BaseException]:
    """Reads on the CPU and on the GPU (as torch and as a DLPack array) must fail alike, naming
    the chunk; a selection that avoids the damaged chunk still reads on the GPU."""
    arr = zd.open_array(path)
    with pytest.raises(zd.ZarrDeviceError) as cpu:
        arr.read()
    for like in ("torch", None):
        with pytest.raises(zd.ZarrDeviceError) as gpu:
            arr.read(device=DEV, like=like)
        assert type(gpu.value) is type(cpu.value), f"GPU raised {gpu.value!r}, CPU raised {cpu.value!r}"
        assert key in str(gpu.value), str(gpu.value)
    healthy = (slice(0, 128),)
    assert tensor_bytes(arr.read(healthy, device=DEV, like="torch")) == host_bytes(arr.read(healthy))
    return type(cpu.value)


def _flip(at: int, mask: int = 0xFF) -> Callable[[bytearray], bytes]:
    def damage(data: bytearray) -> bytes:
        data[at] ^= mask
        return bytes(data)

    return damage


def test_corrupt_zstd_magic(tmp_path: Path) -> None:
    assert issubclass(_same_error(_damaged(tmp_path, "zstd", _flip(0))), zd.CodecError)


def test_corrupt_zstd_content_checksum(tmp_path: Path) -> None:
    assert issubclass(_same_error(_damaged(tmp_path, "zstd_checksum", _flip(-1))), zd.CodecError)


def test_zstd_frame_of_the_wrong_size(tmp_path: Path) -> None:
    """A valid zstd frame whose content is one row short of the chunk."""
    other = zd.create(tmp_path / "other", shape=(127, 128), dtype="float32", chunks=(127, 128), codecs=CHAINS["zstd"])
    other[...] = 1.0
    frame = (tmp_path / "other" / "c" / "0" / "0").read_bytes()
    assert issubclass(_same_error(_damaged(tmp_path, "zstd", lambda _: frame)), zd.CodecError)


@pytest.mark.parametrize("chain", ["crc32c", "zstd_crc32c"])
def test_crc32c_mismatch(tmp_path: Path, chain: str) -> None:
    assert _same_error(_damaged(tmp_path, chain, _flip(5, 0x01))) is zd.ChecksumError


@pytest.mark.parametrize("chain", ["bytes", "zstd", "gzip", "blosc", "zstd_crc32c"])
@pytest.mark.parametrize("keep", ["half", "one byte short"])
def test_truncated_chunk(tmp_path: Path, chain: str, keep: str) -> None:
    def cut(data: bytearray) -> bytes:
        return bytes(data[: len(data) // 2 if keep == "half" else len(data) - 1])

    assert issubclass(_same_error(_damaged(tmp_path, chain, cut)), zd.CodecError)


def test_corrupt_gzip_trailer(tmp_path: Path) -> None:
    assert issubclass(_same_error(_damaged(tmp_path, "gzip", _flip(-8))), zd.CodecError)


def _sharded(tmp_path: Path, inner: list[dict[str, Any]]) -> tuple[Path, Path]:
    path = tmp_path / "s"
    codecs = [{
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": [64, 64],
            "codecs": inner,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end",
        },
    }]
    arr = zd.create(path, shape=SHAPE, dtype="float32", chunks=CHUNKS, codecs=codecs)
    arr[...] = np.random.default_rng(6).standard_normal(SHAPE).astype(np.float32) + 10.0
    return path, path / KEY


def _index_entries(shard: bytes) -> list[list[int]]:
    raw = shard[-(4 * 16 + 4):-4]
    return [[int.from_bytes(raw[16 * i:16 * i + 8], "little"), int.from_bytes(raw[16 * i + 8:16 * i + 16], "little")]
            for i in range(4)]


def _with_index(shard: bytes, entries: list[list[int]]) -> bytes:
    raw = b"".join(o.to_bytes(8, "little") + n.to_bytes(8, "little") for o, n in entries)
    return shard[: -(4 * 16 + 4)] + raw + crc32c(raw)


def test_shard_index_entry_past_the_end(tmp_path: Path) -> None:
    path, shard_file = _sharded(tmp_path, CHAINS["zstd"])
    shard = shard_file.read_bytes()
    entries = _index_entries(shard)
    assert _with_index(shard, entries) == shard  # the index is read back as written
    entries[2][0] = len(shard) + 16
    shard_file.write_bytes(_with_index(shard, entries))
    assert issubclass(_same_error(path), zd.CodecError)


def test_shard_index_entries_overlap(tmp_path: Path) -> None:
    path, shard_file = _sharded(tmp_path, CHAINS["bytes"])
    shard = shard_file.read_bytes()
    entries = sorted(_index_entries(shard), key=lambda e: e[0])
    entries[1][0] = entries[0][0] + 4
    shard_file.write_bytes(_with_index(shard, entries))
    assert issubclass(_same_error(path), zd.CodecError)


def test_shard_index_checksum_mismatch(tmp_path: Path) -> None:
    path, shard_file = _sharded(tmp_path, CHAINS["zstd"])
    data = bytearray(shard_file.read_bytes())
    data[-20] ^= 0x10
    shard_file.write_bytes(bytes(data))
    assert _same_error(path) is zd.ChecksumError


def test_inner_chunk_checksum_mismatch(tmp_path: Path) -> None:
    path, shard_file = _sharded(tmp_path, CHAINS["zstd_crc32c"])
    shard = bytearray(shard_file.read_bytes())
    offset, length = _index_entries(bytes(shard))[1]
    shard[offset + length - 6] ^= 0x01
    shard_file.write_bytes(bytes(shard))
    assert _same_error(path) is zd.ChecksumError


@pytest.mark.parametrize("seed", range(12))
def test_corrupt_zstd_body_is_survived(tmp_path: Path, seed: int) -> None:
    """Damage inside a zstd frame (header intact, no checksum) is undefined input for GPU
    decoders: the read may fail with a CodecError or return wrong values, but nothing else, and
    the device stays usable."""
    rng = np.random.default_rng(seed)

    def scramble(data: bytearray) -> bytes:
        for at in rng.integers(12, len(data), size=int(rng.integers(1, 16))):
            data[int(at)] = int(rng.integers(0, 256))
        return bytes(data)

    path = _damaged(tmp_path, "zstd", scramble)
    arr = zd.open_array(path)
    try:
        result = arr.read(device=DEV, like="torch")
        assert tuple(result.shape) == SHAPE
    except zd.CodecError as e:
        assert KEY in str(e)
    torch.cuda.synchronize()
    healthy, values = make_array(tmp_path / "ok", shape=SHAPE, chunks=CHUNKS, seed=seed)
    assert tensor_bytes(healthy.read(device=DEV, like="torch")) == host_bytes(values)


def test_failing_reads_do_not_leak(tmp_path: Path) -> None:
    """1000 failing reads (checksum mismatch, truncated zstd) leave device memory and host memory
    where they were."""
    bad_crc = zd.open_array(_damaged(tmp_path, "zstd_crc32c", _flip(7, 0x01), "crc"))
    truncated = zd.open_array(_damaged(tmp_path, "zstd", lambda d: bytes(d[: len(d) // 3]), "cut"))

    def fail(i: int) -> None:
        arr = bad_crc if i % 2 else truncated
        try:
            arr.read(device=DEV, like="torch" if i % 3 else None)
        except zd.CodecError:
            return
        raise AssertionError("a damaged array read without error")

    for i in range(60):  # staging buffers, decoder scratch and torch's cache reach their size
        fail(i)
    gc.collect()
    torch.cuda.synchronize()
    free_before = torch.cuda.mem_get_info(0)[0]
    allocated_before = torch.cuda.memory_allocated(0)
    rss_before = rss_bytes()
    for i in range(1000):
        fail(i)
    gc.collect()
    torch.cuda.synchronize()
    free_after = torch.cuda.mem_get_info(0)[0]
    rss_after = rss_bytes()
    assert torch.cuda.memory_allocated(0) == allocated_before
    assert free_before - free_after < 32 * MIB, f"device memory fell by {(free_before - free_after) / MIB:.1f} MiB"
    assert rss_after - rss_before < 48 * MIB, f"host RSS grew by {(rss_after - rss_before) / MIB:.1f} MiB"
    healthy, values = make_array(tmp_path / "ok", shape=SHAPE, chunks=CHUNKS)
    assert tensor_bytes(healthy.read(device=DEV, like="torch")) == host_bytes(values)


def _restore_config(previous: Any) -> None:
    zd.set_config(**{f: getattr(previous, f) for f in ("staging_bytes", "staging_slots", "decode_bytes")})


def test_staging_settings_apply_to_the_next_read(tmp_path: Path) -> None:
    """The ring is made again when its settings change: a chunk larger than a slot that cannot be
    staged in parts (gzip, decoded on the CPU whole) is refused with advice, and read once the
    slot is large enough."""
    arr = zd.create(tmp_path / "big", shape=(1024, 1024), dtype="float32", chunks=(1024, 1024),
                    compressors={"name": "gzip", "configuration": {"level": 1}})
    values = np.random.default_rng(3).standard_normal((1024, 1024), dtype=np.float32)
    arr[...] = values
    previous = zd.set_config(staging_bytes=2 * MIB, staging_slots=2)  # a 4 MiB chunk
    try:
        with pytest.raises(zd.OutOfMemoryError, match="raise staging_bytes"):
            arr.read(device=DEV, like="torch")
        zd.set_config(staging_bytes=16 * MIB, staging_slots=2)
        assert tensor_bytes(arr.read(device=DEV, like="torch")) == host_bytes(values)
    finally:
        _restore_config(previous)


@pytest.mark.parametrize("codecs", ["plain+crc32c", "zstd", "zstd+crc32c", "sharded plain"])
def test_chunks_larger_than_a_slot_are_staged_in_parts(tmp_path: Path, codecs: str) -> None:
    """Chunks larger than a slot (8 MiB against 2 MiB slots), or than the whole ring (20 MiB
    against 16 MiB, zstd + crc32c, which the GPU would decode), are read through the ring a part
    at a time, bit-equal to the host read: whole, and into a slice of a larger output (out=). A
    selection that cuts the chunks stages each whole (in larger slots), and one that cuts a chunk
    larger than the whole ring is staged in parts of its selected elements: rows (what a
    tensor-parallel rank reads), a box, steps."""
    shape = chunks = (5120, 1024) if codecs == "zstd+crc32c" else (3072, 1024)
    if codecs != "zstd+crc32c":
        chunks = (2048, 1024)
    kwargs: dict[str, Any] = {
        "plain+crc32c": {"codecs": [{"name": "bytes"}, {"name": "crc32c"}]},
        "zstd": {"compressors": {"name": "zstd", "configuration": {"level": 1}}},
        "zstd+crc32c": {"compressors": [{"name": "zstd", "configuration": {"level": 1}},
                                        {"name": "crc32c"}]},
        "sharded plain": {"compressors": None, "shards": (4096, 1024)},
    }[codecs]
    arr, values = make_array(tmp_path / "a", shape=shape, chunks=chunks, seed=4, **kwargs)
    previous = zd.set_config(staging_bytes=16 * MIB, staging_slots=8)  # 2 MiB slots
    try:
        assert tensor_bytes(arr.read(device=DEV, like="torch")) == host_bytes(values)
        out = torch.full((6000, 1024), -1.0, dtype=torch.float32, device=DEV)
        arr.read(device=DEV, out=out[100:100 + shape[0]])
        torch.cuda.synchronize()
        assert tensor_bytes(out[100:100 + shape[0]]) == host_bytes(values)
        assert bool((out[:100] == -1).all()) and bool((out[100 + shape[0]:] == -1).all())
        for cut in (np.s_[5:2900, 3:1000], np.s_[1280:3840], np.s_[7:5000:3, 1::5]):
            part = arr.read(cut, device=DEV, like="torch")
            assert tensor_bytes(part) == host_bytes(np.ascontiguousarray(values[cut]))
    finally:
        _restore_config(previous)


def test_a_damaged_part_is_a_checksum_error_naming_the_chunk(tmp_path: Path) -> None:
    """A chunk staged in parts with a damaged byte in one part fails its crc32c once all its
    parts are in: a ChecksumError that names the chunk; the next read of a healthy array works."""
    arr, _ = make_array(tmp_path / "a", shape=(2048, 1024), chunks=(2048, 1024), seed=5,
                        codecs=[{"name": "bytes"}, {"name": "crc32c"}])
    chunk = tmp_path / "a" / "c" / "0" / "0"
    damaged = bytearray(chunk.read_bytes())
    damaged[5 * MIB + 3] ^= 0x10
    chunk.write_bytes(bytes(damaged))
    previous = zd.set_config(staging_bytes=8 * MIB, staging_slots=4)
    try:
        with pytest.raises(zd.ChecksumError, match=r"chunk 'c/0/0'"):
            arr.read(device=DEV, like="torch")
        healthy, values = make_array(tmp_path / "ok", shape=(2048, 1024), chunks=(2048, 1024),
                                     compressors=None)
        assert tensor_bytes(healthy.read(device=DEV, like="torch")) == host_bytes(values)
    finally:
        _restore_config(previous)


@pytest.mark.parametrize("damage_at", [None, "before", "after"])
def test_rows_of_a_checksummed_chunk_larger_than_the_ring(tmp_path: Path, damage_at: str | None) -> None:
    """Rows of an uncompressed chunk under a crc32c larger than the whole ring (20 MiB against 16
    MiB) are staged alone, the parts' fetches checksumming the rest of the chunk: bit-equal to
    the host read, and a byte flipped in rows before or after the selection is a ChecksumError
    naming the chunk."""
    arr, values = make_array(tmp_path / "a", shape=(5120, 1024), chunks=(5120, 1024), seed=6,
                             codecs=[{"name": "bytes"}, {"name": "crc32c"}])
    if damage_at is not None:
        chunk = tmp_path / "a" / "c" / "0" / "0"
        damaged = bytearray(chunk.read_bytes())
        damaged[1000 if damage_at == "before" else len(damaged) - 1000] ^= 0x08
        chunk.write_bytes(bytes(damaged))
    previous = zd.set_config(staging_bytes=16 * MIB, staging_slots=8)
    try:
        for rows in (np.s_[1280:3840], np.s_[4000:4001, 7:9]):
            if damage_at is None:
                part = arr.read(rows, device=DEV, like="torch")
                assert tensor_bytes(part) == host_bytes(np.ascontiguousarray(values[rows]))
            else:
                with pytest.raises(zd.ChecksumError, match=r"chunk 'c/0/0'"):
                    arr.read(rows, device=DEV, like="torch")
    finally:
        _restore_config(previous)


def _read_counting_device_memory(arr: zd.Array, values: np.ndarray, warm_at: Path) -> tuple[Any, int]:
    """Reads ``arr`` whole onto the GPU as torch after reading, at ``warm_at``, a copy of its first
    two chunks (same chunk shape, codecs and values); returns the tensor and how far the device's
    free memory fell during the read.

    The warm read settles what is not the read's to bound: the CUDA context, nvCOMP's kernels for
    these chunks (loaded lazily) and the local memory the driver reserves for them, torch's pool.
    Two chunks grow the decode memory little, so the read measured still counts it. A torch kernel
    runs first, as in any program that uses torch: the first kernel a process launches, whoever's,
    makes the driver set aside about 62 MiB for the context (H100, H200), which the read would
    otherwise show when a warm read decoded on the CPU launched none
    (bench/probes/probe_first_kernel_memory.py)."""
    torch.zeros(1, device=DEV)
    first = tuple(slice(0, c * (2 if axis == 0 else 1)) for axis, c in enumerate(arr.chunks))
    warm = zd.create(warm_at, shape=values[first].shape, dtype=values.dtype, chunks=arr.chunks,
                     codecs=arr.codecs)
    warm[...] = values[first]
    assert tensor_bytes(warm.read(device=DEV, like="torch")) == host_bytes(values[first])
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free_before = torch.cuda.mem_get_info(0)[0]
    out = arr.read(device=DEV, like="torch")
    torch.cuda.synchronize()
    return out, free_before - torch.cuda.mem_get_info(0)[0]


def test_device_memory_within_output_staging_and_decode_bytes(tmp_path: Path) -> None:
    """A read of well-compressed zstd chunks (many chunks per slot, and nvCOMP's temporary
    memory grows with the chunks decoded at once) holds at most the output, a copy of the staging
    and decode_bytes on the device, counting every allocator (the ring and decode memory stay
    allocated after the read, so the drop of free memory measured afterwards includes them)."""
    shape, chunks = (4096, 4096), (64, 256)  # 64 KiB chunks, 1024 of them
    arr = zd.create(tmp_path / "smooth", shape=shape, dtype="float32", chunks=chunks,
                    compressors=[{"name": "zstd"}, {"name": "crc32c"}])
    x = np.arange(shape[0] * shape[1], dtype=np.float64).reshape(shape)
    values = np.round(280 + 10 * np.sin(x / 5000), 2).astype(np.float32)
    arr[...] = values
    staging = 8 * MIB
    decode = 8 * MIB
    previous = zd.set_config(staging_bytes=staging, staging_slots=4, decode_bytes=decode)
    try:
        out, used = _read_counting_device_memory(arr, values, tmp_path / "warm")
        assert tensor_bytes(out) == host_bytes(values)
        output = values.nbytes
        # 2 MiB: the driver's allocation granularity for the ring's and decoder's blocks
        assert used <= output + staging + decode + 2 * MIB, (
            f"device memory rose by {used / MIB:.1f} MiB for a {output / MIB:.0f} MiB output, "
            f"{staging / MIB:.0f} MiB of staging and {decode / MIB:.0f} MiB of decode memory")
    finally:
        _restore_config(previous)


# ----------------------------------------------------------------------------------------------
# chunks a staging slot holds few of: decoded off their slots, in the decode arena

# Slots of 2 MiB that hold one stored 2 MiB chunk each, and decode memory for several such chunks
# at once: these reads decode in the arena, their slots refilled as soon as they are copied. The
# CPU does not take the decodes (decode_sharing off), so the GPU's path is what is compared.
OFF_SLOT = {"staging_bytes": 8 * MIB, "staging_slots": 4, "decode_bytes": 24 * MIB, "decode_sharing": "off"}


@pytest.fixture
def off_slot_config() -> Iterator[None]:
    previous = zd.set_config(**OFF_SLOT)
    yield
    zd.set_config(**{f: getattr(previous, f) for f in OFF_SLOT})


def _weights(path: Path, rows: int = 12 * 1024, seed: int = 0) -> tuple[Any, np.ndarray]:
    """float32 values of a few hundred levels (zstd finds sequences in them: nvCOMP's working
    memory is larger than for noise) in chunks of 2 MiB, one row of chunks."""
    values = np.round(np.random.default_rng(seed).standard_normal((rows, 512)) * 50).astype(np.float32)
    arr = zd.create(path, shape=values.shape, dtype="float32", chunks=(1024, 512),
                    compressors=[{"name": "zstd"}, {"name": "crc32c"}])
    arr[...] = values
    return zd.open_array(path), values


def _decoded_off_slots(capfd: pytest.CaptureFixture[str]) -> bool:
    return "decoded off the slots" in capfd.readouterr().err


def test_chunks_a_slot_holds_few_of_decode_off_their_slots(
    tmp_path: Path, off_slot_config: None, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole reads (decoded in place), selections (through scratch) and reads of many arrays in
    one call (large and small zstd chunks, uncompressed chunks) equal the CPU's, and a read of
    small chunks between them (decode regions) too: the decode memory changes hands."""
    monkeypatch.setenv("ZARR_DEVICE_TRACE", "1")
    arr, values = _weights(tmp_path / "w")
    capfd.readouterr()
    assert tensor_bytes(arr.read(device=DEV, like="torch")) == host_bytes(values)
    assert _decoded_off_slots(capfd)
    sel = (slice(100, 9000), slice(3, 500))
    assert tensor_bytes(arr.read(sel, device=DEV, like="torch")) == host_bytes(values[sel])
    assert _decoded_off_slots(capfd)
    # Few small chunks: the read's chunks are still mostly large (a slot holds fewer than 4).
    small, small_values = make_array(tmp_path / "small", shape=(128, 64), chunks=(64, 64),
                                      compressors=[{"name": "zstd"}, {"name": "crc32c"}])
    plain, plain_values = make_array(tmp_path / "plain", shape=(300, 200), chunks=(64, 64), compressors=None)
    got = zd.read_many({"w": arr, "small": small, "plain": plain}, device=DEV, like="torch")
    assert _decoded_off_slots(capfd)
    assert tensor_bytes(got["w"]) == host_bytes(values)
    assert tensor_bytes(got["small"]) == host_bytes(small_values)
    assert tensor_bytes(got["plain"]) == host_bytes(plain_values)
    # Copies alone take the slots' device copies back from the arena, once its decodes are done.
    assert tensor_bytes(plain.read(device=DEV, like="torch")) == host_bytes(plain_values)
    assert not _decoded_off_slots(capfd)
    assert tensor_bytes(arr.read(device=DEV, like="torch")) == host_bytes(values)
    assert _decoded_off_slots(capfd)
    # A read that leaves its decodes queued on the consumer's stream decodes in regions.
    out = arr.read(device=DEV, like="torch", non_blocking=True)
    torch.cuda.synchronize()
    assert tensor_bytes(out) == host_bytes(values)
    assert not _decoded_off_slots(capfd)
    many, many_values = make_array(tmp_path / "many", shape=(1024, 1024), chunks=(32, 64),
                                   compressors=[{"name": "zstd"}, {"name": "crc32c"}])
    assert tensor_bytes(many.read(device=DEV, like="torch")) == host_bytes(many_values)
    assert not _decoded_off_slots(capfd)  # 8 KiB chunks: regions
    assert tensor_bytes(arr.read(device=DEV, like="torch")) == host_bytes(values)
    assert _decoded_off_slots(capfd)


def test_reads_off_their_slots_from_threads(tmp_path: Path, off_slot_config: None) -> None:
    """Reads at once each lease a ring of their own and its arena; a ring given back while its
    last batches decode is safe for the next read, whose ranges wait for theirs."""
    arrays = [_weights(tmp_path / f"w{i}", rows=6 * 1024, seed=i) for i in range(3)]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: tensor_bytes(arrays[i % 3][0].read(device=DEV, like="torch")), range(24)))
    for i, got in enumerate(results):
        assert got == host_bytes(arrays[i % 3][1])


def test_a_chunk_decoded_off_its_slot_to_the_wrong_size_names_it(tmp_path: Path, off_slot_config: None) -> None:
    """A chunk whose frame declares 2 MiB but holds fewer, under a valid crc32c, passes every
    check on the host: the GPU's decoder finds it short, and the read raises a CodecError naming
    it; nothing is left queued, and the next reads are right."""
    arr, values = _weights(tmp_path / "w")
    short = zd.create(tmp_path / "short", shape=(1000, 512), dtype="float32", chunks=(1000, 512), compressors="zstd")
    short[...] = values[:1000]
    frame = declare_content_size((tmp_path / "short" / "c" / "0" / "0").read_bytes(), 1024 * 512 * 4)
    (tmp_path / "w" / "c" / "5" / "0").write_bytes(frame + crc32c(frame))
    damaged = zd.open_array(tmp_path / "w")
    for _ in range(3):
        with pytest.raises(zd.CodecError, match=r"chunk 'c/5/0'.*GPU decoder.*expected 2097152"):
            damaged.read(device=DEV, like="torch")
    torch.cuda.synchronize()
    healthy, healthy_values = _weights(tmp_path / "ok", seed=1)
    assert tensor_bytes(healthy.read(device=DEV, like="torch")) == host_bytes(healthy_values)
    rows = (slice(0, 5 * 1024),)  # the chunks before the damaged one
    assert tensor_bytes(damaged.read(rows, device=DEV, like="torch")) == host_bytes(values[rows])


def test_device_memory_off_the_slots_within_output_staging_and_decode_bytes(
    tmp_path: Path, off_slot_config: None
) -> None:
    """The decode arena holds a batch's bytes and its decoder's memory within decode_bytes and the
    staging's device copies, which it takes over: the device's memory rises by at most the output,
    a copy of the staging and decode_bytes."""
    arr, values = _weights(tmp_path / "w", rows=24 * 1024)
    zd.set_config(decode_bytes=32 * MIB)  # a new ring: its decode memory is counted below
    out, used = _read_counting_device_memory(arr, values, tmp_path / "warm")
    assert tensor_bytes(out) == host_bytes(values)
    assert used <= values.nbytes + 8 * MIB + 32 * MIB + 2 * MIB, f"device memory rose by {used / MIB:.1f} MiB"


# ----------------------------------------------------------------------------------------------
# several GPUs


def _n_torch_gpus() -> int:
    return min(N_GPUS, torch.cuda.device_count())


@pytest.mark.skipif(N_GPUS < 2, reason="needs 2 CUDA devices")
def test_reads_into_several_gpus_from_threads(tmp_path: Path) -> None:
    n = _n_torch_gpus()
    if n < 2:
        pytest.skip("torch sees fewer than 2 CUDA devices")
    arr, values = make_array(tmp_path / "a", "bfloat16", shape=(1024, 512), chunks=(64, 64), shards=(256, 256))
    rows = 1024 // n
    barrier = threading.Barrier(2 * n)

    def work(job: int) -> list[tuple[int, bytes, bytes]]:
        device = job % n
        sel = (slice(device * rows, (device + 1) * rows),)
        barrier.wait()  # every thread reads at once
        done = []
        for _ in range(3):
            t = arr.read(sel, device=f"cuda:{device}", like="torch")
            assert t.device == torch.device("cuda", device)
            shared = torch.from_dlpack(arr.read(sel, device=device))
            assert shared.device == torch.device("cuda", device)
            done.append((device, tensor_bytes(t), tensor_bytes(shared)))
        return done

    with ThreadPoolExecutor(2 * n) as pool:
        results = [r for f in [pool.submit(work, j) for j in range(2 * n)] for r in f.result()]
    assert len(results) == 2 * n * 3
    for device, as_torch, as_dlpack in results:
        want = host_bytes(values[device * rows:(device + 1) * rows])
        assert as_torch == want and as_dlpack == want, f"cuda:{device}"


def test_sharded_jax_array_from_per_device_reads(tmp_path: Path) -> None:
    jax = _jax_gpu()
    gpus = [d for d in jax.devices("gpu") if d.local_hardware_id < N_GPUS]
    if len(gpus) < 2:
        pytest.skip("needs 2 GPUs that JAX and zarr_device both see")
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    n = len(gpus)
    shape = (64 * n, 96)
    arr, values = make_array(tmp_path / "a", "float32", shape=shape, chunks=(32, 32))
    sharding = NamedSharding(Mesh(np.array(gpus), ("rows",)), PartitionSpec("rows"))
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        piece = arr.read(index, device=device, like="jax")  # a JAX device is a device= argument
        assert piece.devices() == {device}
        pieces.append(piece)
    whole = jax.make_array_from_single_device_arrays(shape, sharding, pieces)
    assert whole.sharding == sharding
    assert host_bytes(np.asarray(whole)) == host_bytes(values)
    # A computation over the sharded array (the values hold NaN and infinities: sum the finite ones).
    jnp = jax.numpy
    total = float(jnp.sum(jnp.where(jnp.isfinite(whole), whole, 0)))
    finite = values[np.isfinite(values)].astype(np.float64)
    assert total == pytest.approx(float(finite.sum()), rel=1e-4, abs=1e-3)
