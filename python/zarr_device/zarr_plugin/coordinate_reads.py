"""Coordinate selections of plug-in arrays (``z.vindex[rows, cols]``, ``get_coordinate_selection``)
come back as the array the read made, on its device, reshaped there.

zarr-python restores a coordinate selection's shape with ``np.array(result).reshape(...)``. On a
GPU that raises (CuPy and torch refuse to copy to the host unasked), and on the CPU it turns a
torch result into NumPy, which torch's bfloat16 and float8 tensors cannot become. For arrays the
plug-in serves, the result is reshaped by its own framework instead; NumPy results are copied and
reshaped as zarr-python does, and other arrays' reads are zarr-python's.

The wrappers are installed over ``AsyncArray.get_coordinate_selection`` and
``Array.get_coordinate_selection``, only where :func:`zarr_versions.internals` knows the
zarr-python release and the methods have the parameters they were written for; otherwise
zarr-python's behaviour stays.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

import numpy as np

from zarr_device.zarr_plugin.box_reads import BoxReader, wrap_sync_methods
from zarr_device.zarr_plugin.zarr_versions import internals

__all__ = ["install", "installed"]

#: The parameters of both methods, as the wrappers were written for.
_EXPECTED_PARAMETERS = frozenset(("self", "selection", "out", "fields", "prototype"))

_lock = threading.Lock()
_originals: dict[str, Any] = {}


def installed() -> tuple[str, ...]:
    """The coordinate reads of zarr-python that keep plug-in results where they are."""
    return tuple(_originals)


def install() -> tuple[str, ...]:
    """Wraps zarr-python's coordinate reads, the synchronous method of ``zarr.Array`` and the
    coroutine of ``zarr.AsyncArray`` (once); returns what is wrapped."""
    import zarr.core.array as zarr_array

    with _lock:
        if _originals or internals() is None:
            return installed()
        async_class = getattr(zarr_array, "AsyncArray", None)
        found = getattr(async_class, "get_coordinate_selection", None)
        if (
            found is not None
            and inspect.iscoroutinefunction(found)
            and frozenset(inspect.signature(found).parameters) == _EXPECTED_PARAMETERS
        ):
            _originals["AsyncArray.get_coordinate_selection"] = found
            async_class.get_coordinate_selection = _async_read(found)  # type: ignore[union-attr]
        wrap_sync_methods(
            zarr_array, {"get_coordinate_selection": "CoordinateIndexer"}, _EXPECTED_PARAMETERS, _sync_read, _originals
        )
        return installed()


def _served(pipeline: Any) -> bool:
    # The plug-in's pipeline is the one that reads boxes (box_reads.BoxReader): known by what it
    # does, so that this module need not import the pipeline, which installs it.
    return isinstance(pipeline, BoxReader)


def _shaped(result: Any, shape: Any) -> Any:
    """``result`` with the selection's shape: NumPy arrays copied and reshaped as zarr-python
    does, any other framework's arrays reshaped by it, where they are."""
    if not hasattr(result, "shape"):
        return result
    if isinstance(result, np.ndarray):
        return np.array(result).reshape(shape)
    return result.reshape(tuple(shape))


def _sync_read(method: Any, indexer_class: Any) -> Any:
    @functools.wraps(method)
    def read(self: Any, selection: Any, *, out: Any = None, fields: Any = None, prototype: Any = None) -> Any:
        if not _served(self.async_array.codec_pipeline):
            return method(self, selection, out=out, fields=fields, prototype=prototype)
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        if prototype is None:
            prototype = default_buffer_prototype()
        adapter = internals()
        if adapter is None:
            return method(self, selection, out=out, fields=fields, prototype=prototype)
        indexer = indexer_class(selection, self.shape, adapter.indexer_grid(self.async_array))
        result = sync(self.async_array._get_selection(indexer=indexer, out=out, fields=fields, prototype=prototype))
        return _shaped(result, indexer.sel_shape)

    return read


def _async_read(method: Any) -> Any:
    @functools.wraps(method)
    async def read(
        self: Any,
        selection: Any,
        *,
        out: Any = None,
        fields: Any = None,
        prototype: Any = None,
    ) -> Any:
        adapter = internals()
        if adapter is None or not _served(self.codec_pipeline):
            return await method(self, selection, out=out, fields=fields, prototype=prototype)
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.indexing import CoordinateIndexer

        if prototype is None:
            prototype = default_buffer_prototype()
        indexer = CoordinateIndexer(selection, self.metadata.shape, adapter.indexer_grid(self))
        result = await self._get_selection(indexer=indexer, out=out, fields=fields, prototype=prototype)
        return _shaped(result, indexer.sel_shape)

    return read
