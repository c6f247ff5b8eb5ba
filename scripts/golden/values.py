"""The values the golden arrays hold: seeded per case, with special floating point values sprinkled
in; the region a case writes (the rest reads as the fill value); and comparison bit for bit."""

from __future__ import annotations

import zlib
from typing import Any

import ml_dtypes
import numpy as np

# Types with no native NumPy type: the .npy holds their bits as this unsigned integer type.
EXTENSION_DTYPES: dict[str, np.dtype[Any]] = {
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "float8_e3m4": np.dtype(ml_dtypes.float8_e3m4),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
}

CORE_DTYPES = [
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


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def make_values(dtype_name: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Seeded values of the given type, with special float values sprinkled in."""
    rng = np.random.default_rng(_seed(name))
    n = int(np.prod(shape, dtype=np.int64))
    if dtype_name in EXTENSION_DTYPES:
        dt = EXTENSION_DTYPES[dtype_name]
        bits_dt = np.uint16 if dt.itemsize == 2 else np.uint8
        bits = rng.integers(0, np.iinfo(bits_dt).max, size=n, endpoint=True, dtype=bits_dt)
        return bits.view(dt).reshape(shape)
    dt = np.dtype(dtype_name)
    if dt.kind == "b":
        return (rng.random(n) < 0.5).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        vals = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dt)
        if n >= 2:
            vals[0] = info.min
            vals[-1] = info.max
        return vals.reshape(shape)
    if dt.kind == "f":
        vals = (rng.standard_normal(n) * 100.0).astype(dt)
        specials = _float_specials(dt)
        for i, v in enumerate(specials):
            if 2 * i + 1 < n:
                vals[2 * i + 1] = v
        return vals.reshape(shape)
    if dt.kind == "c":
        part = np.dtype(f"f{dt.itemsize // 2}")
        re = make_values(part.name, (n,), name + ".re")
        im = make_values(part.name, (n,), name + ".im")
        vals = np.empty(n, dtype=dt)
        vals.real = re
        vals.imag = im
        return vals.reshape(shape)
    raise ValueError(dtype_name)


def _float_specials(dt: np.dtype[Any]) -> list[Any]:
    """NaN, a NaN with a non-default payload, -0.0, +/-inf: all must survive bit for bit."""
    payload_nan = {
        2: np.array([0x7E01], dtype=np.uint16).view(np.float16)[0],
        4: np.array([0x7FA00001], dtype=np.uint32).view(np.float32)[0],
        8: np.array([0xFFF8000000000123], dtype=np.uint64).view(np.float64)[0],
    }[dt.itemsize]
    return [dt.type(np.nan), payload_nan, dt.type(-0.0), dt.type(np.inf), dt.type(-np.inf)]


def written_region(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[slice, ...]:
    """The region a case writes: partial edge chunks, and the last chunk row left unwritten."""
    region = []
    for n, c in zip(shape, chunks):
        stop = n - c if n - c >= 2 else n
        start = 1 if stop - 1 >= 1 and n > c else 0
        region.append(slice(start, stop))
    return tuple(region)


def model(
    values: np.ndarray, fill: Any, region: tuple[slice, ...] | None = None
) -> np.ndarray:
    full = np.empty(values.shape, dtype=values.dtype)
    full[...] = fill
    if region is None:
        full[...] = values
    else:
        full[region] = values[region]
    return full


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.array(a, order="C")
    b = np.array(b, order="C")
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    if b.dtype.byteorder not in "=|":
        b = b.astype(b.dtype.newbyteorder("="))
    return (
        a.shape == b.shape
        and a.dtype.itemsize == b.dtype.itemsize
        and a.tobytes() == b.tobytes()
    )
