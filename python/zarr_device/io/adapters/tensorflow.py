"""TensorFlow adapter: results as eager ``tf.Tensor``s, through TensorFlow's DLPack import
(``tf.experimental.dlpack.from_dlpack``, which takes legacy capsules of compact row-major arrays):
on the CPU from a NumPy array the engine filled, on a CUDA device from engine-owned device memory,
without a copy either way. bfloat16 crosses as uint16 and is bitcast; float8 (which TensorFlow's
DLPack and bitcast do not take) is converted from the NumPy array, one copy, on the CPU only.
Tensors are immutable: ``out=`` takes a ``tf.Variable``, which is assigned the result."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

import zarr_device._core as _core
from zarr_device.io.adapters.base import (
    Adapter,
    Destination,
    Target,
    check_shape_and_dtype,
    engine_destination,
    host_array,
    import_framework,
)
from zarr_device.io.devices import CPU, DeviceSpec, parse_device
from zarr_device.basics.numpy_dtypes import is_time_name, to_numpy_dtype
from zarr_device.errors import DeviceError, UsageError

__all__ = ["TensorflowAdapter", "tf_dtype"]

_DEVICE = re.compile(r"device:(CPU|GPU):(\d+)$")


def _tf() -> Any:
    return import_framework(
        "tensorflow", "like='tensorflow' needs TensorFlow: pip install tensorflow-cpu (or tensorflow[and-cuda])"
    )


def tf_dtype(zarr_name: str) -> Any:
    """The TensorFlow dtype of a Zarr data type name; UsageError when TensorFlow has none."""
    tf = _tf()
    try:
        return tf.dtypes.as_dtype(to_numpy_dtype(zarr_name))
    except TypeError:
        raise UsageError(
            f"TensorFlow {tf.__version__} has no dtype for Zarr data type '{zarr_name}': read it with "
            f"like='numpy'{'' if is_time_name(zarr_name) else ' (or like=torch)'} instead"
        ) from None


def _is_float8(zarr_name: str) -> bool:
    return zarr_name.startswith("float8")


def _carrier(zarr_name: str) -> np.dtype[Any]:
    """The NumPy dtype a host result travels to TensorFlow as (DLPack has no ml_dtypes types)."""
    return np.dtype(np.uint16) if zarr_name == "bfloat16" else to_numpy_dtype(zarr_name)


class TensorflowAdapter(Adapter):
    like: ClassVar[str | None] = "tensorflow"
    array_name: ClassVar[str] = "TensorFlow tensor"
    module: ClassVar[str] = "tensorflow"
    array_types: ClassVar[tuple[str, ...]] = ("Tensor", "Variable")

    def device_of(self, array: Any) -> DeviceSpec:
        match = _DEVICE.search(str(array.device))
        if match is None or match.group(1) == "CPU":
            return CPU
        return parse_device(int(match.group(2)))

    def check_device(self, device: DeviceSpec) -> None:
        if device.kind == "framework":
            super().check_device(device)

    def _check_type(self, target: Target) -> Any:
        dtype = tf_dtype(target.dtype)
        if target.device.kind == "cuda":
            if _is_float8(target.dtype):
                raise UsageError(
                    f"TensorFlow takes no {target.dtype} through DLPack: read it with device='cpu' "
                    "(one copy), or with like='torch' or like=None on the GPU"
                )
            assert target.device.index is not None
            gpus = _tf().config.list_physical_devices("GPU")
            if target.device.index >= len(gpus):
                raise DeviceError(
                    f"TensorFlow sees {len(gpus)} GPU(s), not CUDA device {target.device.index}: install "
                    "TensorFlow with CUDA support (pip install 'tensorflow[and-cuda]')"
                )
        return dtype

    def allocate(self, target: Target) -> Destination:
        self.check_device(target.device)
        self._check_type(target)
        if target.device.kind == "cuda":
            return engine_destination(target, self.wrap)
        carrier = host_array(target, _carrier(target.dtype))
        return Destination(
            carrier, host=carrier.reshape(-1).view(np.uint8), finish=lambda filled: self.wrap(filled, target.dtype)
        )

    def check_out(self, out: Any, target: Target) -> Destination:
        self.check_device(target.device)
        if not isinstance(out, _tf().Variable):
            raise UsageError(
                "TensorFlow tensors are immutable: pass a tf.Variable as out (it is assigned the "
                "result), or read without out="
            )
        check_shape_and_dtype(out, target, self._check_type(target))
        destination = self.allocate(target)

        def assign(filled: Any) -> Any:
            out.assign(self.wrap(filled, target.dtype))
            return out

        destination.finish = assign
        return destination

    def wrap(self, buffer: Any, dtype: str) -> Any:
        tf = _tf()
        if isinstance(buffer, _core.DeviceArray):
            return tf.experimental.dlpack.from_dlpack(buffer.__dlpack__())
        if _is_float8(dtype):  # no DLPack code, no bitcast kernel: one copy
            return tf.convert_to_tensor(buffer.view(to_numpy_dtype(dtype)))
        tensor = tf.experimental.dlpack.from_dlpack(buffer.__dlpack__())
        return tf.bitcast(tensor, tf.bfloat16) if dtype == "bfloat16" else tensor

    def to_host(self, values: Any) -> npt.NDArray[Any]:
        host: npt.NDArray[Any] = values.numpy()
        return host
