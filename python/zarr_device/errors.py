"""The exceptions raised by zarr-device.

Every error the engine raises is an instance of :class:`ZarrDeviceError`; each subclass also derives
from the built-in exception a caller would expect (``IndexError`` for a bad selection, ``OSError``
for a failing store, ...). Messages name the array and, where one is involved, the chunk key.
"""

from __future__ import annotations

__all__ = [
    "ZarrDeviceError",
    "FormatError",
    "MissingChunkError",
    "CodecError",
    "ChecksumError",
    "StoreError",
    "NodeNotFoundError",
    "SelectionError",
    "UsageError",
    "DeviceError",
    "OutOfMemoryError",
]


class ZarrDeviceError(Exception):
    """Base class of every error raised by zarr-device."""


class FormatError(ZarrDeviceError, ValueError):
    """Invalid or unsupported metadata: data type, codec, chunk grid, shape, fill value."""


class MissingChunkError(FormatError):
    """A chunk (or shard) file that a checkpoint records as written is not in the store: a
    checkpoint lists the files it left out (all zeros), so a missing one is damage, not zeros.
    The message names the tensor and the chunk key. Plain Zarr arrays keep Zarr's rule (a
    missing chunk reads as the fill value) and never raise it."""


class CodecError(ZarrDeviceError, ValueError):
    """A chunk's bytes could not be decoded: corrupt, truncated or of the wrong size."""


class ChecksumError(CodecError):
    """A checksum (crc32c) stored with a chunk does not match its bytes."""


class StoreError(ZarrDeviceError, OSError):
    """The store failed to read or write a key."""


class NodeNotFoundError(ZarrDeviceError, FileNotFoundError):
    """No array or group exists at the path."""


class SelectionError(ZarrDeviceError, IndexError):
    """A selection is malformed or reaches outside the array."""


class UsageError(ZarrDeviceError, ValueError):
    """An argument is invalid, or the call is not allowed (writing to a read-only array, ...)."""


class DeviceError(ZarrDeviceError):
    """A device could not be used."""


class OutOfMemoryError(ZarrDeviceError, MemoryError):
    """An allocation failed."""
