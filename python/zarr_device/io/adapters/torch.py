"""PyTorch adapter: results allocated as torch tensors (every Zarr type torch has, bfloat16 and
float8 included, which NumPy cannot hand over through DLPack), on the CPU, on CUDA devices the
engine writes to directly, or on any other torch device ("framework" devices: mps, xpu, ROCm's
cuda) through pinned host memory and one non-blocking copy."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy.typing as npt

from zarr_device.io.adapters.base import (
    Adapter,
    CudaSource,
    Destination,
    Target,
    check_device_cast,
    check_shape_and_dtype,
    import_framework,
)
from zarr_device.io.devices import CUDA_STREAM_LEGACY, DeviceSpec, parse_device
from zarr_device.basics.numpy_dtypes import is_time_name
from zarr_device.errors import DeviceError, OutOfMemoryError, UsageError

__all__ = [
    "TorchAdapter",
    "torch_dtype",
    "empty",
    "pinned_empty",
    "byte_view",
    "to_numpy",
    "pointer",
]


def _torch() -> Any:
    return import_framework("torch", "like='torch' needs PyTorch: pip install torch")


def torch_dtype(zarr_name: str) -> Any:
    """The torch dtype of a Zarr data type name; UsageError when torch has none."""
    torch = _torch()
    dtype = getattr(torch, zarr_name, None)
    if not isinstance(dtype, torch.dtype):
        elsewhere = "" if is_time_name(zarr_name) else "with like='jax' or like=None (a DLPack array), or "
        raise UsageError(
            f"torch {torch.__version__} has no dtype for Zarr data type '{zarr_name}': read it "
            f"{elsewhere}as NumPy on the CPU"
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
    """The tensor's bytes as a flat uint8 NumPy array (no copy)."""
    torch = _torch()
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        raise UsageError("out must be a contiguous CPU tensor")
    return tensor.detach().reshape(-1).view(torch.uint8).numpy()


def to_numpy(tensor: Any) -> Any:
    """A tensor's values as a NumPy array on the host (one copy from a device; none on the CPU),
    bfloat16 and float8 included (as ml_dtypes arrays)."""
    from zarr_device.basics.numpy_dtypes import to_numpy_dtype

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


def pointer(tensor: Any) -> tuple[int, int]:
    """The device address of a contiguous tensor's first element and its size in bytes."""
    return int(tensor.data_ptr()), int(tensor.numel()) * int(tensor.element_size())


class TorchAdapter(Adapter):
    like: ClassVar[str | None] = "torch"
    array_name: ClassVar[str] = "torch tensor"
    module: ClassVar[str] = "torch"
    array_types: ClassVar[tuple[str, ...]] = ("Tensor",)

    def device_of(self, array: Any) -> DeviceSpec:
        return parse_device(array.device)

    def check_device(self, device: DeviceSpec) -> None:
        pass  # every device torch knows

    def allocate(self, target: Target) -> Destination:
        device = target.device
        if device.kind == "cpu":
            tensor = empty(target.shape, target.dtype)
            return Destination(tensor, host=byte_view(tensor))
        if device.kind == "framework":
            tensor = empty(target.shape, target.dtype, device=device.name)
            return Destination(tensor, staged=tensor)
        assert device.index is not None
        tensor = empty(target.shape, target.dtype, device=device.name)
        ptr, nbytes = pointer(tensor)
        return Destination(tensor, index=device.index, ptr=ptr, nbytes=nbytes, stream=self.stream(device.index))

    def check_out(self, out: Any, target: Target) -> Destination:
        check_shape_and_dtype(out, target, torch_dtype(target.dtype))
        device = target.device
        if device.kind == "cpu":
            return Destination(out, host=byte_view(out))
        if device.kind == "framework":
            if out.is_contiguous():
                return Destination(out, staged=out)
            # A strided out is filled from a contiguous tensor on its device, in its stream.
            whole = empty(target.shape, target.dtype, device=device.name)
            return Destination(out, staged=whole, finish=lambda o: o.copy_(whole))
        assert device.index is not None
        if out.device != _torch().device(device.name):
            raise UsageError(f"out lives on {out.device}, not on {device.name}")
        if not out.is_contiguous():
            raise UsageError("out must be C-contiguous (tensor.is_contiguous())")
        ptr, nbytes = pointer(out)
        return Destination(out, index=device.index, ptr=ptr, nbytes=nbytes, stream=self.stream(device.index))

    def stream(self, index: int) -> int:
        """torch's current stream on a CUDA device (``cudaStreamLegacy``, 1, for the legacy
        default stream, whose handle is 0). The engine's writes wait for the work queued on it
        (torch's caching allocator may hand out memory that queued kernels still use), and a read
        may complete in stream order on it, as torch's own non-blocking copies do."""
        handle = int(_torch().cuda.current_stream(index).cuda_stream)
        return handle or CUDA_STREAM_LEGACY

    def to_host(self, values: Any) -> npt.NDArray[Any]:
        host: npt.NDArray[Any] = to_numpy(values)
        return host

    def cuda_source(self, values: Any, dtype: str, shape: tuple[int, ...], what: str) -> CudaSource | None:
        """Tensors on a CUDA device (not on ROCm, and only of types torch can convert to)."""
        torch = _torch()
        if values.device.type != "cuda" or getattr(torch.version, "hip", None):
            return None
        check_device_cast(values, str(values.dtype).removeprefix("torch."), dtype, what)
        try:
            converted = torch_dtype(dtype)
        except UsageError:
            return None
        try:
            source = values.detach().to(converted).broadcast_to(shape).contiguous()
        except RuntimeError:
            raise UsageError(f"values of shape {tuple(values.shape)} do not fit a selection of shape {shape}") from None
        index = int(source.device.index)
        address, nbytes = pointer(source)
        # The stream the values were made on, the legacy default stream as cudaStreamLegacy: its
        # handle 0 means "none", and the engine's non-blocking streams would then read them before
        # the kernel that made them has run.
        return CudaSource(index, address, nbytes, self.stream(index), source)
