"""Coordinate selections of plug-in arrays (``z.vindex[rows, cols]``, ``get_coordinate_selection``)
come back as the array the read made, on its device, reshaped there.

zarr-python restores a coordinate selection's shape with ``np.array(result).reshape(...)``. On a
GPU that raises (CuPy and torch refuse to copy to the host unasked), and on the CPU it turns a
torch result into NumPy, which torch's bfloat16 and float8 tensors cannot become. For arrays the
plug-in serves, the result is reshaped by its own framework instead; NumPy results are copied and
reshaped as zarr-python does, and other arrays' reads are zarr-python's.

The wrappers are installed only over functions with the parameters they were written for
(zarr-python 3.1); with any other, zarr-python's behaviour stays.
"""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

import numpy as np

from zarr_device.zarr_plugin.box_reads import BoxReader, wrap_sync_methods

__all__ = ["install", "installed"]

#: The parameters of zarr-python's ``_get_coordinate_selection`` the wrapper was written for.
_EXPECTED_PARAMETERS = ("store_path", "metadata", "codec_pipeline", "config", "selection", "out", "fields", "prototype")
_EXPECTED_SYNC_PARAMETERS = frozenset(("self", "selection", "out", "fields", "prototype"))

_lock = threading.Lock()
_originals: dict[str, Any] = {}


def installed() -> tuple[str, ...]:
    """The coordinate reads of zarr-python that keep plug-in results where they are."""
    return tuple(_originals)


def install() -> tuple[str, ...]:
    """Wraps zarr-python's coordinate reads, the synchronous method of ``zarr.Array`` and the
    function behind ``AsyncArray``'s (once); returns what is wrapped."""
    import zarr.core.array as zarr_array

    with _lock:
        if _originals:
            return installed()
        found = getattr(zarr_array, "_get_coordinate_selection", None)
        if (
            found is not None
            and inspect.iscoroutinefunction(found)
            and tuple(inspect.signature(found).parameters) == _EXPECTED_PARAMETERS
        ):
            _originals["_get_coordinate_selection"] = found
            zarr_array._get_coordinate_selection = _async_read(found)
        wrap_sync_methods(
            zarr_array, {"get_coordinate_selection": "CoordinateIndexer"}, _EXPECTED_SYNC_PARAMETERS, _sync_read, _originals
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
        indexer = indexer_class(selection, self.shape, self.metadata.chunk_grid)
        result = sync(self.async_array._get_selection(indexer=indexer, out=out, fields=fields, prototype=prototype))
        return _shaped(result, indexer.sel_shape)

    return read


def _async_read(function: Any) -> Any:
    @functools.wraps(function)
    async def read(
        store_path: Any,
        metadata: Any,
        codec_pipeline: Any,
        config: Any,
        selection: Any,
        *,
        out: Any = None,
        fields: Any = None,
        prototype: Any = None,
    ) -> Any:
        if not _served(codec_pipeline):
            return await function(
                store_path, metadata, codec_pipeline, config, selection, out=out, fields=fields, prototype=prototype
            )
        import zarr.core.array as zarr_array
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.indexing import CoordinateIndexer

        if prototype is None:
            prototype = default_buffer_prototype()
        indexer = CoordinateIndexer(selection, metadata.shape, metadata.chunk_grid)
        result = await zarr_array._get_selection(
            store_path, metadata, codec_pipeline, config, indexer=indexer, out=out, fields=fields, prototype=prototype
        )
        return _shaped(result, indexer.sel_shape)

    return read
