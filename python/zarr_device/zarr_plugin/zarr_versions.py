"""What the plug-in's fast paths need of zarr-python's private internals, one adapter per range of
zarr-python releases.

The codec pipeline and the buffer classes are zarr-python's public extension points and serve
every release. The fast paths (box reads and writes on the calling thread, coordinate reads kept
on their device: :mod:`box_reads`, :mod:`box_writes`, :mod:`coordinate_reads`) wrap private
functions whose parameters changed between releases:

- zarr-python 3.1: indexers are made from the metadata's chunk grid
  (``metadata.chunk_grid``), and ``zarr.core.array._get_selection(store_path, metadata,
  codec_pipeline, config, indexer, ...)`` reads a selection.
- zarr-python 3.2 to 3.4: the metadata's chunk grid became a description
  (``RegularChunkGridMetadata``, which indexers cannot use); indexers take the array's
  ``ChunkGrid`` (``AsyncArray._chunk_grid``), which ``_get_selection`` now receives before the
  indexer; rectilinear (variable-sized) chunk grids appeared.

:func:`internals` picks the adapter for the installed release: by its version, and only where the
functions have exactly the parameters the adapter was written for. A release outside every range,
or one whose functions differ, gets no wrappers at all: zarr-python's own paths through the
plug-in's pipeline (the same values, slower), with one :class:`UntestedZarrWarning` that names the
version. Nothing here imports zarr-python before :func:`zarr_device.enable` does.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from dataclasses import dataclass
from typing import Any

__all__ = ["ZarrInternals", "UntestedZarrWarning", "internals", "ADAPTERS", "TESTED_RELEASES", "release"]

#: The zarr-python releases the test suite runs against (CI's two legs, and the versions tried by
#: hand before each adapter was written).
TESTED_RELEASES = ("3.1.6", "3.2.1", "3.3.0", "3.4.2")


class UntestedZarrWarning(UserWarning):
    """The installed zarr-python is not one the plug-in's fast paths were written for: reads and
    writes go through zarr-python's own paths and the plug-in's codec pipeline (correct, slower)."""


@dataclass(frozen=True)
class ZarrInternals:
    """How one range of zarr-python releases spells what the fast paths call.

    ``minors``: the ``3.N`` releases the adapter serves; ``selection_parameters``: those of
    ``zarr.core.array._get_selection``; ``grid_in_selection``: whether it takes the array's chunk
    grid (before the indexer)."""

    name: str
    minors: tuple[int, ...]
    selection_parameters: tuple[str, ...]
    grid_in_selection: bool

    def indexer_grid(self, async_array: Any) -> Any:
        """The chunk grid zarr-python's indexers take, for ``async_array`` (a ``zarr.AsyncArray``)."""
        if self.grid_in_selection:
            return async_array._chunk_grid  # noqa: SLF001 (the grid zarr-python's own methods pass)
        return async_array.metadata.chunk_grid

    def selection_arguments(self, async_array: Any, indexer: Any) -> tuple[Any, ...]:
        """The positional arguments of ``_get_selection`` for ``indexer`` of ``async_array``."""
        head = (async_array.store_path, async_array.metadata, async_array.codec_pipeline, async_array.config)
        if self.grid_in_selection:
            return (*head, async_array._chunk_grid, indexer)  # noqa: SLF001
        return (*head, indexer)

    def matches(self, zarr_array_module: Any) -> bool:
        """Whether the installed functions have the parameters this adapter was written for."""
        found = getattr(zarr_array_module, "_get_selection", None)
        if found is None or not inspect.iscoroutinefunction(found):
            return False
        return tuple(inspect.signature(found).parameters) == self.selection_parameters


_COMMON = ("store_path", "metadata", "codec_pipeline", "config")
_TAIL = ("indexer", "prototype", "out", "fields")

#: One adapter per range of releases, oldest first.
ADAPTERS = (
    ZarrInternals("zarr-python 3.1", (1,), (*_COMMON, *_TAIL), grid_in_selection=False),
    ZarrInternals("zarr-python 3.2-3.4", (2, 3, 4), (*_COMMON, "chunk_grid", *_TAIL), grid_in_selection=True),
)


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string ("3.4.2", "3.5.0rc1"), or None when it is not one."""
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "x")
    except (IndexError, ValueError):
        return None


_lock = threading.Lock()
_chosen: list[ZarrInternals | None] = []


def internals() -> ZarrInternals | None:
    """The adapter for the installed zarr-python (decided once), or None: then the fast paths are
    not installed, and one :class:`UntestedZarrWarning` said why."""
    if _chosen:  # decided: every write and coordinate read asks, so no lock once it is
        return _chosen[0]
    with _lock:
        if not _chosen:
            _chosen.append(_choose())
        return _chosen[0]


def _choose() -> ZarrInternals | None:
    import zarr
    import zarr.core.array as zarr_array

    version = str(getattr(zarr, "__version__", "unknown"))
    found = release(version)
    for adapter in ADAPTERS:
        if found is not None and found[0] == 3 and found[1] in adapter.minors:
            if adapter.matches(zarr_array):
                return adapter
            _warn(f"zarr-python {version}'s internals are not those of {adapter.name} that zarr_device was written for")
            return None
    _warn(f"zarr-python {version} is not a release zarr_device was tested with ({', '.join(TESTED_RELEASES)})")
    return None


def _warn(why: str) -> None:
    warnings.warn(
        f"zarr_device: {why}; the plug-in's codec pipeline still serves reads and writes, through "
        "zarr-python's own selection code (the same values, slower: no reads or writes on the "
        "calling thread). Install a tested zarr-python for full speed.",
        UntestedZarrWarning,
        stacklevel=3,
    )
