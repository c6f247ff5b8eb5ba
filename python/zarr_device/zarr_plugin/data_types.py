"""bfloat16 and the float8 types for zarr-python, through ml_dtypes: with these registered,
``zarr.open_array`` reads arrays that zarr-device or tensorstore wrote with them, and
``zarr.create_array(..., dtype="bfloat16")`` (or ``dtype=ml_dtypes.bfloat16``) writes them.

Names and fill values are tensorstore's: the Zarr v3 ``data_type`` is the ml_dtypes name
("bfloat16", "float8_e4m3fn", ...), as is the Zarr v2 ``dtype``; fill values are numbers,
"NaN", "Infinity", "-Infinity" or a hex bit pattern (:func:`zarr_device.basics.numpy_dtypes.float_fill_to_json`).

zarr-python 3.1 collects the ``zarr.data_type`` entry points that pyproject.toml declares but
never loads them, so importing zarr_device registers these classes itself when zarr is already
imported (:func:`register`); this module imports zarr and is imported only then.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from zarr.core.dtype import data_type_registry
from zarr.core.dtype.common import HasEndianness, HasItemSize
from zarr.core.dtype.wrapper import ZDType

from zarr_device.basics.numpy_dtypes import ML_DTYPES_NAMES, float_fill_from_json, float_fill_to_json, round_to_float, to_numpy_dtype
from zarr_device.errors import FormatError

# zarr.errors since zarr-python 3.2, which warns on an import from its old place (3.1's).
try:
    DataTypeValidationError: type[Exception] = importlib.import_module("zarr.errors").DataTypeValidationError
except AttributeError:
    DataTypeValidationError = importlib.import_module("zarr.core.dtype.common").DataTypeValidationError

__all__ = [
    "MLFloat",
    "BFloat16",
    "Float8E4M3FN",
    "Float8E4M3FNUZ",
    "Float8E4M3B11FNUZ",
    "Float8E5M2",
    "Float8E5M2FNUZ",
    "Float8E3M4",
    "Float8E8M0FNU",
    "DATA_TYPES",
    "register",
]


@dataclass(frozen=True, kw_only=True)
class MLFloat(ZDType[Any, Any], HasItemSize):
    """A floating point type NumPy lacks, held by an ml_dtypes scalar type. One-byte types have
    no byte order (zarr's bytes codec then needs no ``endian``, which tensorstore leaves out)."""

    _zarr_v3_name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.dtype_cls = type(cls._native())

    @classmethod
    def _native(cls) -> np.dtype[Any]:
        return to_numpy_dtype(cls._zarr_v3_name)

    @property
    def item_size(self) -> int:
        return int(self._native().itemsize)

    @classmethod
    def _matches(cls, dtype: Any) -> bool:
        # The dtype's class first: NumPy's new-style dtypes (StringDType, ...), which zarr-python
        # offers every registered type, have no byte order to change.
        return isinstance(dtype, cls.dtype_cls) and dtype.newbyteorder("=") == cls._native()

    @classmethod
    def from_native_dtype(cls, dtype: Any) -> MLFloat:
        if cls._matches(dtype):
            return cls()
        raise DataTypeValidationError(f"Invalid data type: {dtype}. Expected {cls._native()}")

    def to_native_dtype(self) -> np.dtype[Any]:
        return self._native()

    @classmethod
    def _from_json_v2(cls, data: Any) -> MLFloat:
        # tensorstore's Zarr v2 driver names these types as v3 does: {"dtype": "bfloat16"}.
        if isinstance(data, dict) and data.get("name") == cls._zarr_v3_name and data.get("object_codec_id") is None:
            return cls()
        raise DataTypeValidationError(f"Invalid JSON representation of {cls._zarr_v3_name}: {data!r}")

    @classmethod
    def _from_json_v3(cls, data: Any) -> MLFloat:
        if data == cls._zarr_v3_name:
            return cls()
        raise DataTypeValidationError(f"Invalid JSON representation of {cls._zarr_v3_name}: {data!r}")

    def to_json(self, zarr_format: Literal[2, 3]) -> Any:
        if zarr_format == 2:
            if getattr(self, "endianness", "little") == "big":
                # The v2 spelling ("bfloat16", as tensorstore writes it) is little-endian: a
                # big-endian array written under it would read back as other values.
                raise DataTypeValidationError(
                    f"{self._zarr_v3_name} has no big-endian Zarr v2 spelling: write it little-endian "
                    f"(dtype.newbyteorder('<')) or as Zarr v3"
                )
            return {"name": self._zarr_v3_name, "object_codec_id": None}
        return self._zarr_v3_name

    def _check_scalar(self, data: object) -> bool:
        if isinstance(data, str):
            try:
                float_fill_from_json(data, self.to_native_dtype())
            except FormatError:
                return False
            return True
        return isinstance(data, (int, float, np.generic)) and not isinstance(data, (bool, np.bool_))

    def cast_scalar(self, data: object) -> Any:
        if not self._check_scalar(data):
            raise TypeError(f"Cannot convert object {data!r} with type {type(data)} to a {self._zarr_v3_name} scalar.")
        if isinstance(data, str):
            return float_fill_from_json(data, self.to_native_dtype())
        return round_to_float(data, self.to_native_dtype())

    def default_scalar(self) -> Any:
        return self.cast_scalar(0)

    def from_json_scalar(self, data: Any, *, zarr_format: Literal[2, 3]) -> Any:
        try:
            return float_fill_from_json(data, self.to_native_dtype())
        except FormatError as e:
            raise TypeError(str(e)) from None

    def to_json_scalar(self, data: object, *, zarr_format: Literal[2, 3]) -> float | str:
        return float_fill_to_json(self.cast_scalar(data), self.to_native_dtype())


@dataclass(frozen=True, kw_only=True)
class BFloat16(MLFloat, HasEndianness):
    _zarr_v3_name: ClassVar[str] = "bfloat16"

    @classmethod
    def from_native_dtype(cls, dtype: Any) -> BFloat16:
        if cls._matches(dtype):
            return cls(endianness="big" if dtype.byteorder == ">" else "little")
        raise DataTypeValidationError(f"Invalid data type: {dtype}. Expected {cls._native()}")

    def to_native_dtype(self) -> np.dtype[Any]:
        return self._native().newbyteorder(">" if self.endianness == "big" else "<")


@dataclass(frozen=True, kw_only=True)
class Float8E4M3FN(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e4m3fn"


@dataclass(frozen=True, kw_only=True)
class Float8E4M3FNUZ(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e4m3fnuz"


@dataclass(frozen=True, kw_only=True)
class Float8E4M3B11FNUZ(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e4m3b11fnuz"


@dataclass(frozen=True, kw_only=True)
class Float8E5M2(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e5m2"


@dataclass(frozen=True, kw_only=True)
class Float8E5M2FNUZ(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e5m2fnuz"


@dataclass(frozen=True, kw_only=True)
class Float8E3M4(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e3m4"


@dataclass(frozen=True, kw_only=True)
class Float8E8M0FNU(MLFloat):
    _zarr_v3_name: ClassVar[str] = "float8_e8m0fnu"


#: Every data type of zarr_device's that zarr-python lacks, by Zarr v3 name.
DATA_TYPES: dict[str, type[MLFloat]] = {
    cls._zarr_v3_name: cls
    for cls in (
        BFloat16,
        Float8E4M3FN,
        Float8E4M3FNUZ,
        Float8E4M3B11FNUZ,
        Float8E5M2,
        Float8E5M2FNUZ,
        Float8E3M4,
        Float8E8M0FNU,
    )
}
assert set(DATA_TYPES) == set(ML_DTYPES_NAMES)


def register() -> None:
    """Adds the types to zarr-python's data type registry (idempotent; it is keyed by name)."""
    for name, cls in DATA_TYPES.items():
        data_type_registry.register(name, cls)
