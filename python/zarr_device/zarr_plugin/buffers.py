"""zarr-python buffers whose data live where the user computes: torch tensors (on the CPU or any
torch device) and JAX arrays, next to zarr-python's own NumPy (``zarr.buffer.cpu``) and CuPy
(``zarr.buffer.gpu``) buffers.

zarr-python hands its ``NDBuffer``'s array to the user at the end of a read
(``as_ndarray_like()``) and works on it through a handful of methods in between. A torch tensor
does not have NumPy's method names (``astype``, ``view(dtype)``, ``fill``), so
:class:`TorchNDBuffer` keeps the tensor and speaks NumPy's names for it. A JAX array cannot be
written in place, so :class:`JaxNDBuffer` fills a NumPy array and hands it to JAX at the end.

The codec pipeline of this package fills these buffers itself (the engine reads straight into
their memory); when it falls back to zarr-python's codecs, those run on NumPy buffers and the
result is copied in once (``host_view``/``copy_from_host``), so no zarr-python codec ever sees a
tensor.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, SupportsIndex

import numpy as np
import numpy.typing as npt
from zarr.core.buffer import core as buffer_core
from zarr.core.buffer import cpu as cpu_buffer
from zarr.registry import register_ndbuffer

from zarr_device.basics.casting import native_byte_order
from zarr_device.io.adapters import adapter
from zarr_device.io.adapters.torch import torch_dtype
from zarr_device.basics.numpy_dtypes import to_numpy_dtype, to_zarr_name
from zarr_device.io.transfers import host_values

__all__ = [
    "TorchNDBuffer",
    "JaxNDBuffer",
    "set_torch_device",
    "torch_device",
    "set_jax_device",
    "jax_device",
    "working_array",
    "host_view",
    "copy_from_host",
    "assign",
    "select",
]

# The device new torch buffers are made on; enable() sets it (one torch device at a time, as
# zarr-python's config names one buffer class at a time).
_torch_device = "cpu"


def set_torch_device(device: str) -> str:
    """Makes new :class:`TorchNDBuffer` data live on ``device``; returns the previous device."""
    global _torch_device
    previous, _torch_device = _torch_device, device
    return previous


def torch_device() -> str:
    return _torch_device


# The CUDA device JAX results are put on (None: JAX's default device).
_jax_device: int | None = None


def set_jax_device(index: int | None) -> int | None:
    """Puts new :class:`JaxNDBuffer` results on CUDA device ``index`` (None: JAX's default
    device); returns the previous choice."""
    global _jax_device
    previous, _jax_device = _jax_device, index
    return previous


def jax_device() -> int | None:
    return _jax_device


def _torch() -> Any:
    import torch

    return torch


#: torch's adapter: which objects are tensors.
_tensors = adapter("torch")


def _zarr_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _to_tensor(values: Any, device: str | None = None) -> Any:
    """``values`` (a tensor, NumPy array, scalar, or another NDBuffer) as a tensor on ``device``
    (the tensor's own device, or the buffers' device, when None). NumPy arrays on the CPU are
    shared, not copied, where torch can (bfloat16 and float8 through their bytes)."""
    torch = _torch()
    if isinstance(values, buffer_core.NDBuffer):
        values = working_array(values)
    if isinstance(values, torch.Tensor):
        return values if device is None else values.to(device)
    array = native_byte_order(np.asarray(values))
    if array.dtype.kind == "V" or not array.dtype.isnative:
        # ml_dtypes types travel as bytes (below); non-native byte orders are made native first.
        array = np.ascontiguousarray(array, dtype=to_numpy_dtype(to_zarr_name(array.dtype)))
    if not array.flags.writeable:
        array = array.copy()  # torch may write to the memory it shares
    if array.dtype.kind == "V":
        tensor = torch.from_numpy(array.reshape(-1).view(np.uint8))
        tensor = tensor.view(torch_dtype(to_zarr_name(array.dtype))).reshape(array.shape)
    else:
        tensor = torch.from_numpy(array)
    return tensor.to(device or _torch_device)


def _index(key: Any, device: Any) -> Any:
    """A NumPy-style index with its integer arrays as tensors on the indexed tensor's device."""
    torch = _torch()
    if isinstance(key, tuple):
        return tuple(_index(k, device) for k in key)
    if isinstance(key, np.ndarray):
        return torch.as_tensor(key, device=device)
    if isinstance(key, np.integer):
        return int(key)
    return key


