"""Bounds on what zarr-python's codecs may allocate for arrays the plug-in hands them.

The engine checks every chunk's decoded size against the array's metadata before it allocates.
zarr-python's stdlib-backed numcodecs codecs (``numcodecs.bz2``, ``numcodecs.lzma``), which the
engine lacks, decompress a whole chunk with no such bound: a chunk of a few kilobytes can expand
to gigabytes (a decompression bomb) and end, after taking the memory, in NumPy's "cannot
reshape". For the chains where a chunk's decoded size is known in advance (one such codec as
the only bytes-to-bytes codec, a fixed-size data type, no sharding, no Zarr v2 filters), each
chunk's bytes are first decompressed into a buffer of at most that size plus one byte; a chunk
that would grow past it is a :class:`~zarr_device.errors.CodecError` naming its key before
zarr-python's codec sees it. The check decodes a chunk twice, on a path that is the slow one in
any case (these codecs decode far slower than the engine's).
"""

from __future__ import annotations

import bz2
import lzma
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zarr_device.errors import CodecError

if TYPE_CHECKING:
    from zarr.core.metadata import ArrayMetadata

__all__ = ["BoundedGetter", "decoded_size_guard"]

#: A check of one chunk's bytes against its decoded size: raises, or returns nothing.
Guard = Callable[[bytes, int, str], None]


def _bounded(make: Callable[[], Any], what: str) -> Guard:
    """A guard for a stream format whose decompressor takes ``max_length`` and may hold several
    concatenated streams (as ``bz2.decompress`` and ``lzma.decompress`` accept)."""

    def check(data: bytes, limit: int, key: str) -> None:
        total = 0
        rest = data
        while rest:
            decompressor = make()
            try:
                total += len(decompressor.decompress(rest, max_length=limit - total + 1))
            except (OSError, EOFError, ValueError, lzma.LZMAError):
                return  # not a stream it reads: zarr-python's codec says what is wrong
            if total > limit:
                raise CodecError(
                    f"chunk '{key}': its {what} stream decodes to more than the {limit} bytes a chunk of the "
                    f"array holds ({len(data)} bytes stored): refused before zarr-python's codec decodes it"
                )
            if not decompressor.eof:
                return  # a truncated stream: zarr-python's codec says so
            rest = decompressor.unused_data
            if rest and what == "lzma":
                rest = rest.lstrip(b"\0")  # xz stream padding

    return check


_GUARDS: dict[str, Guard] = {
    "numcodecs.bz2": _bounded(bz2.BZ2Decompressor, "bz2"),
    "bz2": _bounded(bz2.BZ2Decompressor, "bz2"),
    "numcodecs.lzma": _bounded(lzma.LZMADecompressor, "lzma"),
    "lzma": _bounded(lzma.LZMADecompressor, "lzma"),
}


def decoded_size_guard(metadata: ArrayMetadata) -> Guard | None:
    """The guard for an array whose chunks' decoded size is known and whose one compressor is a
    codec of :data:`_GUARDS`; None for every other array."""
    document: dict[str, Any] = dict(metadata.to_dict())
    if metadata.zarr_format == 2:
        compressor = document.get("compressor") or {}
        if document.get("filters"):
            return None
        name = compressor.get("id") if isinstance(compressor, dict) else None
    else:
        codecs = [c for c in document.get("codecs") or () if isinstance(c, dict)]
        names = [c.get("name") for c in codecs]
        # The array->bytes codec "bytes" and one bytes->bytes codec after it (transposes before it
        # keep the size); sharding and anything else: no guard.
        if "bytes" not in names or len(names) - names.index("bytes") != 2:
            return None
        name = names[-1]
    return _GUARDS.get(str(name)) if name else None


class BoundedGetter:
    """A zarr-python ``ByteGetter`` whose whole-chunk reads pass ``guard`` first (for a chunk of
    ``limit`` decoded bytes); everything else is the wrapped getter's."""

    def __init__(self, getter: Any, guard: Guard, limit: int) -> None:
        self._getter = getter
        self._guard = guard
        self._limit = limit

    async def get(self, prototype: Any, byte_range: Any = None) -> Any:
        found = await self._getter.get(prototype=prototype, byte_range=byte_range)
        if found is not None and byte_range is None:
            self._guard(found.to_bytes(), self._limit, str(getattr(self._getter, "path", self._getter)))
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._getter, name)


def chunk_limit(shape: tuple[int, ...], itemsize: int) -> int:
    """The decoded bytes of a chunk of ``shape``."""
    return math.prod(shape) * itemsize
