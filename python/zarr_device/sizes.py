"""Byte counts as people write them (``256MiB``, ``1GB``, ``1.5GiB``, ``1048576``): one parser for
the settings, their environment variables and the command line."""

from __future__ import annotations

import operator
import re
from typing import Any

from zarr_device.errors import UsageError

__all__ = ["parse_size", "format_bytes"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_PATTERN = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*")
_EXAMPLES = "examples: 1GiB, 512MiB, 256KiB, 2GB, 1048576"


def parse_size(value: Any, *, what: str = "size", minimum: int = 1) -> int:
    """A byte count from an integer or a string with an optional unit (decimal: kB, MB, GB, TB;
    binary: KiB, MiB, GiB, TiB). Raises :class:`UsageError` naming ``what`` when ``value`` is not
    a size or is below ``minimum``."""
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a size ({_EXAMPLES}), not {value!r}")
    if isinstance(value, str):
        match = _PATTERN.fullmatch(value)
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise UsageError(f"{what}: {value!r} is not a size ({_EXAMPLES})")
        size = int(float(match.group(1)) * _UNITS[unit])
    else:
        try:
            size = operator.index(value)
        except TypeError:
            raise UsageError(f"{what} must be a size ({_EXAMPLES}), not {value!r}") from None
    if size < minimum:
        raise UsageError(f"{what} must be at least {format_bytes(minimum)}, not {value!r}")
    return size


def format_bytes(n: float) -> str:
    """Formats a byte count with a binary unit: ``1.00 GiB``, ``512.0 KiB``, ``17 B``."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}" if n < 100 else f"{n:.0f} {unit}"
    raise AssertionError("unreachable")