class TorchNDBuffer(buffer_core.NDBuffer):
    """An NDBuffer holding a torch tensor: ``zarr_array[...]`` returns the tensor itself."""

    _data: Any  # a torch.Tensor

    def __init__(self, array: Any) -> None:
        self._data = _to_tensor(array)

    @classmethod
    def create(
        cls,
        *,
        shape: Iterable[int],
        dtype: npt.DTypeLike,
        order: Literal["C", "F"] = "C",
        fill_value: Any | None = None,
    ) -> TorchNDBuffer:
        torch = _torch()
        shape_t = tuple(int(s) for s in shape)
        dtype_t = torch_dtype(to_zarr_name(dtype))
        if order == "F" and len(shape_t) > 1:
            # Column-major: a C-ordered tensor of the reversed shape, seen transposed.
            tensor = torch.empty(shape_t[::-1], dtype=dtype_t, device=_torch_device)
            tensor = tensor.permute(*reversed(range(len(shape_t))))
        else:
            tensor = torch.empty(shape_t, dtype=dtype_t, device=_torch_device)
        buffer = cls(tensor)
        if fill_value is not None:
            buffer.fill(fill_value)
        return buffer

    @classmethod
    def empty(
        cls, shape: tuple[int, ...], dtype: npt.DTypeLike, order: Literal["C", "F"] = "C"
    ) -> TorchNDBuffer:
        return cls.create(shape=shape, dtype=dtype, order=order)

    @classmethod
    def from_numpy_array(cls, array_like: npt.ArrayLike) -> TorchNDBuffer:
        return cls(np.asanyarray(array_like))

    def as_numpy_array(self) -> npt.NDArray[Any]:
        return host_values(self._data)

    @property
    def dtype(self) -> np.dtype[Any]:
        return to_numpy_dtype(_zarr_name(self._data))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    def astype(self, dtype: npt.DTypeLike, order: Literal["K", "A", "C", "F"] = "K") -> TorchNDBuffer:
        return self.__class__(self._data.to(torch_dtype(to_zarr_name(dtype))))

    def __getitem__(self, key: Any) -> TorchNDBuffer:
        return self.__class__(select(self._data, key))

    def __setitem__(self, key: Any, value: Any) -> None:
        assign(self._data, key, working_array(value) if isinstance(value, buffer_core.NDBuffer) else value)

    def all_equal(self, other: Any, equal_nan: bool = True) -> bool:
        return bool(_host_buffer(self.as_numpy_array()).all_equal(other, equal_nan=equal_nan))

    def fill(self, value: Any) -> None:
        self._data.fill_(_scalar(value))

    def copy(self) -> TorchNDBuffer:
        return self.__class__(self._data.clone())

    def transpose(self, axes: SupportsIndex | Sequence[SupportsIndex] | None) -> TorchNDBuffer:
        if axes is None:
            order: list[int] = list(reversed(range(self._data.ndim)))
        elif isinstance(axes, Sequence):
            order = [int(a) for a in axes]
        else:
            order = [int(axes)]
        return self.__class__(self._data.permute(*order))


def _scalar(value: Any) -> Any:
    """A fill value as a Python number torch takes (NumPy scalars, bfloat16 ones included)."""
    item = np.asarray(value)
    if item.dtype.kind == "V":
        return float(item.astype(np.float32))
    return item.item()


