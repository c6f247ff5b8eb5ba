"""Process-wide I/O settings: read from the environment at import, changed with
:func:`set_config`. Every value is checked where it enters; a bad one raises
:class:`~zarr_device.UsageError` naming the setting (or the environment variable)."""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Literal

from zarr_device.errors import UsageError
from zarr_device.sizes import parse_size

__all__ = ["IoConfig", "get_config", "set_config"]


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


def _size(minimum: int) -> Callable[[Any, str], int]:
    return lambda value, what: parse_size(value, what=what, minimum=minimum)


def _choice(*choices: str) -> Callable[[Any, str], str]:
    def parse(value: Any, what: str) -> str:
        if value not in choices:
            raise UsageError(f"{what} must be {' or '.join(map(repr, choices))}, not {value!r}")
        return str(value)

    return parse


# How each setting's values are checked; its environment variable is ZARR_DEVICE_<NAME>.
_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "threads": _count(0, 4096),
    "max_inflight_bytes": _size(1),
    "gpu_decode": _choice("checked", "trusted", "off"),
    "staging_bytes": _size(2 << 20),
    "staging_slots": _count(1, 256),
    "gpu_encode": _choice("on", "off"),
}


@dataclass(frozen=True)
class IoConfig:
    """How reads and writes run.

    ``threads``: worker threads fetching and decoding chunks (0: one per core).
    ``max_inflight_bytes``: host memory that fetched and decoded chunks (and the intermediate
    buffers of their codecs) may hold at once; it bounds a read's memory beyond its output,
    whatever the array's size. Sizes take units: ``"256MiB"``.
    ``gpu_decode``: which compressed chunks reads to a CUDA device decode on the GPU. nvCOMP trusts
    its input, and corrupt data can fault the GPU context, so by default ("checked") only chunks a
    crc32c checksum vouches for (verified on the CPU first) decode there; "trusted" sends every
    chunk nvCOMP can decode after framing checks (for data you trust); "off" decodes on the CPU.
    """

    threads: int = 0
    max_inflight_bytes: int = 256 << 20
    gpu_decode: Literal["checked", "trusted", "off"] = "checked"
    #: Pinned host memory that chunk bytes pass through on their way to a GPU, in this many slots
    #: (filled, copied and decoded in turn), each allocated on first use and kept; a change
    #: reallocates on the next read. A read's GPU memory beyond its output is at most twice this:
    #: a copy of each slot, and as much for nvCOMP's decoding, whose speed grows with it.
    staging_bytes: int = 768 << 20
    staging_slots: int = 12
    #: Writes from CUDA device memory: "on" compresses zstd chunks on the GPU (nvCOMP; standard
    #: frames, the codec's level not applied); "off" compresses on CPU threads (the level applied).
    gpu_encode: Literal["on", "off"] = "on"

    def __post_init__(self) -> None:
        # Every way a configuration is made (set_config, replace, IoConfig(...)) checks it.
        for name, parse in _PARSERS.items():
            object.__setattr__(self, name, parse(getattr(self, name), name))


assert set(_PARSERS) == {f.name for f in fields(IoConfig)}


def _from_environment() -> IoConfig:
    values: dict[str, Any] = {}
    for name, parse in _PARSERS.items():
        variable = "ZARR_DEVICE_" + name.upper()
        if variable in os.environ:
            values[name] = parse(os.environ[variable], f"the environment variable {variable}")
    return IoConfig(**values)


_config = _from_environment()


def get_config() -> IoConfig:
    """The settings in force."""
    return _config


def set_config(**changes: Any) -> IoConfig:
    """Changes settings (``threads=``, ``max_inflight_bytes=``, ``gpu_decode=``, ``gpu_encode=``,
    ``staging_bytes=``, ``staging_slots=``) and returns the previous ones. Sizes take units
    (``"256MiB"``). Raises UsageError naming the setting when a value is invalid; nothing
    changes then."""
    global _config
    for name in changes:
        if name not in _PARSERS:
            raise UsageError(f"unknown setting {name!r}: the settings are {', '.join(_PARSERS)}")
    previous = _config
    _config = replace(_config, **changes)
    return previous
