"""Process-wide I/O settings. The engine holds them, with one table of every setting's default,
environment variable (``ZARR_DEVICE_<NAME>``), documentation and valid values
(cpp/src/basics/settings.cpp); it reads the environment when zarr_device is imported, and every
read and write starts from the values in force, which :func:`set_config` changes. Every value is
checked where it enters; a bad one raises :class:`~zarr_device.UsageError` naming the setting (or
the environment variable)."""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable, Literal

import zarr_device._core as _core
from zarr_device.errors import UsageError
from zarr_device.basics.sizes import format_bytes, parse_size

__all__ = ["IoConfig", "get_config", "set_config"]

# The engine's table, by name: {"name", "variable", "kind", "default", "default_text", "minimum",
# "maximum", "zero_is_automatic", "choices", "doc"}.
_TABLE: dict[str, dict[str, Any]] = {row["name"]: row for row in _core.settings_table()}


def _count(minimum: int, maximum: int) -> Callable[[Any, str], int]:
    def parse(value: Any, what: str) -> int:
        if isinstance(value, bool):
            raise UsageError(f"{what} must be an integer, not {value!r}")
        try:
            number = int(value.strip()) if isinstance(value, str) else operator.index(value)
        except (TypeError, ValueError):
            raise UsageError(f"{what} must be an integer, not {value!r}") from None
        if not minimum <= number <= maximum:
            raise UsageError(f"{what} must be from {minimum} to {maximum}, not {number}")
        return number

    return parse


def _size(minimum: int, maximum: int, zero_is_automatic: bool) -> Callable[[Any, str], int]:
    def parse(value: Any, what: str) -> int:
        if not zero_is_automatic:
            return parse_size(value, what=what, minimum=minimum, maximum=maximum)
        size = parse_size(value, what=what, minimum=0, maximum=maximum)
        if 0 < size < minimum:
            raise UsageError(f"{what} must be 0 (automatic) or at least {format_bytes(minimum)}, not {value!r}")
        return size

    return parse


def _choice(*choices: str) -> Callable[[Any, str], str]:
    def parse(value: Any, what: str) -> str:
        if value not in choices:
            names = ", ".join(map(repr, choices[:-1])) + " or " if len(choices) > 1 else ""
            raise UsageError(f"{what} must be {names}{choices[-1]!r}, not {value!r}")
        return str(value)

    return parse


def _parser(row: dict[str, Any]) -> Callable[[Any, str], Any]:
    if row["kind"] == "count":
        return _count(row["minimum"], row["maximum"])
    if row["kind"] == "size":
        return _size(row["minimum"], row["maximum"], row["zero_is_automatic"])
    return _choice(*row["choices"])


# How each setting's Python values are checked: the table's kinds and ranges.
_PARSERS: dict[str, Callable[[Any, str], Any]] = {name: _parser(row) for name, row in _TABLE.items()}


@dataclass(frozen=True)
class IoConfig:
    # The types are written here for type checkers; the defaults, ranges and documentation are
    # the engine's (see the docstring made below).
    threads: int = _TABLE["threads"]["default"]
    max_inflight_bytes: int = _TABLE["max_inflight_bytes"]["default"]
    gpu_decode: Literal["checked", "trusted", "off", "isolated"] = _TABLE["gpu_decode"]["default"]
    staging_bytes: int = _TABLE["staging_bytes"]["default"]
    decode_bytes: int = _TABLE["decode_bytes"]["default"]
    decoder_bytes: int = _TABLE["decoder_bytes"]["default"]
    staging_slots: int = _TABLE["staging_slots"]["default"]
    gpu_encode: Literal["on", "off", "auto"] = _TABLE["gpu_encode"]["default"]
    decode_sharing: Literal["auto", "off"] = _TABLE["decode_sharing"]["default"]
    zstd_block_bytes: int = _TABLE["zstd_block_bytes"]["default"]

    def __post_init__(self) -> None:
        # Every way a configuration is made (set_config, replace, IoConfig(...)) checks it.
        for name, parse in _PARSERS.items():
            object.__setattr__(self, name, parse(getattr(self, name), name))


IoConfig.__doc__ = "How reads and writes run (sizes take units: ``\"256MiB\"``).\n\n" + "\n\n".join(
    f"``{name}`` (default ``{row['default_text']}``, environment variable ``{row['variable']}``): "
    f"{row['doc']}"
    for name, row in _TABLE.items()
)

assert set(_PARSERS) == {f.name for f in fields(IoConfig)}

# Read once here so that a bad environment variable fails the import, naming the variable.
_core.settings()


def get_config() -> IoConfig:
    """The settings in force."""
    return IoConfig(**_core.settings())


def set_config(**changes: Any) -> IoConfig:
    """Changes settings (``threads=``, ``max_inflight_bytes=``, ``gpu_decode=``, ``gpu_encode=``,
    ``staging_bytes=``, ``decode_bytes=``, ``decoder_bytes=``, ``staging_slots=``, ``decode_sharing=``,
    ``zstd_block_bytes=``) for the reads and writes started afterwards, and
    returns the previous ones. Sizes take units (``"256MiB"``). Raises UsageError naming the
    setting when a value is invalid; nothing changes then."""
    for name in changes:
        if name not in _PARSERS:
            raise UsageError(f"unknown setting {name!r}: the settings are {', '.join(_PARSERS)}")
    previous = get_config()
    _core.set_settings(asdict(replace(previous, **changes)))
    return previous
