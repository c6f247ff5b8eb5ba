"""MLX adapter: results as ``mlx.core`` arrays on the CPU, which the engine fills in place through
the buffer protocol (MLX on Linux imports no CPU memory without a copy, through DLPack or
otherwise, but its evaluated arrays export writable buffers, which MLX documents as shared).
bfloat16 travels as uint16 and is viewed as bfloat16 without a copy. MLX has no float8 and no
complex128; zarr-device reads MLX arrays on the CPU only."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from zarr_device.io.adapters.base import Adapter, Destination, Target, check_shape_and_dtype, import_framework
from zarr_device.io.devices import DeviceSpec
from zarr_device.basics.numpy_dtypes import to_numpy_dtype
from zarr_device.errors import UsageError

__all__ = ["MlxAdapter", "mlx_dtype"]

# MLX types that export no buffer (PEP 3118 has no format for them): carried as unsigned ints.
_CARRIERS = {"bfloat16": "uint16"}


def _mx() -> Any:
    return import_framework("mlx.core", "like='mlx' needs MLX: pip install mlx (on Linux: pip install 'mlx[cpu]')")


def mlx_dtype(zarr_name: str) -> Any:
    """The MLX dtype of a Zarr data type name; UsageError when MLX has none."""
    mx = _mx()
    dtype = getattr(mx, "bool_" if zarr_name == "bool" else zarr_name, None)
    if not isinstance(dtype, mx.Dtype):
        raise UsageError(
            f"MLX has no dtype for Zarr data type '{zarr_name}': read it with like='numpy' (or "
            "like='torch') instead"
        )
    return dtype


def _writable_bytes(array: Any, zarr_name: str) -> npt.NDArray[np.uint8]:
    """The bytes of an evaluated MLX array, shared and writable (UsageError unless contiguous)."""
    mx = _mx()
    carrier = _CARRIERS.get(zarr_name)
    exported = array.view(getattr(mx, carrier)) if carrier else array
    mx.eval(exported)
    view = memoryview(exported)
    if not view.c_contiguous:
        raise UsageError("out must be a row-major contiguous MLX array")
    return np.asarray(view).reshape(-1).view(np.uint8)


class MlxAdapter(Adapter):
    like: ClassVar[str | None] = "mlx"
    array_name: ClassVar[str] = "MLX array"
    module: ClassVar[str] = "mlx.core"
    array_types: ClassVar[tuple[str, ...]] = ("array",)

    def check_device(self, device: DeviceSpec) -> None:
        if device.kind != "cpu":
            raise UsageError(
                f"like='mlx' reads to the CPU only, not to {device.name!r}: read with device='cpu' "
                "(MLX arrays in unified memory), or with like='torch' or like=None on a GPU"
            )

    def allocate(self, target: Target) -> Destination:
        self.check_device(target.device)
        mx = _mx()
        dtype = mlx_dtype(target.dtype)
        array = mx.zeros(target.shape, dtype=dtype)
        return Destination(array, host=_writable_bytes(array, target.dtype))

    def check_out(self, out: Any, target: Target) -> Destination:
        self.check_device(target.device)
        check_shape_and_dtype(out, target, mlx_dtype(target.dtype))
        return Destination(out, host=_writable_bytes(out, target.dtype))

    def to_host(self, values: Any) -> npt.NDArray[Any]:
        name = str(values.dtype).removeprefix("mlx.core.")
        carrier = _CARRIERS.get(name)
        if carrier is None:
            return np.array(values)
        raw = np.array(values.view(getattr(_mx(), carrier)))
        return raw.view(to_numpy_dtype(name))
