"""Creating Zarr v3 arrays: their metadata (codec chains, chunking, fill values) and their first document."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, Union

import numpy as np

import zarr_device._core as _core
from zarr_device.core.array import Array
from zarr_device.basics.numpy_dtypes import (
    ML_DTYPES_NAMES,
    data_type_json,
    float_fill_from_json,
    float_fill_to_json,
    to_numpy_dtype,
    to_zarr_name,
)
from zarr_device.errors import FormatError, UsageError
from zarr_device.core.nodes import CreateMode, EngineStore, join_path, json_text, node_path
from zarr_device.io.stores import StoreLike, as_store

__all__ = ["create", "Compressors", "ChunkKeyEncodingLike", "chunks_for_bytes", "weight_codecs"]

Compressors = Union[None, str, Mapping[str, Any], Sequence[Mapping[str, Any]]]


class _ChunkKeyEncodingObject(Protocol):
    """zarr-python's chunk key encodings (``zarr.core.chunk_key_encodings.ChunkKeyEncoding``)."""

    def to_dict(self) -> dict[str, Any]: ...


#: What ``chunk_key_encoding=`` takes: what zarr-python's ``create_array`` and ``create`` take.
ChunkKeyEncodingLike = Union[None, str, tuple[str, str], Mapping[str, Any], _ChunkKeyEncodingObject]

# The encodings zarr-device writes, and the separator each has when none is given (zarr-python's).
_DEFAULT_SEPARATORS = {"default": "/", "v2": "."}


def _chunk_key_encoding_json(value: ChunkKeyEncodingLike) -> dict[str, Any]:
    """``chunk_key_encoding`` in the one form Zarr v3 metadata has, ``{"name": ..., "configuration":
    {"separator": ...}}``, from any form zarr-python takes: None (the default, "/"), a name
    ("default", "v2"), a (name, separator) tuple, ``{"name": ..., "separator": ...}``, the
    metadata form (the configuration optional), or a zarr-python ChunkKeyEncoding. UsageError for
    anything else: a form written as given that readers take differently is silently wrong data."""
    if value is None:
        return {"name": "default", "configuration": {"separator": "/"}}
    given = value
    if not isinstance(value, (str, tuple, Mapping)) and callable(getattr(value, "to_dict", None)):
        value = value.to_dict()
    separators: list[Any] = []
    if isinstance(value, str):
        name: Any = value
    elif isinstance(value, tuple) and len(value) == 2:
        name, separator = value
        separators.append(separator)
    elif isinstance(value, Mapping) and set(value) <= {"name", "separator", "configuration"}:
        name = value.get("name")
        if "separator" in value:
            separators.append(value["separator"])
        config = value.get("configuration")
        if config is not None:
            if not isinstance(config, Mapping) or not set(config) <= {"separator"}:
                raise UsageError(
                    f"chunk_key_encoding {given!r}: its configuration may hold a separator ('/' or '.') "
                    "and nothing else"
                )
            if "separator" in config:
                separators.append(config["separator"])
    else:
        raise UsageError(
            f"chunk_key_encoding {given!r} is not one zarr-device knows: give a name ('default' or "
            "'v2'), a (name, separator) tuple, {'name': ..., 'separator': '/' or '.'} or "
            "{'name': ..., 'configuration': {'separator': ...}}"
        )
    if not isinstance(name, str) or name not in _DEFAULT_SEPARATORS:
        raise UsageError(
            f"chunk_key_encoding {given!r}: the name must be 'default' or 'v2' (the encodings of Zarr v3)"
        )
    if any(s not in ("/", ".") for s in separators) or len(set(separators)) > 1:
        raise UsageError(f"chunk_key_encoding {given!r}: the separator must be one of '/' and '.'")
    separator = separators[0] if separators else _DEFAULT_SEPARATORS[name]
    return {"name": name, "configuration": {"separator": separator}}


def _kind(store: EngineStore, path: str) -> str | None:
    try:
        return _core.node_kind(store.handle, path)
    except FormatError:
        return "array"  # metadata that does not parse: a node all the same (erase_node knows)


