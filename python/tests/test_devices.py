"""Device arguments and the device-dependent parts of Array.read that run on any machine: parsing
``device=``, like/device/out validation, CPU reads through torch, the framework-device path (host
memory, then one non-blocking torch copy) and the errors for a CUDA device that is not there."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import assert_bits_equal, random_values

import zarr_device as zd
from zarr_device import _core
from zarr_device.io import devices, transfers
from zarr_device.io.adapters.base import Destination
from zarr_device.io.devices import CPU, DeviceSpec, parse_device

torch = pytest.importorskip("torch")


# ----------------------------------------------------------------------------------------------
# helpers


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, count: int, compiled: bool = True, nvcomp: str | None = "5.0") -> None:
    """Makes the engine report ``count`` CUDA devices (for parsing only: nothing is read there)."""
    monkeypatch.setattr(_core, "cuda_device_count", lambda: count, raising=False)
    monkeypatch.setattr(
        _core, "cuda_build_info", lambda: {"compiled": compiled, "nvcomp": nvcomp if compiled else None},
        raising=False,
    )


def _array(tmp_path: Path, dtype: str = "float32", shape: tuple[int, ...] = (9, 7)) -> tuple[Any, np.ndarray]:
    arr = zd.create(tmp_path / "a.zarr", shape=shape, dtype=dtype, chunks=(4, 3), compressors="zstd")
    values = random_values(dtype, shape, np.random.default_rng(3))
    arr[...] = values
    return zd.open_array(tmp_path / "a.zarr"), values


def _torch_bytes(tensor: Any) -> bytes:
    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


# ----------------------------------------------------------------------------------------------
# parsing


@pytest.mark.parametrize("device", [None, "cpu", "cpu:0", "CPU", " cpu "])
def test_cpu_spellings(device: Any) -> None:
    assert parse_device(device) == CPU == DeviceSpec("cpu", None, "cpu")
    assert str(parse_device(device)) == "cpu"


def test_cpu_torch_device() -> None:
    assert parse_device(torch.device("cpu")) == CPU


def test_device_spec_is_a_frozen_value() -> None:
    spec = DeviceSpec("cuda", 1, "cuda:1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.index = 2  # type: ignore[misc]
    assert spec == DeviceSpec("cuda", 1, "cuda:1")
    assert hash(spec) == hash(DeviceSpec("cuda", 1, "cuda:1"))
    assert parse_device(spec) is spec


@pytest.mark.parametrize(
    "device,kind,index,name",
    [
        ("mps", "framework", None, "mps"),
        ("xpu", "framework", None, "xpu"),
        ("xpu:1", "framework", 1, "xpu:1"),
        ("meta", "framework", None, "meta"),
        ("hpu:3", "framework", 3, "hpu:3"),
    ],
)
def test_framework_devices(device: str, kind: str, index: int | None, name: str) -> None:
    spec = parse_device(device)
    assert (spec.kind, spec.index, spec.name) == (kind, index, name)
    assert parse_device(torch.device(device)) == spec


@pytest.mark.parametrize(
    "device", ["", "cuda:", "cuda:x", "cuda:-1", ":0", "cuda:0:1", "cu da", "0cuda", "cuda 0", "not_a_device"]
)
def test_malformed_strings(device: str) -> None:
    with pytest.raises(zd.UsageError) as info:
        parse_device(device)
    assert repr(device) in str(info.value)
    assert "cuda:N" in str(info.value)  # says what is accepted


@pytest.mark.parametrize("device", [True, False, 1.5, object(), [0], b"cuda"])
def test_non_device_objects(device: Any) -> None:
    with pytest.raises(zd.UsageError):
        parse_device(device)


def test_second_cpu_is_refused() -> None:
    with pytest.raises(zd.UsageError, match="one CPU"):
        parse_device("cpu:1")


def test_negative_index_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 2)
    with pytest.raises(zd.UsageError, match="negative"):
        parse_device(-1)


def test_cuda_spellings(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 2)
    one = DeviceSpec("cuda", 1, "cuda:1")
    assert parse_device("cuda:1") == one
    assert parse_device("CUDA:1") == one
    assert parse_device(1) == one
    assert parse_device(np.int64(1)) == one
    assert parse_device(torch.device("cuda", 1)) == one
    assert parse_device(torch.device("cuda:1")) == one
    if not torch.cuda.is_initialized():
        assert parse_device("cuda") == DeviceSpec("cuda", 0, "cuda:0")
        assert parse_device(torch.device("cuda")) == DeviceSpec("cuda", 0, "cuda:0")


def test_plain_cuda_follows_torchs_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 2)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert parse_device("cuda") == DeviceSpec("cuda", 1, "cuda:1")


def test_cupy_and_jax_device_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 2)

    class CupyDevice:
        def __init__(self, id: int) -> None:
            self.id = id

    CupyDevice.__module__ = "cupy.cuda.device"

    class JaxDevice:
        def __init__(self, platform: str, local_hardware_id: int) -> None:
            self.platform = platform
            self.local_hardware_id = local_hardware_id

    assert parse_device(CupyDevice(1)) == DeviceSpec("cuda", 1, "cuda:1")
    assert parse_device(JaxDevice("gpu", 1)) == DeviceSpec("cuda", 1, "cuda:1")
    assert parse_device(JaxDevice("cpu", 0)) == CPU
    with pytest.raises(zd.UsageError, match="tpu"):
        parse_device(JaxDevice("tpu", 0))
    with pytest.raises(zd.DeviceError):
        parse_device(CupyDevice(2))


def test_cuda_index_past_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 2)
    for device in ("cuda:2", 2, torch.device("cuda", 5)):
        with pytest.raises(zd.DeviceError) as info:
            parse_device(device)
        message = str(info.value)
        assert "only 2 CUDA devices" in message and "(0..1)" in message, message
    _fake_cuda(monkeypatch, 1)
    with pytest.raises(zd.DeviceError, match="only 1 CUDA device "):
        parse_device("cuda:1")


def test_cuda_in_a_build_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 0, compiled=False)
    with pytest.raises(zd.DeviceError) as info:
        parse_device("cuda")
    message = str(info.value)
    assert "CUDA device 0" in message and "without" in message and "no CUDA support" in message


def test_cuda_with_no_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 0, compiled=True, nvcomp="5.0.0")
    with pytest.raises(zd.DeviceError) as info:
        parse_device("cuda:0")
    message = str(info.value)
    assert "0 devices" in message and "has CUDA" in message and "nvCOMP 5.0.0" in message
    assert "CUDA_VISIBLE_DEVICES" in message


def test_cuda_on_rocm_torch_is_a_framework_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 0, compiled=False)
    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    assert parse_device("cuda:1") == DeviceSpec("framework", 1, "cuda:1")
    assert parse_device("cuda").kind == "framework"


def test_framework_device_needs_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(zd.UsageError, match="pip install torch"):
        parse_device("mps")


def test_engine_reports_devices() -> None:
    count = devices.cuda_device_count()
    info = devices.cuda_build_info()
    assert isinstance(count, int) and count >= 0
    assert isinstance(info.get("compiled"), bool)
    if not info["compiled"]:
        assert count == 0


def test_reading_to_a_missing_cuda_device_is_a_device_error(tmp_path: Path) -> None:
    """With the real engine: asking for one CUDA device more than there are fails before any
    I/O, with a message that says how many there are (none, on a machine without a GPU)."""
    arr, _ = _array(tmp_path)
    count = devices.cuda_device_count()
    with pytest.raises(zd.DeviceError) as info:
        arr.read(device=f"cuda:{count}", like="torch")
    assert f"CUDA device {count}" in str(info.value)
    assert isinstance(info.value, zd.ZarrDeviceError)
    if count == 0:
        with pytest.raises(zd.DeviceError):
            arr.read(device="cuda")
        with pytest.raises(zd.DeviceError):
            arr.read(device=0, like="jax")


# ----------------------------------------------------------------------------------------------
# like / device / out validation


@pytest.mark.parametrize("like", ["cupy", "jax"])
def test_gpu_only_likes_on_the_cpu(tmp_path: Path, like: str) -> None:
    arr, _ = _array(tmp_path)
    with pytest.raises(zd.UsageError, match="device='cuda'"):
        arr.read(like=like)
    with pytest.raises(zd.UsageError):
        arr.read(like=like, device="cpu")


@pytest.mark.parametrize("like", ["tf", "NumPy", ""])
def test_unknown_like(tmp_path: Path, like: str) -> None:
    arr, _ = _array(tmp_path)
    with pytest.raises(zd.UsageError, match="like="):
        arr.read(like=like)  # type: ignore[arg-type]


def test_numpy_on_a_gpu_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arr, _ = _array(tmp_path)
    _fake_cuda(monkeypatch, 1)
    with pytest.raises(zd.UsageError, match="like='numpy'") as info:
        arr.read(device="cuda:0", like="numpy")
    assert "like='torch'" in str(info.value)


def test_cupy_refuses_bfloat16_and_float8_before_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch, 1)
    for dtype in ("bfloat16", "float8_e4m3fn"):
        arr, _ = _array(tmp_path / dtype, dtype)
        with pytest.raises(zd.UsageError) as info:
            arr.read(device="cuda:0", like="cupy")
        message = str(info.value)
        assert "CuPy has no " + dtype in message and "like='torch'" in message


def test_missing_cupy_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arr, _ = _array(tmp_path)
    _fake_cuda(monkeypatch, 1)
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(zd.UsageError, match="pip install cupy"):
        arr.read(device="cuda:0", like="cupy")


def test_missing_jax_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arr, _ = _array(tmp_path)
    _fake_cuda(monkeypatch, 1)
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(zd.UsageError, match="jax"):
        arr.read(device="cuda:0", like="jax")


def test_missing_torch_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arr, _ = _array(tmp_path)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(zd.UsageError, match="pip install torch"):
        arr.read(like="torch")


def test_jax_refuses_64_bit_types_without_x64() -> None:
    jax = pytest.importorskip("jax")
    from zarr_device.io.adapters import jax as jax_adapter

    previous = bool(jax.config.jax_enable_x64)
    jax.config.update("jax_enable_x64", False)
    try:
        for name in ("int64", "uint64", "float64", "complex128"):
            with pytest.raises(zd.UsageError, match="jax_enable_x64"):
                jax_adapter.jax_dtype(name)
        jax.config.update("jax_enable_x64", True)
        assert np.dtype(jax_adapter.jax_dtype("float64")) == np.float64
    finally:
        jax.config.update("jax_enable_x64", previous)
    import jax.numpy as jnp

    assert jax_adapter.jax_dtype("bfloat16") == jnp.bfloat16
    assert np.dtype(jax_adapter.jax_dtype("complex64")) == np.complex64


def test_torch_lacking_a_type_is_named(tmp_path: Path) -> None:
    from zarr_device.io.adapters import torch as torch_adapter

    missing = [n for n in zd.ZARR_DTYPE_NAMES if not isinstance(getattr(torch, n, None), torch.dtype) and n != "bool"]
    if not missing:
        pytest.skip("this torch has every Zarr type")
    with pytest.raises(zd.UsageError) as info:
        torch_adapter.torch_dtype(missing[0])
    assert missing[0] in str(info.value) and "like='jax'" in str(info.value)


def test_cuda_read_when_torch_cannot_allocate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine with a GPU but a torch without CUDA: a DeviceError from torch's allocation, not a
    bare RuntimeError."""
    if torch.cuda.is_available():
        pytest.skip("torch can allocate on CUDA here")
    arr, _ = _array(tmp_path)
    _fake_cuda(monkeypatch, 1)
    with pytest.raises(zd.DeviceError, match="cuda:0"):
        arr.read(device="cuda:0", like="torch")


