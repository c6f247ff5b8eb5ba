"""Writes from CUDA device memory, and reads through GPUDirect Storage (io="gds"): every array
written from the GPU must decode to the same elements as one written from the host (same chunks
stored, same chunks left out), in zarr-python too; zstd chunks compressed on the GPU are standard
frames; bad input fails with the CPU path's typed errors; nothing leaks.

Every test here needs a CUDA device that zarr_device can use; without one the module is skipped.
"""

from __future__ import annotations

import gc
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import numpy_dtype, random_values, rss_bytes
from test_gpu import DEV, N_GPUS, Setup, host_bytes, setups, tensor_bytes

import zarr_device as zd
from zarr_device.io.devices import cuda_build_info

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(N_GPUS == 0, reason="no CUDA device visible to zarr_device (or a build without CUDA)"),
]

torch = pytest.importorskip("torch")

MIB = 1 << 20


def to_cuda(values: np.ndarray, dtype: str, device: str = DEV) -> Any:
    """The host array's bits as a torch tensor on the GPU (any type torch has)."""
    a = np.ascontiguousarray(values)
    if a.size == 0:
        return torch.empty(np.shape(values), dtype=getattr(torch, dtype), device=device)
    raw = torch.from_numpy(a.reshape(-1).view(np.uint8).copy()).to(device)
    return raw.view(getattr(torch, dtype)).reshape(np.shape(values))  # (0-d stays 0-d)


def stored_keys(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and p.name != "zarr.json"}


def write_both(setup: Setup, root: Path, region: tuple[slice, ...], encode: str) -> tuple[Any, Any]:
    """The same values written into two arrays of ``setup``: from the GPU and from the host."""
    rng = np.random.default_rng(setup.seed)
    values = random_values(setup.dtype, tuple(s.stop - s.start for s in region), rng)
    arrays = []
    for name in ("gpu", "host"):
        arr = zd.create(root / name, shape=setup.shape, dtype=setup.dtype, chunks=setup.shards or setup.chunks,
                        codecs=setup.codecs(), fill_value=setup.fill())
        if name == "gpu":
            previous = zd.set_config(gpu_encode=encode)
            try:
                arr[region] = to_cuda(values, setup.dtype)
            finally:
                zd.set_config(**{"gpu_encode": previous.gpu_encode})
        else:
            arr[region] = values
        arrays.append(zd.open_array(root / name))
    return arrays[0], arrays[1]


def _check_write(setup: Setup, whole: bool, encode: str) -> None:
    rng = np.random.default_rng(setup.seed + 1)
    if whole:
        region = tuple(slice(0, n) for n in setup.shape)
    else:
        region = []
        for n in setup.shape:
            a = int(rng.integers(0, n + 1))
            region.append(slice(a, int(rng.integers(a, n + 1))))
        region = tuple(region)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gpu, host = write_both(setup, root, region, encode)
        assert host_bytes(gpu.read()) == host_bytes(host.read())
        assert stored_keys(root / "gpu") == stored_keys(root / "host"), "the same chunks stored and left out"


torch_dtypes = [d for d in ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
                            "uint8", "uint16", "bool", "complex64", "float8_e4m3fn")
                if isinstance(getattr(torch, d, None), torch.dtype)]


@st.composite
def write_setups(draw: st.DrawFn, **bounds: Any) -> Setup:
    setup = draw(setups(**bounds))
    setup.dtype = draw(st.sampled_from(torch_dtypes))
    return setup


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(setup=write_setups(max_extent=9, max_chunk=5), whole=st.booleans(), encode=st.sampled_from(["on", "off"]))
def test_small_writes_gpu_equal_host(setup: Setup, whole: bool, encode: str) -> None:
    _check_write(setup, whole, encode)


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(setup=write_setups(max_extent=20000, max_chunk=20000, max_elements=250_000, max_chunk_elements=40_000),
       whole=st.booleans())
def test_larger_writes_gpu_equal_host(setup: Setup, whole: bool) -> None:
    _check_write(setup, whole, "on")


ZSTD_CRC = [{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 1, "checksum": False}}, {"name": "crc32c"}]