def erase_nodes_below(store: EngineStore, path: str) -> None:
    """Removes every Zarr node below ``path``, not the one at it: the arrays and groups in its
    directories at any depth, whether the directories between have metadata or not (their
    metadata and the chunks their key encodings name, as ``_core.erase_node``). Files of other
    programs stay; directories left empty by it go. The walk is iterative (a deep tree cannot
    exhaust the stack), and each array's chunks go before its directory is listed, so the chunks
    are never walked."""
    handle = store.handle
    emptied: set[str] = set()  # directories below which a node was removed

    def erase(node: str) -> None:
        _core.erase_node(handle, node)
        parent = node
        while parent != path:
            parent = parent.rpartition("/")[0]
            if parent in emptied:
                break
            emptied.add(parent)

    todo: list[tuple[str, bool]] = [(path, False)]  # (directory, whether its members are done)
    while todo:
        current, done = todo.pop()
        if done:
            if current == path:
                continue
            if _kind(store, current) == "group":
                erase(current)  # its members went before it: the engine finds none to recurse into
            elif current in emptied and not handle.list_dir(current):
                handle.erase_prefix(current)
            continue
        if current != path and _kind(store, current) == "array":
            erase(current)  # its chunks and metadata; what remains of its directory is walked
        todo.append((current, True))
        for name in reversed(handle.list_dir(current)):
            child = join_path(current, name)
            if not handle.exists(child):  # a directory (a value is a file, never walked)
                todo.append((child, False))


def _fill_value_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "c" or isinstance(value, complex):
        c = complex(0 if value is None else value)
        half = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else np.dtype(np.float64)
        return [float_fill_to_json(c.real, half), float_fill_to_json(c.imag, half)]
    if dtype.kind in "mM":  # counts of the unit; NaT (the least int64) by default, as zarr-python
        return int(np.asarray("NaT" if value is None else value).astype(dtype).view(np.int64))
    if value is None:
        return False if dtype.kind == "b" else (0.0 if dtype.kind in "fV" else 0)
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    # A NaN keeps its payload (as hex), as tensorstore and zarr-python (zarr_plugin.data_types) write it.
    return float_fill_to_json(float_fill_from_json(value, dtype) if isinstance(value, str) else value, dtype)


#: Zarr data types of floating point numbers of two bytes or more, by their size: weights of these
#: types have their bytes shuffled before zstd in :func:`weight_codecs`, which stores such weights
#: smaller than zstd alone (BENCHMARKS.md, Checkpoint layouts for weights).
_SHUFFLED_TYPES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def weight_codecs(data_type: str, level: int = 1) -> list[dict[str, Any]]:
    """The compressors that store weights of ``data_type`` (a Zarr v3 name) smallest for what
    they cost to decode: for floating point types of two bytes or more, numcodecs' byte shuffle
    of the values (sign and exponent bytes together, mantissa bytes together) and then zstd at
    ``level``; for other types zstd alone. Plain zarr-python reads both."""
    zstd = {"name": "zstd", "configuration": {"level": level, "checksum": False}}
    if data_type not in _SHUFFLED_TYPES:
        return [zstd]
    return [{"name": "numcodecs.shuffle", "configuration": {"elementsize": _SHUFFLED_TYPES[data_type]}}, zstd]


