"""Writes of one box of an array from the calling thread, without zarr-python's event loop.

zarr-python runs every synchronous write (``z[...] = v``, ``z.oindex[...] = v``,
``z.blocks[...] = v``) as a coroutine on its one event-loop thread, which describes the write as
one item per chunk and hands the plug-in's pipeline the batch, which then writes it on a worker
thread: three hand-offs between threads a write (a 1 MiB chunk took far longer through the
plug-in than the engine's own write: the benchmark notebook, "Synchronous reads and writes through
the plug-in on the calling thread"), and the writes of every thread queue on that one loop.
``zarr.Array``'s three synchronous writes of a selection are
wrapped: a box of a plug-in array (slices and integers, as :func:`box_reads.box_of` finds it)
whose values are already what zarr-python would make of them (an array of the selection's shape
and of the array's own data type: zarr-python converts nothing then) is written on the calling
thread by the pipeline's ``write_box``. Everything else calls zarr-python's method unchanged:
scalars and values it converts, index arrays, masks, Zarr v2 arrays, ``write_empty_chunks``
(zarr-python stores chunks of fill value, which the plug-in's batch path does too), a call on
zarr-python's own loop thread, and a box the pipeline declines (an array zarr-python's codecs
serve, whose warning comes from that path).

The wrappers are installed only where :func:`zarr_versions.internals` knows the zarr-python
release (it gives the chunk grid indexers take) and over methods with the parameters they were
written for; otherwise writes take the batch path: the same result, slower.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from zarr_device.zarr_plugin.box_reads import Box, box_of, on_zarr_loop, wrap_sync_methods
from zarr_device.zarr_plugin.regions import Region
from zarr_device.zarr_plugin.zarr_versions import internals

if TYPE_CHECKING:
    from zarr.core.buffer import NDBuffer

__all__ = ["BoxWriter", "install", "installed"]

#: ``zarr.Array``'s synchronous writes that are wrapped, with the indexer each makes of its selection.
_SYNC_WRITES = {
    "set_basic_selection": "BasicIndexer",
    "set_orthogonal_selection": "OrthogonalIndexer",
    "set_block_selection": "BlockIndexer",
}
#: Their parameters, in any order, as the wrappers were written for.
_EXPECTED_PARAMETERS = frozenset(("self", "selection", "value", "fields", "prototype"))


@runtime_checkable
class BoxWriter(Protocol):
    """A codec pipeline that writes one box of its array from values of the box's shape."""

    def write_box(self, store: Any, path: str, box: Box, region: Region, value: NDBuffer) -> bool:
        """Writes ``value`` into ``box`` (``region``: the same as (start, step, count) per
        dimension) of the array at ``path`` in ``store``; False when the batch path must serve
        the write."""
        ...


_lock = threading.Lock()
_originals: dict[str, Any] = {}


def installed() -> tuple[str, ...]:
    """The synchronous writes of ``zarr.Array`` that write boxes on the calling thread."""
    return tuple(_originals)


def install() -> tuple[str, ...]:
    """Wraps ``zarr.Array``'s synchronous writes (once); returns the ones wrapped."""
    import zarr.core.array as zarr_array

    with _lock:
        if not _originals and internals() is not None:
            wrap_sync_methods(zarr_array, _SYNC_WRITES, _EXPECTED_PARAMETERS, _sync_write, _originals)
        return installed()


def _writes_boxes(pipeline: Any) -> bool:
    """Whether ``pipeline`` is a :class:`BoxWriter` (asked of its class, which is cheaper than a
    protocol's isinstance)."""
    return callable(getattr(type(pipeline), "write_box", None))


def _unconverted(value: Any, dtype: np.dtype[Any], shape: tuple[int, ...]) -> bool:
    """Whether zarr-python would write ``value`` as it is: an array (not a scalar) of the array's
    own data type and, here, of the selection's shape (no broadcasting)."""
    if np.isscalar(value):
        return False
    value_dtype = getattr(value, "dtype", None)
    if getattr(value_dtype, "name", None) != dtype.name:
        return False
    return tuple(getattr(value, "shape", ())) == shape


def _sync_write(method: Any, indexer_class: Any) -> Any:
    """``method`` (a synchronous write of ``zarr.Array``), writing a box of a plug-in array from
    the calling thread."""

    @functools.wraps(method)
    def write(self: Any, selection: Any, value: Any, *, fields: Any = None, prototype: Any = None) -> None:
        async_array = self.async_array
        pipeline = async_array.codec_pipeline
        metadata, config = async_array.metadata, async_array.config
        if (
            fields
            or not _writes_boxes(pipeline)
            or metadata.zarr_format != 3
            or config.write_empty_chunks
            or on_zarr_loop()
        ):
            method(self, selection, value, fields=fields, prototype=prototype)
            return
        adapter = internals()
        if adapter is None:  # not installed then; a wrapper kept from before cannot know the grid
            method(self, selection, value, fields=fields, prototype=prototype)
            return
        indexer = indexer_class(selection, self.shape, adapter.indexer_grid(async_array))
        found = box_of(indexer)
        if found is None or not _unconverted(value, metadata.data_type.to_native_dtype(), tuple(indexer.shape)):
            method(self, selection, value, fields=fields, prototype=prototype)
            return
        from zarr.core.buffer import default_buffer_prototype

        if prototype is None:
            prototype = default_buffer_prototype()
        box, region = found
        store_path = async_array.store_path
        if not pipeline.write_box(store_path.store, store_path.path, box, region, prototype.nd_buffer.from_ndarray_like(value)):
            method(self, selection, value, fields=fields, prototype=prototype)

    return write