def sharded(inner: list[dict[str, Any]], chunk: list[int]) -> list[dict[str, Any]]:
    return [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": chunk, "codecs": inner,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]


def test_gpu_zstd_frames_are_standard(tmp_path: Path) -> None:
    """The GPU's zstd chunks (different bytes from libzstd's) decode in zarr-python and the CPU
    path to the values written."""
    if not cuda_build_info().get("nvcomp_zstd_compression"):
        pytest.skip("nvCOMP's zstd compressor is not available here")
    values = torch.randn(512, 1024, device=DEV) * 0.02
    for name, encode in (("gpu", "on"), ("cpu", "off")):
        arr = zd.create(tmp_path / name, shape=(512, 1024), dtype="float32", chunks=(128, 1024),
                        codecs=ZSTD_CRC)
        previous = zd.set_config(gpu_encode=encode)
        try:
            arr[...] = values
        finally:
            zd.set_config(gpu_encode=previous.gpu_encode)
    gpu_chunk = (tmp_path / "gpu" / "c" / "1" / "0").read_bytes()
    cpu_chunk = (tmp_path / "cpu" / "c" / "1" / "0").read_bytes()
    assert gpu_chunk[:4] == b"\x28\xb5\x2f\xfd", "a zstd frame"
    assert gpu_chunk != cpu_chunk, "compressed by nvCOMP, not by libzstd"
    expected = values.cpu().numpy()
    assert np.array_equal(zd.open_array(tmp_path / "gpu")[...], expected)
    zarr = pytest.importorskip("zarr")
    assert np.array_equal(zarr.open_array(str(tmp_path / "gpu"), mode="r")[...], expected)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64", "float8_e4m3fn", "int16"])
@pytest.mark.parametrize("layout", ["sharded", "chunked"])
def test_gpu_shuffles_before_its_zstd(tmp_path: Path, dtype: str, layout: str) -> None:
    """numcodecs' shuffle before zstd (checkpoints' "auto" layout) is done on the GPU with the
    compression: the chunks are nvCOMP's frames of the shuffled bytes, the same elements as the
    CPU's chunks, the same chunks left out, and zarr-python reads them."""
    if not cuda_build_info().get("nvcomp_zstd_compression"):
        pytest.skip("nvCOMP's zstd compressor is not available here")
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        pytest.skip(f"torch has no {dtype}")
    item = np.dtype(numpy_dtype(dtype)).itemsize
    inner = [{"name": "bytes", "configuration": {"endian": "little"}},
             {"name": "numcodecs.shuffle", "configuration": {"elementsize": item}}, *ZSTD_CRC[1:]]
    shape = (300, 257)  # edge chunks hold fill value past the array
    codecs = sharded(inner, [64, 64]) if layout == "sharded" else inner
    chunks = (128, 128) if layout == "sharded" else (64, 64)
    rng = np.random.default_rng(7)
    values = random_values(dtype, shape, rng)
    values[:64] = np.zeros((), dtype=values.dtype)  # whole chunks of fill value: not stored
    for name, encode in (("gpu", "on"), ("cpu", "off")):
        arr = zd.create(tmp_path / name, shape=shape, dtype=dtype, chunks=chunks, codecs=codecs)
        previous = zd.set_config(gpu_encode=encode)
        try:
            arr[...] = to_cuda(values, dtype)
        finally:
            zd.set_config(gpu_encode=previous.gpu_encode)
    assert host_bytes(zd.open_array(tmp_path / "gpu")[...]) == host_bytes(values)
    assert stored_keys(tmp_path / "gpu") == stored_keys(tmp_path / "cpu")
    if layout == "chunked" and item > 1:
        gpu_chunk = (tmp_path / "gpu" / "c" / "1" / "1").read_bytes()
        assert gpu_chunk[:4] == b"\x28\xb5\x2f\xfd", "a zstd frame"
        assert gpu_chunk != (tmp_path / "cpu" / "c" / "1" / "1").read_bytes(), "compressed by nvCOMP"
    back = zd.open_array(tmp_path / "gpu").read(device=DEV, like="torch")
    assert tensor_bytes(back) == tensor_bytes(to_cuda(values, dtype))
    zarr = pytest.importorskip("zarr")
    if dtype in ("bfloat16", "float8_e4m3fn"):
        return  # zarr-python has no such data type
    assert host_bytes(zarr.open_array(str(tmp_path / "gpu"), mode="r")[...]) == host_bytes(values)


def test_default_encode_leaves_shuffled_chunks_to_libzstd(tmp_path: Path) -> None:
    """Under the default gpu_encode ("auto"), chunks byte-shuffled before zstd (the checkpoints'
    "auto" layout) are compressed by CPU threads, byte for byte the chunks of gpu_encode="off",
    while plain zstd chunks stay nvCOMP's; both read back bit for bit."""
    if not cuda_build_info().get("nvcomp_zstd_compression"):
        pytest.skip("nvCOMP's zstd compressor is not available here")
    assert zd.get_config().gpu_encode == "auto"
    values = (torch.randn(512, 1024, device=DEV) * 0.02).to(torch.bfloat16)
    shuffled = [ZSTD_CRC[0], {"name": "numcodecs.shuffle", "configuration": {"elementsize": 2}}, *ZSTD_CRC[1:]]
    for encode in ("auto", "off"):
        previous = zd.set_config(gpu_encode=encode)
        try:
            for name, codecs in (("shuffled", shuffled), ("plain", ZSTD_CRC)):
                zd.create(tmp_path / f"{name}-{encode}", shape=(512, 1024), dtype="bfloat16", chunks=(128, 1024),
                          codecs=codecs)[...] = values
        finally:
            zd.set_config(gpu_encode=previous.gpu_encode)
    for name in ("shuffled", "plain"):
        back = zd.open_array(tmp_path / f"{name}-auto").read(device=DEV, like="torch")
        assert tensor_bytes(back) == tensor_bytes(values), name
    chunk = Path("c") / "1" / "0"
    assert (tmp_path / "shuffled-auto" / chunk).read_bytes() == (tmp_path / "shuffled-off" / chunk).read_bytes()
    assert (tmp_path / "plain-auto" / chunk).read_bytes() != (tmp_path / "plain-off" / chunk).read_bytes()


@pytest.mark.parametrize("layout", ["sharded", "chunked"])
@pytest.mark.parametrize("codec", ["none", "zstd_crc32c"])
def test_large_write_round_trips_on_the_gpu(tmp_path: Path, layout: str, codec: str) -> None:
    """96 MiB from a tensor, more than one staging half: batches overlap with the store's writes."""
    inner = ZSTD_CRC if codec != "none" else [{"name": "bytes", "configuration": {"endian": "little"}}]
    shape = (3 * 2048, 4096)
    codecs = sharded(inner, [256, 256]) if layout == "sharded" else inner
    chunks = (2048, 2048) if layout == "sharded" else (256, 1024)
    values = torch.randn(shape, device=DEV)
    values[:256] = 0  # whole chunks of fill value: not stored
    arr = zd.create(tmp_path / "a", shape=shape, dtype="float32", chunks=chunks, codecs=codecs)
    arr[...] = values
    back = zd.open_array(tmp_path / "a").read(device=DEV, like="torch")
    assert tensor_bytes(back) == tensor_bytes(values)
    if layout == "chunked":
        assert not (tmp_path / "a" / "c" / "0" / "0").exists(), "a chunk of fill values is left out"


def test_write_from_cupy_and_jax(tmp_path: Path) -> None:
    values = np.arange(64 * 48, dtype=np.int32).reshape(64, 48)
    for name, make in (("cupy", "cupy"), ("jax", "jax")):
        module = pytest.importorskip(make)
        arr = zd.create(tmp_path / name, shape=(64, 48), dtype="int32", chunks=(16, 16), compressors="zstd")
        if name == "jax":
            gpus = [d for d in module.devices() if d.platform == "gpu"]
            if not gpus:
                continue
            arr[...] = module.device_put(values, gpus[0])
        else:
            arr[...] = module.asarray(values)
        assert np.array_equal(zd.open_array(tmp_path / name)[...], values)


def test_write_broadcasts_and_converts(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a", shape=(40, 30), dtype="float16", chunks=(8, 8), compressors="zstd")
    arr[...] = torch.arange(30, device=DEV, dtype=torch.float32)  # one row, broadcast; float32 -> float16
    expected = np.broadcast_to(np.arange(30, dtype=np.float16), (40, 30))
    assert np.array_equal(zd.open_array(tmp_path / "a")[...], expected)
    arr[5, 3:9] = torch.full((6,), 7.0, device=DEV)  # a partial chunk: read, updated, written back
    expected = expected.copy()
    expected[5, 3:9] = 7
    assert np.array_equal(zd.open_array(tmp_path / "a")[...], expected)


def test_write_errors_are_typed(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a", shape=(40, 30), dtype="float32", chunks=(8, 8))
    with pytest.raises(zd.UsageError, match="do not fit"):
        arr[...] = torch.zeros(7, 3, device=DEV)
    with pytest.raises(zd.UsageError, match="read-only"):
        zd.open_array(tmp_path / "a")[...] = torch.zeros(40, 30, device=DEV)


def test_failing_and_repeated_writes_do_not_leak(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a", shape=(1024, 1024), dtype="float32", chunks=(256, 256), codecs=ZSTD_CRC)
    values = torch.randn(1024, 1024, device=DEV)
    arr[...] = values  # warm up: staging allocated once
    torch.cuda.synchronize()
    gc.collect()
    free_before = torch.cuda.mem_get_info(0)[0]
    rss_before = rss_bytes()
    for i in range(200):
        arr[...] = values
        with pytest.raises(zd.UsageError):
            arr[...] = torch.zeros(3, device=DEV).expand(2, 3)
    torch.cuda.synchronize()
    gc.collect()
    assert torch.cuda.mem_get_info(0)[0] >= free_before - 16 * MIB
    assert rss_bytes() <= rss_before + 64 * MIB


# ----------------------------------------------------------------------------------------------
# GPUDirect Storage


@pytest.mark.parametrize("layout", ["sharded", "chunked"])
@pytest.mark.parametrize("codec", ["none", "zstd_crc32c"])
def test_gds_reads_equal_the_cpu(tmp_path: Path, layout: str, codec: str) -> None:
    """io="gds" reads (cuFile where present, the staging ring where not) equal the CPU read, for
    chunks cuFile moves (stored as their elements) and chunks it does not."""
    inner = ZSTD_CRC if codec != "none" else [{"name": "bytes", "configuration": {"endian": "little"}}]
    codecs = sharded(inner, [64, 128]) if layout == "sharded" else inner
    arr = zd.create(tmp_path / "a", shape=(1000, 700), dtype="float32", chunks=(256, 256), codecs=codecs)
    arr[...] = np.random.default_rng(0).standard_normal((1000, 700), dtype=np.float32)
    gds = zd.open_array(zd.LocalStore(tmp_path / "a", io="gds"))
    expected = zd.open_array(tmp_path / "a")[...]
    for sel in (Ellipsis, (slice(0, 256), slice(0, 256)), (slice(3, 900, 2), slice(5, 600))):
        got = gds.read(sel, device=DEV, like="torch")
        assert np.array_equal(got.cpu().numpy(), expected[sel])


def test_gds_availability_is_reported() -> None:
    info = cuda_build_info()
    assert ("cufile" in info) and (info["cufile"] is not None or info.get("cufile_error"))


def test_gds_truncated_chunk_is_a_typed_error(tmp_path: Path) -> None:
    arr = zd.create(tmp_path / "a", shape=(64, 64), dtype="float32", chunks=(32, 32), compressors=None)
    arr[...] = np.ones((64, 64), dtype=np.float32)
    chunk = tmp_path / "a" / "c" / "1" / "1"
    chunk.write_bytes(chunk.read_bytes()[:1000])
    gds = zd.open_array(zd.LocalStore(tmp_path / "a", io="gds"))
    with pytest.raises(zd.CodecError, match="c/1/1"):
        gds.read(device=DEV, like="torch")


@pytest.mark.parametrize("framework", ["torch", "cupy"])
@pytest.mark.parametrize("compressors", [None, "zstd"])
def test_writes_wait_for_values_made_on_the_default_stream(tmp_path: Path, framework: str, compressors: Any) -> None:
    """Values made by a kernel still queued on the framework's default stream (the legacy one,
    whose handle is 0) when the write starts: the write waits for it, so it stores the values, not
    what the memory held before. (Writes once waited for no stream there, and a chunk of -0.0
    read as the fill value 0.0 was dropped.)"""
    n = 16 << 20
    arr = zd.create(tmp_path / "a", shape=(n,), chunks=(n // 8,), dtype="float32", fill_value=0.0,
                    compressors=compressors)
    torch.cuda.synchronize()
    torch.cuda._sleep(400_000_000)  # about 0.2 s of spinning on the legacy default stream
    if framework == "torch":
        values: Any = torch.full((n,), -0.0, device=DEV)
    else:
        cupy = pytest.importorskip("cupy")
        with cupy.cuda.Device(0):
            values = cupy.full((n,), -0.0, dtype="float32")
    arr[:] = values
    back = arr.read()
    assert np.signbit(back).all() and not back.any()
    assert len(stored_keys(tmp_path / "a") - {".zarr-device.lock"}) == 8