def _compressor_codecs(compressors: Compressors, itemsize: int) -> list[dict[str, Any]]:
    if compressors is None:
        return []
    if isinstance(compressors, str):
        presets: dict[str, dict[str, Any]] = {
            "zstd": {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
            "gzip": {"name": "gzip", "configuration": {"level": 5}},
            "blosc": {
                "name": "blosc",
                "configuration": {
                    "cname": "zstd",
                    "clevel": 5,
                    "shuffle": "bitshuffle" if itemsize == 1 else "shuffle",
                    "typesize": itemsize,
                    "blocksize": 0,
                },
            },
            "crc32c": {"name": "crc32c"},
        }
        if compressors not in presets:
            raise UsageError(f"unknown compressor {compressors!r}: use one of {sorted(presets)}")
        return [presets[compressors]]
    if isinstance(compressors, Mapping):
        return [dict(compressors)]
    return [dict(c) for c in compressors]


def _default_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    # Halve the largest dimension until a chunk is at most 1 MiB: a size that keeps many chunks in
    # flight without making partial reads expensive.
    chunks = [max(1, s) for s in shape]
    while math.prod(chunks) * itemsize > (1 << 20) and max(chunks) > 1:
        i = chunks.index(max(chunks))
        chunks[i] = (chunks[i] + 1) // 2
    return tuple(chunks)


def chunks_for_bytes(shape: Sequence[int], itemsize: int, target: int) -> tuple[int, ...]:
    """A chunk shape of at most about ``target`` bytes (at least one element) that splits the
    leading dimensions only: trailing dimensions stay whole while they fit, so each chunk is one
    contiguous run of the C-ordered array. The chunks along the split dimension are made even
    (1000 rows in chunks of at most 128 give 8 chunks of 125, not 7 of 128 and one of 104)."""
    elements = max(1, target // max(1, itemsize))
    extents = [max(1, s) for s in shape]
    chunks: list[int] = []
    for d, extent in enumerate(extents):
        inner = math.prod(extents[d + 1 :])
        if inner <= elements:
            most = min(extent, elements // inner)
            chunks.append(-(-extent // -(-extent // most)))
            return tuple(chunks + extents[d + 1 :])
        chunks.append(1)
    return tuple(chunks)


def create(
    store: StoreLike,
    *,
    path: str = "",
    shape: Sequence[int] | int,
    dtype: Any,
    chunks: Sequence[int] | None = None,
    shards: Sequence[int] | None = None,
    compressors: Compressors = "zstd",
    codecs: Sequence[Mapping[str, Any]] | None = None,
    fill_value: Any = None,
    order: Literal["C", "F"] = "C",
    dimension_names: Sequence[str | None] | None = None,
    attributes: Mapping[str, Any] | None = None,
    chunk_key_encoding: ChunkKeyEncodingLike = None,
    mode: CreateMode = "w-",
) -> Array:
    """Creates a Zarr v3 array and returns it open for reading and writing.

    ``dtype``: a NumPy dtype (or its string, ">f4", "datetime64[ms]") or a Zarr name ("bfloat16",
    "float8_e4m3fn", ...); a big-endian one stores big-endian chunks. ``chunks``: the chunk shape (inner chunks when ``shards`` is
    given). ``compressors``: None, "zstd", "gzip", "blosc", or codec dicts. ``codecs``: the whole
    v3 codec chain, overriding ``compressors``, ``shards`` and ``order``. ``chunk_key_encoding``:
    "default" (keys ``c/0/0``, the default) or "v2" (``0.0``), in any form zarr-python's
    ``create_array`` takes (``{"name": "default", "separator": "."}``, ...), stored in the form of
    Zarr v3 metadata. ``mode``: "w-" fails when a node exists at ``path``; "w" replaces it: the
    node at ``path`` and every Zarr node below it go (files of other programs stay).
    """
    if mode not in ("w", "w-"):
        raise UsageError(f"mode {mode!r} is not 'w' or 'w-'")
    key_encoding = _chunk_key_encoding_json(chunk_key_encoding)
    engine_store = as_store(store)
    shape_t = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    name = to_zarr_name(dtype)
    np_dtype = to_numpy_dtype(name)
    # ">f4" asks for big-endian chunks as np.dtype(">f4") does; names NumPy lacks have no order.
    big_endian = not (isinstance(dtype, str) and dtype in ML_DTYPES_NAMES) and np.dtype(dtype).byteorder == ">"
    chunks_t = tuple(int(c) for c in chunks) if chunks is not None else _default_chunks(shape_t, np_dtype.itemsize)
    if codecs is None:
        chain: list[dict[str, Any]] = []
        if order == "F" and len(shape_t) > 1:
            chain.append({"name": "transpose", "configuration": {"order": list(range(len(shape_t)))[::-1]}})
        elif order not in ("C", "F"):
            raise UsageError(f"order {order!r} is not 'C' or 'F'")
        chain.append({"name": "bytes", "configuration": {"endian": "big" if big_endian else "little"}})
        chain += _compressor_codecs(compressors, np_dtype.itemsize)
        if shards is not None:
            chain = [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": list(chunks_t),
                        "codecs": chain,
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                        "index_location": "end",
                    },
                }
            ]
    else:
        chain = [dict(c) for c in codecs]
    grid = tuple(int(s) for s in shards) if shards is not None and codecs is None else chunks_t
    document: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape_t),
        "data_type": data_type_json(name),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(grid)}},
        "chunk_key_encoding": key_encoding,
        "fill_value": _fill_value_json(fill_value, np_dtype),
        "codecs": chain,
        "attributes": dict(attributes or {}),
        "storage_transformers": [],
    }
    if dimension_names is not None:
        document["dimension_names"] = list(dimension_names)
    text = json_text(document, "the array's metadata (attributes included)")  # as readers would check it
    path = node_path(path)
    core = _core.Array.create(engine_store.handle, path, text, mode == "w")
    if mode == "w":  # the engine replaced the node at the path; what was below it goes too
        erase_nodes_below(engine_store, path)
    return Array(core, engine_store, read_only=False)