@pytest.mark.parametrize("out", [[0.0] * 63, "out", 3])
def test_out_of_an_unknown_kind(tmp_path: Path, out: Any) -> None:
    arr, _ = _array(tmp_path)
    with pytest.raises(zd.UsageError, match="out must be"):
        arr.read(out=out)


def test_out_on_another_device_than_asked(tmp_path: Path) -> None:
    arr, _ = _array(tmp_path)
    with pytest.raises(zd.UsageError, match="out lives on cpu"):
        arr.read(out=np.empty((9, 7), np.float32), device="meta", like="torch")
    with pytest.raises(zd.UsageError, match="out lives on meta"):
        arr.read(out=torch.empty((9, 7), device="meta"), device="cpu")


def test_out_on_a_framework_device_needs_a_torch_tensor(tmp_path: Path) -> None:
    arr, _ = _array(tmp_path)
    with pytest.raises(zd.UsageError):
        arr.read(device="meta", out=[0] * 63)


# ----------------------------------------------------------------------------------------------
# reads on the CPU


@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", "bfloat16", "float8_e4m3fn", "complex64"])
def test_cpu_reads_as_numpy_and_torch(tmp_path: Path, dtype: str) -> None:
    arr, values = _array(tmp_path, dtype)
    sel = (slice(1, 8, 2), slice(None, None, 3))
    for device in (None, "cpu", torch.device("cpu"), CPU):
        got = arr.read(sel, device=device)
        assert isinstance(got, np.ndarray)
        assert_bits_equal(got, values[sel], f"numpy, device={device!r}")
        assert_bits_equal(arr.read(sel, device=device, like="numpy"), values[sel], "like numpy")
        tensor = arr.read(sel, device=device, like="torch")
        assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"
        assert tensor.dtype == getattr(torch, dtype) and tuple(tensor.shape) == values[sel].shape
        assert _torch_bytes(tensor) == np.ascontiguousarray(values[sel]).tobytes()


