"""Zarr data type names and their NumPy dtypes (bfloat16 and float8 through ml_dtypes), and the
JSON of floating point fill values as tensorstore writes it."""

from __future__ import annotations

import math
import re
from typing import Any

import ml_dtypes
import numpy as np

from zarr_device.errors import FormatError

__all__ = [
    "ZARR_DTYPE_NAMES",
    "ML_DTYPES_NAMES",
    "to_numpy_dtype",
    "to_zarr_name",
    "is_time_name",
    "data_type_json",
    "float_fill_to_json",
    "float_fill_from_json",
    "round_to_float",
]

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
#: The data types NumPy lacks, which ml_dtypes provides (named as tensorstore and ml_dtypes name them).
ML_DTYPES_NAMES: tuple[str, ...] = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e4m3b11fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e3m4",
    "float8_e8m0fnu",
)

#: Every data type name zarr-device reads and writes (Zarr v3 names).
ZARR_DTYPE_NAMES: tuple[str, ...] = (*_NUMPY_NAMES, *ML_DTYPES_NAMES)

_BY_NAME: dict[str, np.dtype[Any]] = {name: np.dtype(name) for name in _NUMPY_NAMES}
_BY_NAME.update({name: np.dtype(getattr(ml_dtypes, name)) for name in ML_DTYPES_NAMES})


# NumPy's time types as the package names them (NumPy's names: "datetime64[10s]", "timedelta64"),
# zarr-python's "numpy.datetime64" and "numpy.timedelta64" with a unit and a scale factor.
_TIME_NAME = re.compile(r"(datetime64|timedelta64)(?:\[([1-9][0-9]{0,9})?(Y|M|W|D|h|m|s|ms|us|ns|ps|fs|as)\])?")


def is_time_name(name: str) -> bool:
    """Whether ``name`` names one of NumPy's time types ("datetime64[ns]", "timedelta64[10s]")."""
    return _TIME_NAME.fullmatch(name) is not None


def to_numpy_dtype(name: str) -> np.dtype[Any]:
    """The native-byte-order NumPy dtype of a data type name: a Zarr name, or NumPy's name of a
    time type ("datetime64[ns]")."""
    try:
        return _BY_NAME[name]
    except KeyError:
        if is_time_name(name):
            return np.dtype(name)
        raise FormatError(f"unsupported data type '{name}'") from None


def to_zarr_name(dtype: Any) -> str:
    """The package's name of a NumPy dtype (any byte order) or of a name such as "bfloat16": the
    Zarr v3 name, or NumPy's name of a time type ("datetime64[10s]")."""
    if isinstance(dtype, str) and (dtype in _BY_NAME or is_time_name(dtype)):
        return dtype
    try:
        native = np.dtype(dtype).newbyteorder("=")  # new-style dtypes (StringDType) have no byte order
    except TypeError:
        raise FormatError(f"unsupported data type {dtype!r}") from None
    for name, candidate in _BY_NAME.items():
        if candidate == native:
            return name
    if native.kind in "mM" and is_time_name(native.name):
        return str(native.name)
    raise FormatError(f"unsupported data type {dtype!r}")


def data_type_json(name: str) -> str | dict[str, Any]:
    """zarr.json's ``data_type`` of a type the package names ``name``, as zarr-python writes it: the
    name itself, or for a time type ``{"name": "numpy.datetime64", "configuration": {"unit": "s",
    "scale_factor": 10}}``."""
    if not is_time_name(name):
        return name
    unit, scale = np.datetime_data(to_numpy_dtype(name))
    return {"name": f"numpy.{name.split('[')[0]}", "configuration": {"unit": unit, "scale_factor": scale}}


def _bits(value: Any, dtype: np.dtype[Any]) -> int:
    native = dtype.newbyteorder("=")
    return int(np.asarray(value).astype(native).view(f"u{dtype.itemsize}"))


def round_to_float(value: Any, dtype: np.dtype[Any]) -> Any:
    """``value`` (a number or NumPy scalar) as a ``dtype`` scalar, rounded as the engine rounds:
    as ml_dtypes does, except that float8_e8m0fnu, which has no zero, takes 0 and what lies below
    its smallest value (2^-127) to that smallest value, as the engine and tensorstore do (ml_dtypes
    makes them NaN). A scalar of ``dtype`` itself keeps its bits (a NaN its payload)."""
    scalar = np.asarray(value)
    if (
        dtype == _BY_NAME["float8_e8m0fnu"]
        and scalar.dtype.kind in "iuf"
        and 0 <= float(scalar) < 2.0**-127
    ):
        return np.zeros((), np.uint8).view(dtype)[()]
    return scalar.astype(dtype)[()]


def float_fill_to_json(value: Any, dtype: np.dtype[Any]) -> float | str:
    """A floating point fill value (of ``dtype``, a NumPy or ml_dtypes float) as tensorstore
    writes it: a number, "Infinity", "-Infinity", "NaN" for the type's own quiet NaN, and any
    other NaN as its bit pattern in hex ("0x7fe0"), so that no payload is lost."""
    scalar = np.asarray(round_to_float(value, dtype))
    number = float(scalar)
    if math.isnan(number):
        bits = _bits(scalar, dtype)
        if bits == _bits(np.nan, dtype):
            return "NaN"
        return f"0x{bits:0{2 * dtype.itemsize}x}"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return number


def float_fill_from_json(data: Any, dtype: np.dtype[Any]) -> Any:
    """The ``dtype`` scalar a floating point fill value's JSON stands for (the inverse of
    :func:`float_fill_to_json`; numbers are rounded to the nearest value of the type, as
    tensorstore rounds them). FormatError for anything else."""
    if isinstance(data, str):
        special = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
        if data in special:
            return np.asarray(special[data]).astype(dtype)[()]
        digits = data[2:] if data[:2] in ("0x", "0X") else ""
        if 0 < len(digits) <= 2 * dtype.itemsize and all(c in "0123456789abcdefABCDEF" for c in digits):
            bits = np.asarray(int(digits, 16), dtype=f"u{dtype.itemsize}")
            return bits.view(dtype.newbyteorder("=")).astype(dtype)[()]
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        return round_to_float(float(data), dtype)
    raise FormatError(f"fill value {data!r} is not valid for data type {to_zarr_name(dtype)}")
