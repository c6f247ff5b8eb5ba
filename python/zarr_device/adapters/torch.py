"""PyTorch adapter: results allocated as torch tensors (every Zarr type torch has, bfloat16 and
float8 included, which NumPy cannot hand over through DLPack), on the CPU, on CUDA devices the
engine writes to directly, or on any other torch device through one non-blocking copy."""

from __future__ import annotations

import sys
from typing import Any

from zarr_device.devices import CUDA_STREAM_LEGACY
from zarr_device.errors import DeviceError, OutOfMemoryError, UsageError

__all__ = [
    "torch_dtype",
    "empty",
    "pinned_empty",
    "byte_view",
    "is_tensor",
    "pointer",
    "check_out",
    "check_out_shape",
    "consumer_stream",
    "to_device",
    "cuda_source",
]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UsageError("like='torch' needs PyTorch: pip install torch") from None
    return torch


def torch_dtype(zarr_name: str) -> Any:
    """The torch dtype of a Zarr data type name; UsageError when torch has none."""
    torch = _torch()
    names = {"bool": "bool", "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}
    dtype = getattr(torch, names.get(zarr_name, zarr_name), None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(
            f"torch {torch.__version__} has no dtype for Zarr data type '{zarr_name}': read it with "
            "like='jax' or like=None (a DLPack array), or as NumPy on the CPU"
        )
    return dtype


def _allocate(shape: tuple[int, ...], zarr_name: str, device: str, pin_memory: bool = False) -> Any:
    torch = _torch()
    dtype = torch_dtype(zarr_name)
    try:
        return torch.empty(shape, dtype=dtype, device=device, pin_memory=pin_memory)
    except torch.OutOfMemoryError as e:
        raise OutOfMemoryError(f"torch could not allocate {shape} {zarr_name} on {device}: {e}") from None
    except (RuntimeError, AssertionError) as e:
        if pin_memory:
            raise
        raise DeviceError(f"torch could not allocate a tensor on {device}: {e}") from None


def empty(shape: tuple[int, ...], zarr_name: str, device: str = "cpu") -> Any:
    """An uninitialised contiguous tensor to read into."""
    return _allocate(shape, zarr_name, device)


def pinned_empty(shape: tuple[int, ...], zarr_name: str) -> Any:
    """An uninitialised CPU tensor in page-locked memory where torch can pin (it needs an
    accelerator backend), else in ordinary memory."""
    try:
        return _allocate(shape, zarr_name, "cpu", pin_memory=True)
    except (RuntimeError, AssertionError, OutOfMemoryError):  # no accelerator, or a pinning limit
        return _allocate(shape, zarr_name, "cpu")


def byte_view(tensor: Any) -> Any:
    """The tensor's bytes as a flat uint8 tensor (no copy)."""
    torch = _torch()
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        raise UsageError("out must be a contiguous CPU tensor")
    return tensor.reshape(-1).view(torch.uint8)


def to_numpy(tensor: Any) -> Any:
    """A tensor's values as a NumPy array on the host (one copy from a device; none on the CPU),
    bfloat16 and float8 included (as ml_dtypes arrays)."""
    from zarr_device.dtypes import to_numpy_dtype

    torch = _torch()
    host = tensor.detach()
    if host.device.type != "cpu":
        host = host.to("cpu")
    host = host.contiguous()
    name = str(host.dtype).removeprefix("torch.")
    if name in ("bfloat16",) or name.startswith("float8"):
        raw = host.reshape(-1).view(torch.uint8).numpy()
        return raw.view(to_numpy_dtype(name)).reshape(tuple(host.shape))
    return host.numpy()


def is_tensor(obj: Any) -> bool:
    """Whether ``obj`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def pointer(tensor: Any) -> tuple[int, int]:
    """The device address of a contiguous tensor's first element and its size in bytes."""
    return int(tensor.data_ptr()), int(tensor.numel()) * int(tensor.element_size())


def check_out_shape(out: Any, shape: tuple[int, ...], zarr_name: str) -> None:
    """UsageError unless ``out`` has the selection's shape and dtype."""
    if tuple(out.shape) != shape or out.dtype != torch_dtype(zarr_name):
        raise UsageError(
            f"out has shape {tuple(out.shape)} and dtype {out.dtype}; the selection needs shape "
            f"{shape} and dtype {zarr_name}"
        )


def check_out(out: Any, shape: tuple[int, ...], zarr_name: str, device: str) -> tuple[int, int]:
    """Checks a tensor the engine is to fill on ``device`` (shape, dtype, device, contiguity) and
    returns its address and size in bytes."""
    check_out_shape(out, shape, zarr_name)
    torch = _torch()
    if out.device != torch.device(device):
        raise UsageError(f"out lives on {out.device}, not on {device}")
    if not out.is_contiguous():
        raise UsageError("out must be C-contiguous (tensor.is_contiguous())")
    return pointer(out)


def consumer_stream(device_index: int) -> int:
    """The handle of torch's current stream on a CUDA device (``cudaStreamLegacy``, 1, for the
    legacy default stream, whose handle is 0). The engine's writes wait for the work queued on it
    (torch's caching allocator may hand out memory that queued kernels still use), and a read may
    complete in stream order on it, as torch's own non-blocking copies do."""
    torch = _torch()
    handle = int(torch.cuda.current_stream(device_index).cuda_stream)
    return handle or CUDA_STREAM_LEGACY


def cuda_source(values: Any, zarr_name: str, shape: tuple[int, ...]) -> tuple[int, int, int, int, Any] | None:
    """Values on a CUDA device to write: (device index, address, bytes, producer stream, owner),
    converted to ``zarr_name``, broadcast to ``shape`` and made C-contiguous on that device (the
    owner keeps the memory alive). None for tensors elsewhere (or on ROCm, or of types torch cannot
    convert to), which go through the host."""
    torch = _torch()
    if values.device.type != "cuda" or getattr(torch.version, "hip", None):
        return None
    try:
        dtype = torch_dtype(zarr_name)
    except UsageError:
        return None
    try:
        source = values.detach().to(dtype).broadcast_to(shape).contiguous()
    except RuntimeError:
        raise UsageError(f"values of shape {tuple(values.shape)} do not fit a selection of shape {shape}") from None
    index = int(source.device.index)
    stream = int(torch.cuda.current_stream(index).cuda_stream)
    address, nbytes = pointer(source)
    return index, address, nbytes, stream, source


def to_device(host: Any, device: str, out: Any = None) -> Any:
    """Copies a CPU tensor to ``device`` without blocking the host (into ``out`` when given).
    Pinned memory stays reserved by torch until the copy has finished."""
    if out is not None:
        out.copy_(host, non_blocking=True)
        return out
    return host.to(device, non_blocking=True)