def test_cpu_out_tensor(tmp_path: Path) -> None:
    arr, values = _array(tmp_path, "bfloat16")
    out = torch.zeros((9, 7), dtype=torch.bfloat16)
    assert arr.read(out=out) is out
    assert _torch_bytes(out) == values.tobytes()
    assert arr.read(out=out, device="cpu") is out
    with pytest.raises(zd.UsageError, match="dtype"):
        arr.read(out=torch.zeros((9, 7), dtype=torch.float32))
    with pytest.raises(zd.UsageError, match="shape"):
        arr.read(out=torch.zeros((7, 9), dtype=torch.bfloat16))
    with pytest.raises(zd.UsageError, match="contiguous"):
        arr.read(out=torch.zeros((7, 9), dtype=torch.bfloat16).T)


# ----------------------------------------------------------------------------------------------
# framework devices: host staging, then one non-blocking torch copy


@pytest.fixture
def copy_spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Records every Tensor.to / Tensor.copy_ call torch makes (source, arguments)."""
    calls: list[dict[str, Any]] = []
    real_to = torch.Tensor.to
    real_copy = torch.Tensor.copy_

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append({"op": "to", "source": self, "args": args, "kwargs": kwargs})
        return real_to(self, *args, **kwargs)

    def copy_(self: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append({"op": "copy_", "source": src, "args": args, "kwargs": kwargs})
        return real_copy(self, src, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    return calls


def test_framework_path_copies_without_blocking(tmp_path: Path, copy_spy: list[dict[str, Any]]) -> None:
    """torch's CPU device standing in for a framework device: the engine fills host memory
    (pinned where torch can pin), torch copies it into the result without blocking (one copy for
    a read that fits the staging), and the values are the CPU read's."""
    arr, values = _array(tmp_path, "bfloat16")
    target = DeviceSpec("framework", None, "cpu")
    sel = (slice(2, 9), slice(None, None, 2))
    result = arr.read(sel, device=target, like="torch")
    assert isinstance(result, torch.Tensor)
    assert _torch_bytes(result) == np.ascontiguousarray(values[sel]).tobytes()
    copies = [c for c in copy_spy if c["op"] == "copy_"]
    assert len(copies) == 1, copy_spy
    assert copies[0]["kwargs"] == {"non_blocking": True}
    staging = copies[0]["source"]
    assert staging.device.type == "cpu" and staging.is_contiguous()
    assert staging.is_pinned() == torch.cuda.is_available()  # pinned exactly where torch can pin
    assert arr.read(sel, device=target) is not None  # like=None means torch there too


