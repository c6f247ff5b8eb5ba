"""Whether the engine serves an array, decided from zarr-python's metadata before any chunk is
read: the engine parses the array's own metadata documents (in a memory store) and so says, in
its own words, which data type, codec or setting it lacks; the data type it reads must also be
the one zarr-python hands out; a codec zarr.config points at an implementation of its own keeps
it. Arrays it does not serve go to zarr-python's codecs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.core.buffer import cpu as cpu_buffer
from zarr.core.config import config

from zarr_device.core.group import open_array
from zarr_device.errors import ZarrDeviceError
from zarr_device.io.stores import MemoryStore
from zarr_device.zarr_plugin.locate import key_layout

if TYPE_CHECKING:
    from zarr.core.metadata import ArrayMetadata

__all__ = ["unsupported_reason", "native_dtype"]

# "array '' in memory://: " before the engine's reason.
_STAND_IN_CONTEXT = re.compile(r"^array '[^']*' in memory://[^:]*: ")
# "'zarr.json' in memory:// is not valid JSON": the document's name is enough.
_STAND_IN = re.compile(r" in memory://\d*")


def native_dtype(metadata: ArrayMetadata) -> np.dtype[Any]:
    """The NumPy dtype zarr-python hands out for the array."""
    zdtype = metadata.dtype if metadata.zarr_format == 2 else metadata.data_type
    return np.dtype(zdtype.to_native_dtype())


def _codec_names(codecs: Any) -> Iterator[str]:
    """The names of the codecs in a Zarr v3 ``codecs`` list, sharding's inner ones included."""
    for codec in codecs or ():
        if isinstance(codec, dict):
            yield str(codec.get("name"))
            configuration = codec.get("configuration") or {}
            yield from _codec_names(configuration.get("codecs"))
            yield from _codec_names(configuration.get("index_codecs"))


def _reconfigured_codec(metadata: ArrayMetadata) -> str | None:
    """A codec of the array that zarr.config points at another implementation than zarr-python's
    own (``codecs.<name>``): the engine's codec would silently take its place."""
    if metadata.zarr_format != 3:
        return None
    chosen = config.get("codecs", {})  # names hold dots ("numcodecs.delta"): not config keys
    for name in _codec_names(metadata.to_dict().get("codecs")):
        default = next((d["codecs"][name] for d in config.defaults if name in d.get("codecs", {})), None)
        if chosen.get(name) != default:
            return f"zarr.config sets codecs.{name} to {chosen.get(name)!r} (not zarr-python's {default!r})"
    return None


def unsupported_reason(metadata: ArrayMetadata) -> str | None:
    """Why the engine cannot read this array as zarr-python would (None: it can)."""
    reconfigured = _reconfigured_codec(metadata)
    if reconfigured is not None:
        return reconfigured
    try:
        dtype = native_dtype(metadata)
    except (TypeError, ValueError) as e:
        return f"data type not known to NumPy ({e})"
    if dtype.hasobject or dtype.kind in "OSUT" or dtype.fields is not None:
        return f"data type {dtype} (variable-length, string or structured values)"
    if key_layout(metadata) is None:
        return "chunk key encoding other than 'default' and 'v2'"
    store = MemoryStore()
    try:
        for key, document in metadata.to_buffer_dict(cpu_buffer.buffer_prototype).items():
            store.handle.set(key, document.to_bytes())
        engine = open_array(store)
    except ZarrDeviceError as e:
        # The engine names where it read the documents: this stand-in store, not the user's,
        # which the caller's message names.
        return _STAND_IN.sub("", _STAND_IN_CONTEXT.sub("", str(e), count=1))
    except (TypeError, ValueError) as e:  # metadata zarr-python cannot write out as JSON
        return f"metadata: {e}"
    if engine.dtype != dtype.newbyteorder("="):
        return f"data type {dtype} (the engine reads {engine.dtype})"
    return None
