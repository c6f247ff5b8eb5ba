"""Process-wide I/O settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["IoConfig", "get_config", "set_config"]


@dataclass(frozen=True)
class IoConfig:
    """How reads and writes run.

    ``threads``: worker threads fetching and decoding chunks (0: one per core).
    ``max_inflight_bytes``: host memory that fetched and decoded chunks may hold at once; it bounds
    a read's memory beyond its output, whatever the array's size.
    """

    threads: int = 0
    max_inflight_bytes: int = 256 << 20


_config = IoConfig(
    threads=int(os.environ.get("ZARR_DEVICE_THREADS", "0")),
    max_inflight_bytes=int(os.environ.get("ZARR_DEVICE_MAX_INFLIGHT_BYTES", str(256 << 20))),
)


def get_config() -> IoConfig:
    """The settings in force."""
    return _config


def set_config(**changes: Any) -> IoConfig:
    """Changes settings (``threads=``, ``max_inflight_bytes=``) and returns the previous ones."""
    global _config
    previous = _config
    _config = replace(_config, **changes)
    return previous
