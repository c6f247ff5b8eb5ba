"""Which values a write takes: casts within a kind only (int to a narrower int, float64 to
float32, bool to anything), never across kinds (a float into an int array, a complex into a
float array), and integers only when every value fits; times only in the array's own unit.
zarr-python raises for NaN into int32 or 2**40 into int32; so does this, for arrays of values as
well as Python numbers."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from zarr_device.errors import UsageError

__all__ = ["check_cast", "is_python_values", "native_byte_order"]


def _kind(dtype: np.dtype[Any]) -> str:
    # bfloat16 and the float8 types (ml_dtypes) are NumPy void-kind types: floats for casting.
    return "f" if dtype.kind == "V" else dtype.kind


def is_python_values(values: Any) -> bool:
    """Whether ``values`` are Python numbers (or lists and tuples of them), whose NumPy type is a
    default (int64, float64) rather than a choice: they cast by value, not by type."""
    if isinstance(values, (list, tuple)):
        return all(is_python_values(v) for v in values)
    return isinstance(values, (bool, numbers.Number)) and not isinstance(values, np.generic)


def check_cast(
    source: np.dtype[Any],
    target: np.dtype[Any],
    *,
    python_values: bool,
    what: str,
    bounds: Callable[[], tuple[Any, Any]],
) -> None:
    """Raises UsageError naming both dtypes unless values of ``source`` may be written into an
    array of ``target``. ``bounds`` gives the values' (min, max), asked for only when an integer
    cast could wrap around."""
    if source == target:
        return
    s, t = _kind(source), _kind(target)
    if s in "mM" or t in "mM":  # times: another byte order only (a unit change can round or wrap)
        allowed = s == t and np.datetime_data(source) == np.datetime_data(target)
    elif python_values:
        allowed = s == "b" or (s in "iu" and t in "iufc") or (s == "f" and t in "fc") or (s == t == "c")
    else:
        allowed = s == "b" or (s in "biufc" and bool(np.can_cast(source, target, casting="same_kind")))
    if not allowed:
        raise UsageError(
            f"{what}: values of dtype {source} cannot be written into an array of dtype {target} "
            f"(only casts within a kind are made; convert them first, e.g. values.astype('{target}'))"
        )
    if s in "iu" and t in "iu" and not np.can_cast(source, target, casting="safe"):
        low, high = bounds()
        info = np.iinfo(target)
        if int(low) < info.min or int(high) > info.max:
            raise UsageError(
                f"{what}: values from {int(low)} to {int(high)} do not fit dtype {target} "
                f"({info.min} to {info.max})"
            )


def native_byte_order(array: Any) -> Any:
    """``array`` with its elements in this machine's byte order: a NumPy array of the other byte
    order is swapped into a new array; anything else is returned as it is.

    ``astype`` (or ``np.asarray(..., dtype=)``) to the native dtype is not enough: for datetime64
    and timedelta64 of the generic unit (``">M8"``), NumPy keeps the source's byte order and
    leaves the bytes unswapped (``np.array([1], ">i8").view(">M8").astype("<M8")`` is still
    ``>M8``), so a consumer that then takes the bytes (the engine) would store them swapped."""
    if isinstance(array, np.ndarray) and not array.dtype.isnative and array.dtype.fields is None:
        return array.byteswap().view(array.dtype.newbyteorder("="))
    return array
