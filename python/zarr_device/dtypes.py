"""Zarr data type names and their NumPy dtypes (bfloat16 and float8 through ml_dtypes)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from zarr_device.errors import FormatError

__all__ = ["ZARR_DTYPE_NAMES", "to_numpy_dtype", "to_zarr_name"]

_NUMPY_NAMES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
_ML_DTYPES_NAMES = [
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e3m4",
    "float8_e8m0fnu",
]

#: Every data type name zarr-device reads and writes (Zarr v3 names).
ZARR_DTYPE_NAMES: tuple[str, ...] = tuple(_NUMPY_NAMES + _ML_DTYPES_NAMES)

_BY_NAME: dict[str, np.dtype[Any]] = {name: np.dtype(name) for name in _NUMPY_NAMES}
_BY_NAME.update({name: np.dtype(getattr(ml_dtypes, name)) for name in _ML_DTYPES_NAMES})


def to_numpy_dtype(name: str) -> np.dtype[Any]:
    """The native-byte-order NumPy dtype of a Zarr data type name."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise FormatError(f"unsupported data type '{name}'") from None


def to_zarr_name(dtype: Any) -> str:
    """The Zarr v3 name of a NumPy dtype (any byte order) or of a name such as "bfloat16"."""
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return dtype
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise FormatError(f"unsupported data type {dtype!r}") from None
    native = np_dtype.newbyteorder("=")
    for name, candidate in _BY_NAME.items():
        if candidate == native:
            return name
    raise FormatError(f"unsupported data type {dtype!r}")
