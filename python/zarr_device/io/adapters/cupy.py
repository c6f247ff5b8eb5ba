"""CuPy adapter: results allocated as CuPy arrays on a CUDA device, which the engine fills
directly. CuPy holds NumPy's types only: bfloat16 and float8 go to torch, JAX or DLPack instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from zarr_device.io.adapters.base import (
    Adapter,
    CudaSource,
    Destination,
    Target,
    check_device_cast,
    check_shape_and_dtype,
    gpu_only,
    import_framework,
)
from zarr_device.io.devices import CUDA_STREAM_LEGACY, DeviceSpec, parse_device
from zarr_device.basics.numpy_dtypes import to_numpy_dtype
from zarr_device.errors import OutOfMemoryError, UsageError

__all__ = ["CupyAdapter", "cupy_dtype"]

T = TypeVar("T")


def _cupy() -> Any:
    return import_framework("cupy", "like='cupy' needs CuPy: pip install cupy-cuda12x (or cupy-cuda13x)")


def cupy_dtype(zarr_name: str) -> np.dtype[Any]:
    """The NumPy dtype CuPy uses for a Zarr data type; UsageError for the types CuPy lacks."""
    if zarr_name == "bfloat16" or zarr_name.startswith("float8"):
        raise UsageError(
            f"CuPy has no {zarr_name} type (its arrays hold NumPy's built-in types only): read "
            "with like='torch' (or like='jax', or like=None for a DLPack array) instead"
        )
    return to_numpy_dtype(zarr_name)


def _on_device(cupy: Any, index: int, make: Callable[[], T]) -> T:
    """``make()`` with CUDA device ``index`` current: as it is, when it is current already.

    A CuPy device context sets the device again on leaving (cudaSetDevice), holding the GIL, which
    reads from many threads at once pay, where asking which device is current costs nothing
    measurable (the benchmark notebook, "CUDA calls a read makes holding the GIL, from 16
    threads")."""
    if cupy.cuda.runtime.getDevice() == index:
        return make()
    with cupy.cuda.Device(index):
        return make()


def _pointer(array: Any) -> tuple[int, int]:
    """The device address of a C-contiguous array's first element and its size in bytes."""
    return int(array.data.ptr), int(array.nbytes)


class CupyAdapter(Adapter):
    like: ClassVar[str | None] = "cupy"
    array_name: ClassVar[str] = "CuPy array"
    module: ClassVar[str] = "cupy"
    array_types: ClassVar[tuple[str, ...]] = ("ndarray",)

    def device_of(self, array: Any) -> DeviceSpec:
        return parse_device(int(array.device.id))

    def check_device(self, device: DeviceSpec) -> None:
        gpu_only("cupy", device)

    def allocate(self, target: Target) -> Destination:
        self.check_device(target.device)
        dtype = cupy_dtype(target.dtype)
        cupy = _cupy()
        index = target.device.index
        assert index is not None
        try:
            array = _on_device(cupy, index, lambda: cupy.empty(target.shape, dtype=dtype))
        except cupy.cuda.memory.OutOfMemoryError as e:
            raise OutOfMemoryError(
                f"CuPy could not allocate {target.shape} {target.dtype} on cuda:{index}: {e}"
            ) from None
        ptr, nbytes = _pointer(array)
        return Destination(array, index=index, ptr=ptr, nbytes=nbytes, stream=self.stream(index))

    def check_out(self, out: Any, target: Target) -> Destination:
        self.check_device(target.device)
        index = target.device.index
        assert index is not None
        check_shape_and_dtype(out, target, cupy_dtype(target.dtype))
        if int(out.device.id) != index:
            raise UsageError(f"out lives on cuda:{int(out.device.id)}, not on cuda:{index}")
        if not out.flags.c_contiguous:
            raise UsageError("out must be C-contiguous")
        ptr, nbytes = _pointer(out)
        return Destination(out, index=index, ptr=ptr, nbytes=nbytes, stream=self.stream(index))

    def stream(self, index: int) -> int:
        """CuPy's current stream on a device (``cudaStreamLegacy``, 1, for the null stream): the
        engine's writes wait for the work queued on it (CuPy's memory pool may hand out memory
        that queued kernels still use), and a read may complete in stream order on it."""
        cupy = _cupy()
        try:
            stream = cupy.cuda.get_current_stream(index)
        except TypeError:  # CuPy before 13 takes no device: ask on the device
            stream = _on_device(cupy, index, cupy.cuda.get_current_stream)
        return int(stream.ptr) or CUDA_STREAM_LEGACY

    def to_host(self, values: Any) -> npt.NDArray[Any]:
        return np.asarray(values.get())

    def cuda_source(self, values: Any, dtype: str, shape: tuple[int, ...], what: str) -> CudaSource | None:
        """CuPy arrays (None for the types CuPy lacks: those go through the host)."""
        check_device_cast(values, str(values.dtype), dtype, what)
        try:
            converted = cupy_dtype(dtype)
        except UsageError:
            return None
        cupy = _cupy()
        index = int(values.device.id)
        try:
            source = _on_device(
                cupy, index, lambda: cupy.ascontiguousarray(cupy.broadcast_to(values.astype(converted, copy=False), shape))
            )
        except ValueError:
            raise UsageError(
                f"values of shape {tuple(values.shape)} do not fit a selection of shape {shape}"
            ) from None
        address, nbytes = _pointer(source)
        # The stream the values were made on (see TorchAdapter.cuda_source: the null stream's
        # handle 0 would mean "none").
        return CudaSource(index, address, nbytes, self.stream(index), source)
