"""What the commands share: sizes and counts as argparse types, progress bars."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from zarr_device.basics import sizes
from zarr_device.errors import UsageError
from zarr_device.basics.progress import bar

PROG = "zarr-device"


def parse_size(text: str) -> int:
    """An argparse type: a byte count such as ``1GiB``, ``256KiB``, ``1.5GB`` or ``1048576``
    (the package's one size parser, :func:`zarr_device.basics.sizes.parse_size`)."""
    try:
        return sizes.parse_size(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def compression_ratio(raw: int, stored: int) -> float | None:
    """Decoded bytes per stored byte; None when nothing is stored."""
    return raw / stored if stored > 0 else None


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer no smaller than ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: must be at least {minimum}")
        return value

    return parse


def progress(total: int, desc: str, *, quiet: bool, unit: str = "B") -> Any:
    """A tqdm bar on stderr (hidden with --quiet, and when stderr is not a terminal)."""
    return bar(total, desc, quiet=quiet, unit=unit)
