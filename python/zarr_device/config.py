"""Process-wide I/O settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["IoConfig", "get_config", "set_config"]


@dataclass(frozen=True)
class IoConfig:
    """How reads and writes run.

    ``threads``: worker threads fetching and decoding chunks (0: one per core).
    ``max_inflight_bytes``: host memory that fetched and decoded chunks may hold at once; it bounds
    a read's memory beyond its output, whatever the array's size.
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


_config = IoConfig(
    threads=int(os.environ.get("ZARR_DEVICE_THREADS", "0")),
    max_inflight_bytes=int(os.environ.get("ZARR_DEVICE_MAX_INFLIGHT_BYTES", str(256 << 20))),
    gpu_decode=os.environ.get("ZARR_DEVICE_GPU_DECODE", "checked"),  # type: ignore[arg-type]
    staging_bytes=int(os.environ.get("ZARR_DEVICE_STAGING_BYTES", str(768 << 20))),
    staging_slots=int(os.environ.get("ZARR_DEVICE_STAGING_SLOTS", "12")),
    gpu_encode=os.environ.get("ZARR_DEVICE_GPU_ENCODE", "on"),  # type: ignore[arg-type]
)


def get_config() -> IoConfig:
    """The settings in force."""
    return _config


def set_config(**changes: Any) -> IoConfig:
    """Changes settings (``threads=``, ``max_inflight_bytes=``, ``gpu_decode=``, ``gpu_encode=``,
    ``staging_bytes=``, ``staging_slots=``) and returns the previous ones."""
    global _config
    from zarr_device.errors import UsageError

    if changes.get("gpu_decode", "checked") not in ("checked", "trusted", "off"):
        raise UsageError("gpu_decode must be 'checked', 'trusted' or 'off'")
    if changes.get("gpu_encode", "on") not in ("on", "off"):
        raise UsageError("gpu_encode must be 'on' or 'off'")
    previous = _config
    _config = replace(_config, **changes)
    return previous
