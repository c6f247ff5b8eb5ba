"""Creating Zarr v3 arrays (their metadata: codec chains, chunking, fill values) and groups."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union

import numpy as np

from zarr_device import _core
from zarr_device.array import Array
from zarr_device.dtypes import float_fill_from_json, float_fill_to_json, to_numpy_dtype, to_zarr_name
from zarr_device.errors import UsageError
from zarr_device.group import Group
from zarr_device.nodes import CreateMode, join_path, node_path, write_json
from zarr_device.stores import StoreLike, as_store

__all__ = ["create", "create_group", "Compressors"]

Compressors = Union[None, str, Mapping[str, Any], Sequence[Mapping[str, Any]]]


def _fill_value_json(value: Any, dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "c" or isinstance(value, complex):
        c = complex(0 if value is None else value)
        half = np.dtype(f"f{dtype.itemsize // 2}") if dtype.kind == "c" else np.dtype(np.float64)
        return [float_fill_to_json(c.real, half), float_fill_to_json(c.imag, half)]
    if value is None:
        return False if dtype.kind == "b" else (0.0 if dtype.kind in "fV" else 0)
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind in "iu":
        return int(value)
    # A NaN keeps its payload (as hex), as tensorstore and zarr-python (zarr_dtypes) write it.
    return float_fill_to_json(float_fill_from_json(value, dtype) if isinstance(value, str) else value, dtype)


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
    chunk_key_encoding: Mapping[str, Any] | None = None,
    mode: CreateMode = "w-",
) -> Array:
    """Creates a Zarr v3 array and returns it open for reading and writing.

    ``dtype``: a NumPy dtype or a Zarr name ("bfloat16", "float8_e4m3fn", ...); a big-endian NumPy
    dtype stores big-endian chunks. ``chunks``: the chunk shape (inner chunks when ``shards`` is
    given). ``compressors``: None, "zstd", "gzip", "blosc", or codec dicts. ``codecs``: the whole
    v3 codec chain, overriding ``compressors``, ``shards`` and ``order``. ``mode``: "w-" fails
    when a node exists at ``path``; "w" replaces it.
    """
    if mode not in ("w", "w-"):
        raise UsageError(f"mode {mode!r} is not 'w' or 'w-'")
    engine_store = as_store(store)
    shape_t = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    name = to_zarr_name(dtype)
    np_dtype = to_numpy_dtype(name)
    big_endian = not isinstance(dtype, str) and np.dtype(dtype).byteorder == ">"
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
        "data_type": name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(grid)}},
        "chunk_key_encoding": dict(chunk_key_encoding)
        if chunk_key_encoding is not None
        else {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": _fill_value_json(fill_value, np_dtype),
        "codecs": chain,
        "attributes": dict(attributes or {}),
        "storage_transformers": [],
    }
    if dimension_names is not None:
        document["dimension_names"] = list(dimension_names)
    try:
        text = json.dumps(document, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise UsageError(f"the array's metadata must be JSON (attributes included): {e}") from None
    core = _core.Array.create(engine_store.handle, node_path(path), text, mode == "w")
    return Array(core, engine_store, read_only=False)


def create_group(
    store: StoreLike,
    *,
    path: str = "",
    attributes: Mapping[str, Any] | None = None,
    mode: CreateMode = "w-",
) -> Group:
    """Creates a Zarr v3 group. ``mode``: "w-" fails when a node exists at ``path``; "w" replaces it."""
    engine_store = as_store(store)
    path = node_path(path)
    exists = any(engine_store.handle.exists(join_path(path, m)) for m in ("zarr.json", ".zarray", ".zgroup"))
    if exists and mode == "w-":
        raise UsageError(f"a node already exists at '{path}' (use mode='w' to replace it)")
    if exists:
        # Only Zarr data goes: this node and the nodes below it, never other files.
        _core.erase_node(engine_store.handle, path)
    document = {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes or {})}
    write_json(engine_store, join_path(path, "zarr.json"), document)
    return Group(engine_store, path, document, read_only=False)