def test_framework_path_to_meta(tmp_path: Path, copy_spy: list[dict[str, Any]]) -> None:
    arr, _ = _array(tmp_path, "float32")
    result = arr.read((slice(0, 5),), device="meta", like="torch")
    assert result.device.type == "meta" and tuple(result.shape) == (5, 7) and result.dtype == torch.float32
    assert [c["kwargs"] for c in copy_spy if c["op"] == "copy_"] == [{"non_blocking": True}]
    same = arr.read((slice(0, 5),), device=torch.device("meta"))
    assert same.device.type == "meta"


def test_framework_path_into_out(tmp_path: Path, copy_spy: list[dict[str, Any]]) -> None:
    arr, _ = _array(tmp_path, "float32")
    out = torch.empty((9, 7), device="meta")
    assert arr.read(out=out) is out  # the device comes from out
    assert arr.read(out=out, device="meta") is out
    copies = [c for c in copy_spy if c["op"] == "copy_"]
    assert len(copies) == 2 and all(c["kwargs"] == {"non_blocking": True} for c in copies)
    assert all(c["source"].device.type == "cpu" for c in copies)
    with pytest.raises(zd.UsageError, match="shape"):
        arr.read((slice(0, 2),), out=out)
    with pytest.raises(zd.UsageError, match="dtype"):
        arr.read(out=torch.empty((9, 7), device="meta", dtype=torch.float16))


