"""Reads of one box of an array, without zarr-python's batch of chunks.

Before it calls a codec pipeline, zarr-python describes a read as one item per chunk (the chunk's
store path, its spec, its selections): about 15 us a chunk, which the engine then parses back into
the box the selection is. For 4096 chunks of 1 MiB that is 60 ms, a third of the whole read at the
engine's GPU speed. When the selection is one box of the array (slices and integers: ``z[...]``,
``z.blocks[...]``, orthogonal slices), the engine reads the box straight into zarr-python's output,
and no batch is built.

zarr-python's function that reads a selection (``zarr.core.array._get_selection``) is wrapped:
arrays served by a pipeline with ``read_box`` and selections that are one box go to it; every
other read goes to zarr-python's function unchanged, and so does a box the pipeline declines (an
array it falls back on, metadata that changed), so that fallback, its warning and its errors stay
where they are. The wrapper is installed only over a function with the parameters it was written
for (zarr-python 3.1); with any other, reads take the batch path: the same values, a little slower.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from zarr_device.zarr_plugin.regions import Region

if TYPE_CHECKING:
    from zarr.core.buffer import NDBuffer

__all__ = ["BoxReader", "box_of", "install", "installed"]

#: The parameters of zarr-python's ``_get_selection`` the wrapper was written for.
_EXPECTED_PARAMETERS = ("store_path", "metadata", "codec_pipeline", "config", "indexer", "prototype", "out", "fields")

Box = tuple[int | slice, ...]


@runtime_checkable
class BoxReader(Protocol):
    """A codec pipeline that reads one box of its array into zarr-python's output buffer."""

    def read_box(self, store: Any, path: str, box: Box, region: Region, out: NDBuffer) -> bool:
        """Reads ``box`` (``region``: the same as (start, step, count) per dimension) of the array
        at ``path`` in ``store`` into ``out``; False when the batch path must serve the read."""
        ...


def box_of(indexer: Any) -> tuple[Box, Region] | None:
    """The box an indexer of zarr-python selects, as a selection the engine reads and as a region,
    or None when it is not one box (index arrays, masks, coordinates, dropped axes, nothing at all,
    a 0-d array)."""
    from zarr.core.indexing import IntDimIndexer, SliceDimIndexer

    if getattr(indexer, "drop_axes", ()):
        return None
    dims = getattr(indexer, "dim_indexers", None)
    if not dims:
        return None
    box: list[int | slice] = []
    region: list[tuple[int, int, int]] = []
    shape: list[int] = []
    for dim in dims:
        kind = type(dim)
        if kind is SliceDimIndexer:
            count = int(dim.nitems)
            if count <= 0:
                return None
            start, step = int(dim.start), int(dim.step)
            box.append(slice(start, start + step * (count - 1) + 1, step))
            region.append((start, step, count))
            shape.append(count)
        elif kind is IntDimIndexer:
            at = int(dim.dim_sel)
            box.append(at)
            region.append((at, 1, 1))
        else:
            return None
    if tuple(shape) != tuple(indexer.shape):
        return None
    return tuple(box), tuple(region)


_lock = threading.Lock()
_original: Any = None


def installed() -> bool:
    """Whether reads of one box skip zarr-python's batch."""
    return _original is not None


def install() -> bool:
    """Wraps zarr-python's ``_get_selection`` (once); returns whether the wrapper is in place."""
    global _original
    import zarr.core.array as zarr_array

    with _lock:
        if _original is not None:
            return True
        found = getattr(zarr_array, "_get_selection", None)
        if found is None or not inspect.iscoroutinefunction(found):
            return False
        if tuple(inspect.signature(found).parameters) != _EXPECTED_PARAMETERS:
            return False
        _original = found
        zarr_array._get_selection = _get_selection
        return True


async def _get_selection(
    store_path: Any,
    metadata: Any,
    codec_pipeline: Any,
    config: Any,
    indexer: Any,
    *,
    prototype: Any,
    out: Any = None,
    fields: Any = None,
) -> Any:
    if not fields and isinstance(codec_pipeline, BoxReader):  # zarr-python passes [] or None for none
        found = box_of(indexer)
        if found is not None and (out is None or tuple(getattr(out, "shape", ())) == tuple(indexer.shape)):
            result = await _read_box(codec_pipeline, store_path, metadata, config, indexer, found, prototype, out)
            if result is not None:
                return result
    return await _original(
        store_path, metadata, codec_pipeline, config, indexer, prototype=prototype, out=out, fields=fields
    )


async def _read_box(
    pipeline: BoxReader,
    store_path: Any,
    metadata: Any,
    config: Any,
    indexer: Any,
    found: tuple[Box, Region],
    prototype: Any,
    out: Any,
) -> Any:
    """The selection read by the pipeline, as zarr-python returns it; None when it declines."""
    from zarr.core.buffer import NDBuffer
    from zarr.core.indexing import BasicIndexer

    if out is not None and not isinstance(out, NDBuffer):
        return None  # zarr-python's function says what is wrong with it
    if out is None:
        if metadata.zarr_format == 2:
            dtype, order = metadata.dtype.to_native_dtype(), metadata.order
        else:
            dtype, order = metadata.data_type.to_native_dtype(), config.order
        out = prototype.nd_buffer.empty(shape=indexer.shape, dtype=dtype, order=order)
    box, region = found
    # The engine (and stores it calls back into zarr-python's event loop for) runs off the loop.
    if not await asyncio.to_thread(pipeline.read_box, store_path.store, store_path.path, box, region, out):
        return None
    if isinstance(indexer, BasicIndexer) and indexer.shape == ():
        return out.as_scalar()
    return out.as_ndarray_like()
