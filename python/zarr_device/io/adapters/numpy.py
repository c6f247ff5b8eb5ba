"""NumPy adapter: results in host memory as NumPy arrays (bfloat16 and float8 as ml_dtypes
arrays), the default on the CPU."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from zarr_device.io.adapters.base import Adapter, Destination, Target, check_shape_and_dtype, host_array
from zarr_device.basics.numpy_dtypes import to_numpy_dtype
from zarr_device.errors import UsageError

__all__ = ["NumpyAdapter"]


class NumpyAdapter(Adapter):
    like: ClassVar[str | None] = "numpy"
    array_name: ClassVar[str] = "NumPy array"
    module: ClassVar[str] = "numpy"
    array_types: ClassVar[tuple[str, ...]] = ("ndarray",)

    def allocate(self, target: Target) -> Destination:
        self.check_device(target.device)
        array = host_array(target)
        return Destination(array, host=array.reshape(-1).view(np.uint8))

    def check_out(self, out: Any, target: Target) -> Destination:
        self.check_device(target.device)
        check_shape_and_dtype(out, target, to_numpy_dtype(target.dtype))
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise UsageError("out must be C-contiguous and writeable")
        return Destination(out, host=out.reshape(-1).view(np.uint8))