@pytest.mark.parametrize("like", ["numpy", "cupy", "jax"])
def test_framework_devices_need_like_torch(tmp_path: Path, like: str) -> None:
    arr, _ = _array(tmp_path)
    with pytest.raises(zd.UsageError) as info:
        arr.read(device="meta", like=like)
    assert "like='torch'" in str(info.value)


def test_framework_path_reports_read_errors(tmp_path: Path) -> None:
    """A damaged chunk raises the engine's typed error on the framework path too."""
    arr = zd.create(tmp_path / "a.zarr", shape=(8,), dtype="int32", chunks=(4,), compressors=[{"name": "crc32c"}])
    arr[...] = np.arange(1, 9, dtype=np.int32)
    chunk = tmp_path / "a.zarr" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[0] ^= 1
    chunk.write_bytes(bytes(data))
    with pytest.raises(zd.ChecksumError, match="c/1"):
        zd.open_array(tmp_path / "a.zarr").read(device="meta", like="torch")


def test_empty_selection_on_a_framework_device(tmp_path: Path) -> None:
    arr, _ = _array(tmp_path)
    result = arr.read((slice(3, 3),), device="meta")
    assert tuple(result.shape) == (0, 7)


def test_jax_without_a_gpu_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX installed without CUDA support: a DeviceError before any I/O."""
    jax = pytest.importorskip("jax")
    try:
        if jax.devices("gpu"):
            pytest.skip("JAX has a GPU backend here")
    except RuntimeError:
        pass
    arr, _ = _array(tmp_path)
    _fake_cuda(monkeypatch, 1)
    with pytest.raises(zd.DeviceError, match="JAX sees no GPU"):
        arr.read(device="cuda:0", like="jax")


def test_io_config_reaches_the_engine_not_each_call() -> None:
    """set_config changes the engine's settings; a read to a GPU passes where its output is and
    the options it starts with: the settings in force then, with its stream."""
    calls: list[tuple[Any, ...]] = []

    class Recorder:
        def read_cuda(self, *args: Any) -> None:
            calls.append(args)

    previous = zd.set_config(threads=3, max_inflight_bytes=1 << 20, gpu_decode="trusted",
                             staging_bytes=32 << 20, staging_slots=2)
    try:
        assert _core.settings() == {"threads": 3, "max_inflight_bytes": 1 << 20, "gpu_decode": "trusted",
                                    "staging_bytes": 32 << 20, "staging_slots": 2,
                                    "decode_bytes": previous.decode_bytes, "decoder_bytes": previous.decoder_bytes,
                                    "gpu_encode": previous.gpu_encode, "decode_sharing": previous.decode_sharing,
                                    "zstd_block_bytes": previous.zstd_block_bytes}
        transfers.fill(Recorder(), [(0, 1, 4)], Destination(None, index=1, ptr=1234, nbytes=16, stream=7))  # type: ignore[arg-type]
        assert [call[:4] for call in calls] == [([(0, 1, 4)], 1, 1234, 16)]
        options = calls[0][4]
        assert isinstance(options, _core.ReadOptions)
        assert (options.consumer_stream, options.non_blocking) == (7, False)
        assert (options.threads, options.staging_bytes, options.staging_slots, options.gpu_decode) == (
            3, 32 << 20, 2, "trusted")
        with pytest.raises(zd.UsageError):
            zd.set_config(gpu_decode="sometimes")
        assert _core.settings()["gpu_decode"] == "trusted"
    finally:
        zd.set_config(**dataclasses.asdict(previous))