class JaxNDBuffer(cpu_buffer.NDBuffer):
    """An NDBuffer filled as a NumPy array and handed to JAX at the end (JAX arrays cannot be
    written in place): ``zarr_array[...]`` returns a ``jax.Array``, on the CUDA device enable()
    named, else on JAX's default device."""

    def as_ndarray_like(self) -> Any:
        import jax

        if _jax_device is None:
            return jax.numpy.asarray(self._data)
        from zarr_device.io.adapters import jax as jax_adapter

        return jax.device_put(self._data, jax_adapter.device(_jax_device))


def _host_buffer(array: Any) -> cpu_buffer.NDBuffer:
    """zarr-python's NumPy NDBuffer around ``array``, without a copy."""
    return cpu_buffer.NDBuffer(array)


def working_array(buffer: buffer_core.NDBuffer) -> Any:
    """The array a buffer's data live in, which a read fills in place: the tensor of a
    TorchNDBuffer, the NumPy array of a JaxNDBuffer, else what the buffer hands out."""
    if isinstance(buffer, (TorchNDBuffer, JaxNDBuffer)):
        return buffer._data  # noqa: SLF001 - the array, not what the user is given
    return buffer.as_ndarray_like()


def host_view(buffer: buffer_core.NDBuffer) -> tuple[cpu_buffer.NDBuffer, bool]:
    """A NumPy NDBuffer for zarr-python's codecs to fill or read: the buffer's own memory when it
    is in host memory NumPy can see (then False), else a host copy (True: copy it back after a
    read with :func:`copy_from_host`)."""
    data = working_array(buffer)
    if isinstance(data, np.ndarray):
        return _host_buffer(data), False
    if _tensors.owns(data) and data.device.type == "cpu":
        if data.is_contiguous():
            return _host_buffer(host_values(data)), False  # NumPy's view of the tensor's memory
        try:
            return _host_buffer(data.numpy()), False
        except TypeError:  # a strided bfloat16 or float8 tensor: NumPy cannot see it
            pass
    return _host_buffer(buffer.as_numpy_array()), True


def copy_from_host(buffer: buffer_core.NDBuffer, host: cpu_buffer.NDBuffer) -> None:
    """Copies a host copy made by :func:`host_view` back into ``buffer``."""
    assign(working_array(buffer), Ellipsis, host.as_ndarray_like())


def _cupy_index(key: Any) -> Any:
    import cupy

    if isinstance(key, tuple):
        return tuple(_cupy_index(k) for k in key)
    return cupy.asarray(key) if isinstance(key, np.ndarray) else key


def _is_advanced(selection: Any) -> bool:
    items = selection if isinstance(selection, tuple) else (selection,)
    return any(isinstance(item, (np.ndarray, list)) for item in items)


def select(values: Any, selection: Any) -> Any:
    """``values[selection]`` for NumPy arrays, torch tensors and CuPy arrays, ``selection``'s
    integer arrays (NumPy) moved to where ``values`` live."""
    if _tensors.owns(values):
        if values.device.type == "cpu" and _is_advanced(selection):
            # Through NumPy: torch cannot gather every type (uint64).
            return _to_tensor(host_values(values)[selection], "cpu")
        return values[_index(selection, values.device)]
    if isinstance(values, np.ndarray):
        return values[selection]
    return values[_cupy_index(selection)]


def assign(target: Any, selection: Any, values: Any) -> None:
    """``target[selection] = values`` for NumPy arrays, torch tensors and CuPy arrays, with
    ``values`` and the integer arrays of ``selection`` moved to where ``target`` lives."""
    if isinstance(target, np.ndarray):
        target[selection] = host_values(values)
        return
    if _tensors.owns(target):
        if target.device.type == "cpu" and target.is_contiguous():
            # Through NumPy's view of the memory: torch cannot scatter every type (uint64).
            assign(host_values(target), selection, values)
            return
        target[_index(selection, target.device)] = _to_tensor(values, target.device).to(target.dtype)
        return
    import cupy

    with cupy.cuda.Device(target.device.id):
        target[_cupy_index(selection)] = cupy.asarray(values)


register_ndbuffer(TorchNDBuffer)
register_ndbuffer(JaxNDBuffer)
