"""Byte counts as people write them (``256MiB``, ``1GB``, ``1.5GiB``, ``1048576``) for the settings
and the command line, read by the engine's one size parser (``zarr_device::parse_byte_count``),
which reads the settings' environment variables too."""

from __future__ import annotations

import operator
from typing import Any

import zarr_device._core as _core
from zarr_device.errors import UsageError

__all__ = ["parse_size", "format_bytes"]

_EXAMPLES = "examples: 1GiB, 512MiB, 256KiB, 2GB, 1048576"


def parse_size(value: Any, *, what: str = "size", minimum: int = 1, maximum: int | None = None) -> int:
    """A byte count from an integer or a string with an optional unit (decimal: kB, MB, GB, TB;
    binary: KiB, MiB, GiB, TiB). Raises :class:`UsageError` naming ``what`` when ``value`` is not
    a size or is below ``minimum`` (or above ``maximum``)."""
    if isinstance(value, bool):
        raise UsageError(f"{what} must be a size ({_EXAMPLES}), not {value!r}")
    size: int | None
    if isinstance(value, str):
        parsed = _core.parse_byte_count(value)
        if parsed is None:
            raise UsageError(f"{what}: {value!r} is not a size ({_EXAMPLES})")
        size = None if parsed < 0 else parsed  # < 0: beyond 64 bits
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
