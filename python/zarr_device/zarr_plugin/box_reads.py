"""Reads of one box of an array, without zarr-python's batch of chunks.

Before it calls a codec pipeline, zarr-python describes a read as one item per chunk (the chunk's
store path, its spec, its selections), which the engine then parses back into the box the selection
is. For thousands of small chunks that is a large share of the whole read at the engine's GPU speed
(the benchmark notebook, "The plug-in on 4 GiB arrays; reads of one box"). When the selection is one
box of the array (slices and integers: ``z[...]``, ``z.blocks[...]``, orthogonal slices), the engine
reads the box straight into zarr-python's output, and no batch is built.

zarr-python's function that reads a selection (``zarr.core.array._get_selection``) is wrapped:
arrays served by a pipeline with ``read_box`` and selections that are one box go to it; every
other read goes to zarr-python's function unchanged, and so does a box the pipeline declines (an
array it falls back on, metadata that changed), so that fallback, its warning and its errors stay
where they are.

The synchronous reads of ``zarr.Array`` (``get_basic_selection``, ``get_orthogonal_selection``,
``get_block_selection``, which ``z[...]``, ``z.oindex[...]`` and ``z.blocks[...]`` call) are wrapped
too: zarr-python runs every one of them as a coroutine on its one event-loop thread, and the
engine's read then goes to a worker thread and back, three hand-offs between threads per read (which
cost more than a 1 MiB chunk's read: the benchmark notebook, "Synchronous reads and writes through
the plug-in on the calling thread"), and every thread's reads queue on that one loop (Dask's tasks,
a loader's threads). A box of a plug-in array is read on the calling thread instead, which waits for
it in any case; the engine lets the GIL go while it reads, so that reads from many threads run at
once. Everything else calls zarr-python's method.

What differs between zarr-python releases (the chunk grid indexers take, ``_get_selection``'s
parameters) comes from the adapter :func:`zarr_versions.internals` picks; a release none was
written for gets no wrappers, and reads take the batch path: the same values, a little slower.
Reads of arrays whose config refuses missing chunks (``read_missing_chunks=False``, zarr-python
3.2+) take zarr-python's path, which checks for them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from zarr_device.zarr_plugin.regions import Region
from zarr_device.zarr_plugin.zarr_versions import ZarrInternals, internals

if TYPE_CHECKING:
    from zarr.core.buffer import NDBuffer

__all__ = [
    "BoxReader",
    "box_of",
    "install",
    "installed",
    "on_zarr_loop",
    "refuses_missing_chunks",
    "sync_installed",
    "wrap_sync_methods",
]

#: ``zarr.Array``'s synchronous reads that are wrapped, with the indexer each makes of its selection.
_SYNC_READS = {
    "get_basic_selection": "BasicIndexer",
    "get_orthogonal_selection": "OrthogonalIndexer",
    "get_block_selection": "BlockIndexer",
}
#: Their parameters, in any order, as the wrappers were written for.
_EXPECTED_SYNC_PARAMETERS = frozenset(("self", "selection", "out", "fields", "prototype"))

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
_internals: ZarrInternals | None = None


_sync_originals: dict[str, Any] = {}


def installed() -> bool:
    """Whether reads of one box skip zarr-python's batch."""
    return _original is not None


def sync_installed() -> tuple[str, ...]:
    """The synchronous reads of ``zarr.Array`` that read boxes on the calling thread."""
    return tuple(_sync_originals)


def install() -> bool:
    """Wraps zarr-python's ``_get_selection`` and ``zarr.Array``'s synchronous reads (once, where
    :func:`zarr_versions.internals` knows the release); returns whether they are in place."""
    global _original, _internals
    import zarr.core.array as zarr_array

    with _lock:
        if _original is not None:
            return True
        adapter = internals()
        if adapter is None:
            return False
        _internals = adapter
        _original = zarr_array._get_selection
        setattr(zarr_array, "_get_selection", _get_selection_with_grid if adapter.grid_in_selection else _get_selection)
        wrap_sync_methods(zarr_array, _SYNC_READS, _EXPECTED_SYNC_PARAMETERS, _sync_read, _sync_originals)
        return True


def refuses_missing_chunks(config: Any) -> bool:
    """Whether an array's config asks for an error on chunks that are not stored (zarr-python
    3.2+: ``read_missing_chunks=False``), which only zarr-python's own read path checks."""
    return getattr(config, "read_missing_chunks", True) is False


def wrap_sync_methods(
    zarr_array: Any,
    methods: dict[str, str],
    expected: frozenset[str],
    wrap: Callable[[Any, Any], Any],
    originals: dict[str, Any],
) -> None:
    """Replaces each of ``zarr.Array``'s ``methods`` (name: the name of the indexer class it
    makes) by ``wrap(method, indexer_class)``, where the method has the ``expected`` parameters
    (in any order) and zarr-python the indexer class; records the methods replaced in
    ``originals``."""
    import zarr.core.indexing as indexing

    array_class = getattr(zarr_array, "Array", None)
    if array_class is None or not hasattr(array_class, "async_array"):
        return
    for name, indexer_name in methods.items():
        method = getattr(array_class, name, None)
        indexer_class = getattr(indexing, indexer_name, None)
        if method is None or indexer_class is None:
            continue
        if frozenset(inspect.signature(method).parameters) != expected:
            continue
        originals[name] = method
        setattr(array_class, name, wrap(method, indexer_class))


