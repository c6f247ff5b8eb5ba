"""Byte counts as people write them (``256MiB``, ``1GB``, ``1.5GiB``, ``1048576``): one parser for
the settings and the command line. The engine reads the settings' environment variables with the
same grammar (cpp/src/engine/settings.cpp); python/tests/test_settings.py checks that they agree."""

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
# ASCII blanks only (re.ASCII), as in the engine's parser.
_PATTERN = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", re.ASCII)
_EXAMPLES = "examples: 1GiB, 512MiB, 256KiB, 2GB, 1048576"


def parse_size(value: Any, *, what: str = "size", minimum: int = 1, maximum: int | None = None) -> int:
    """A byte count from an integer or a string with an optional unit (decimal: kB, MB, GB, TB;
    binary: KiB, MiB, GiB, TiB). Raises :class:`UsageError` naming ``what`` when ``value`` is not
    a size or is below ``minimum`` (or above ``maximum``)."""
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a size ({_EXAMPLES}), not {value!r}")
    size: int | None
    if isinstance(value, str):
        match = _PATTERN.fullmatch(value)
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise UsageError(f"{what}: {value!r} is not a size ({_EXAMPLES})")
        number = match.group(1)
        try:
            # A whole number exactly; a fraction or an exponent through a float, truncated.
            size = int(number) * _UNITS[unit] if number.isdigit() else int(float(number) * _UNITS[unit])
        except OverflowError:  # beyond a float's range ("1e400")
            size = None
    else:
        try:
            size = operator.index(value)
        except TypeError:
            raise UsageError(f"{what} must be a size ({_EXAMPLES}), not {value!r}") from None
    if size is not None and size < minimum:
        raise UsageError(f"{what} must be at least {format_bytes(minimum)}, not {value!r}")
    if size is None or (maximum is not None and size > maximum):
        bound = "smaller" if maximum is None else f"at most {maximum} bytes"
        raise UsageError(f"{what} must be {bound}, not {value!r}")
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
