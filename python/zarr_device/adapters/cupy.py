"""CuPy adapter: results allocated as CuPy arrays on a CUDA device, which the engine fills
directly. CuPy holds NumPy's types only: bfloat16 and float8 go to torch, JAX or DLPack instead."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

from zarr_device.devices import CUDA_STREAM_LEGACY
from zarr_device.dtypes import to_numpy_dtype
from zarr_device.errors import OutOfMemoryError, UsageError

__all__ = [
    "cupy_dtype",
    "empty",
    "is_array",
    "device_index",
    "pointer",
    "check_out",
    "consumer_stream",
    "cuda_source",
]


def _cupy() -> Any:
    try:
        return importlib.import_module("cupy")
    except ImportError:
        raise UsageError("like='cupy' needs CuPy: pip install cupy-cuda12x (or cupy-cuda13x)") from None


def cupy_dtype(zarr_name: str) -> np.dtype[Any]:
    """The NumPy dtype CuPy uses for a Zarr data type; UsageError for the types CuPy lacks."""
    if zarr_name == "bfloat16" or zarr_name.startswith("float8"):
        raise UsageError(
            f"CuPy has no {zarr_name} type (its arrays hold NumPy's built-in types only): read "
            "with like='torch' (or like='jax', or like=None for a DLPack array) instead"
        )
    return to_numpy_dtype(zarr_name)


def is_array(obj: Any) -> bool:
    """Whether ``obj`` is a CuPy array (without importing CuPy)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(obj, cupy.ndarray)


def device_index(array: Any) -> int:
    """The CUDA device ordinal a CuPy array lives on."""
    return int(array.device.id)


def empty(shape: tuple[int, ...], zarr_name: str, device: int) -> Any:
    """An uninitialised C-contiguous array on CUDA device ``device``."""
    dtype = cupy_dtype(zarr_name)
    cupy = _cupy()
    with cupy.cuda.Device(device):
        try:
            return cupy.empty(shape, dtype=dtype)
        except cupy.cuda.memory.OutOfMemoryError as e:
            raise OutOfMemoryError(f"CuPy could not allocate {shape} {zarr_name} on cuda:{device}: {e}") from None


def pointer(array: Any) -> tuple[int, int]:
    """The device address of a C-contiguous array's first element and its size in bytes."""
    return int(array.data.ptr), int(array.nbytes)


def check_out(out: Any, shape: tuple[int, ...], zarr_name: str, device: int) -> tuple[int, int]:
    """Checks an array the engine is to fill (shape, dtype, device, contiguity) and returns its
    address and size in bytes."""
    dtype = cupy_dtype(zarr_name)
    if tuple(out.shape) != shape or out.dtype != dtype:
        raise UsageError(
            f"out has shape {tuple(out.shape)} and dtype {out.dtype}; the selection needs shape "
            f"{shape} and dtype {zarr_name}"
        )
    if device_index(out) != device:
        raise UsageError(f"out lives on cuda:{device_index(out)}, not on cuda:{device}")
    if not out.flags.c_contiguous:
        raise UsageError("out must be C-contiguous")
    return pointer(out)


def cuda_source(values: Any, zarr_name: str, shape: tuple[int, ...]) -> tuple[int, int, int, int, Any] | None:
    """Values to write, as :func:`zarr_device.adapters.torch.cuda_source` describes (None for types CuPy
    lacks: those go through the host)."""
    try:
        dtype = cupy_dtype(zarr_name)
    except UsageError:
        return None
    cupy = _cupy()
    index = device_index(values)
    with cupy.cuda.Device(index):
        try:
            source = cupy.ascontiguousarray(cupy.broadcast_to(values.astype(dtype, copy=False), shape))
        except ValueError:
            raise UsageError(f"values of shape {tuple(values.shape)} do not fit a selection of shape {shape}") from None
        stream = int(cupy.cuda.get_current_stream().ptr)
    address, nbytes = pointer(source)
    return index, address, nbytes, stream, source


def consumer_stream(device: int) -> int:
    """The handle of CuPy's current stream on a device (``cudaStreamLegacy``, 1, for the null
    stream): the engine's writes wait for the work queued on it (CuPy's memory pool may hand out
    memory that queued kernels still use), and a read may complete in stream order on it."""
    cupy = _cupy()
    with cupy.cuda.Device(device):
        return int(cupy.cuda.get_current_stream().ptr) or CUDA_STREAM_LEGACY