def _reads_boxes(pipeline: Any) -> bool:
    """Whether ``pipeline`` is a :class:`BoxReader` (asked of its class: a protocol's isinstance
    takes microseconds, which every read would pay)."""
    return callable(getattr(type(pipeline), "read_box", None))


def on_zarr_loop() -> bool:
    """Whether this thread runs zarr-python's event loop (whose own calls must stay on it)."""
    import zarr.core.sync as zarr_sync

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return running is getattr(zarr_sync, "loop", [None])[0]


def _sync_read(method: Any, indexer_class: Any) -> Any:
    """``method`` (a synchronous read of ``zarr.Array``), reading a box of a plug-in array on the
    calling thread."""

    @functools.wraps(method)
    def read(self: Any, selection: Any = Ellipsis, *, out: Any = None, fields: Any = None, prototype: Any = None) -> Any:
        async_array = self.async_array
        pipeline = async_array.codec_pipeline
        adapter = _internals
        if (
            fields
            or adapter is None
            or not _reads_boxes(pipeline)
            or refuses_missing_chunks(async_array.config)
            or on_zarr_loop()
        ):
            return method(self, selection, out=out, fields=fields, prototype=prototype)
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        if prototype is None:
            prototype = default_buffer_prototype()
        indexer = indexer_class(selection, self.shape, adapter.indexer_grid(async_array))
        found = box_of(indexer)
        if found is not None:
            result = _read_box(
                pipeline, async_array.store_path, async_array.metadata, async_array.config, indexer, found, prototype, out
            )
            if result is not None:
                return result
        # What zarr-python's method does with the indexer made already (the box was declined).
        arguments = adapter.selection_arguments(async_array, indexer)
        return sync(_original(*arguments, prototype=prototype, out=out, fields=fields))

    return read


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
    """zarr-python 3.1's ``_get_selection``: a box of a plug-in array goes to its pipeline,
    everything else to zarr-python's function."""
    arguments = (store_path, metadata, codec_pipeline, config, indexer)
    return await _select(arguments, prototype, out, fields)


async def _get_selection_with_grid(
    store_path: Any,
    metadata: Any,
    codec_pipeline: Any,
    config: Any,
    chunk_grid: Any,
    indexer: Any,
    *,
    prototype: Any,
    out: Any = None,
    fields: Any = None,
) -> Any:
    """zarr-python 3.2+'s ``_get_selection`` (the array's chunk grid before the indexer)."""
    arguments = (store_path, metadata, codec_pipeline, config, chunk_grid, indexer)
    return await _select(arguments, prototype, out, fields)


async def _select(arguments: tuple[Any, ...], prototype: Any, out: Any, fields: Any) -> Any:
    """What both wrappers do with ``_get_selection``'s positional ``arguments``."""
    store_path, metadata, codec_pipeline, config = arguments[:4]
    indexer = arguments[-1]
    found = None
    if not fields and _reads_boxes(codec_pipeline) and not refuses_missing_chunks(config):
        found = box_of(indexer)  # zarr-python passes [] or None for no fields
    if found is not None:
        # The engine (and stores it calls back into zarr-python's event loop for) runs off the loop.
        result = await asyncio.to_thread(
            _read_box, codec_pipeline, store_path, metadata, config, indexer, found, prototype, out
        )
        if result is not None:
            return result
    return await _original(*arguments, prototype=prototype, out=out, fields=fields)


def _read_box(
    pipeline: BoxReader,
    store_path: Any,
    metadata: Any,
    config: Any,
    indexer: Any,
    found: tuple[Box, Region],
    prototype: Any,
    out: Any,
) -> Any:
    """The box ``found`` (of ``indexer``) read by the pipeline, as zarr-python returns it; None
    when the pipeline declines. Not on zarr-python's event loop: stores written in Python call
    back into it."""
    from zarr.core.buffer import NDBuffer
    from zarr.core.indexing import BasicIndexer

    if out is not None and (not isinstance(out, NDBuffer) or tuple(out.shape) != tuple(indexer.shape)):
        return None  # zarr-python's function says what is wrong with it
    if out is None:
        if metadata.zarr_format == 2:
            dtype, order = metadata.dtype.to_native_dtype(), metadata.order
        else:
            dtype, order = metadata.data_type.to_native_dtype(), config.order
        out = prototype.nd_buffer.empty(shape=indexer.shape, dtype=dtype, order=order)
    box, region = found
    if not pipeline.read_box(store_path.store, store_path.path, box, region, out):
        return None
    if isinstance(indexer, BasicIndexer) and indexer.shape == ():
        return out.as_scalar()
    return out.as_ndarray_like()
