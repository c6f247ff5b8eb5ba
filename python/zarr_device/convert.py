"""Rewriting a Zarr array or group as a new Zarr v3 store with another codec chain and chunk
layout (``zarr-device convert``). The usual reason: zarr-python and tensorstore write zstd chunks
without a checksum, and reads to a GPU decode a chunk there only when a crc32c vouches for it;
converted once to zstd + crc32c, every chunk decodes on the GPU.

Data moves region by region (whole destination shards or chunks, about ``max_bytes`` at a time)
through the engine's host reads and writes, so memory is bounded by settings, not by the data.
Everything is written into ``<destination>.partial-<random>`` beside the destination, flushed to
disk and renamed into place when complete (``placement``): the destination is the old store or
all of the new one, never a part.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Union

import numpy.typing as npt

from zarr_device.progress import Progress, progress_bar
from zarr_device import _core, placement
from zarr_device.array import Array
from zarr_device.create import create_group
from zarr_device.group import Group
from zarr_device.group import open as open_node
from zarr_device.nodes import join_path
from zarr_device.errors import UsageError, ZarrDeviceError
from zarr_device.sizes import parse_size
from zarr_device.stores import LocalStore, StoreLike, ZarrStoreAdapter, as_store

__all__ = ["convert", "ConvertSummary", "COMPRESSORS", "chunks_for_bytes", "region_shape", "checkpoint_kind"]

#: A chunk or shard layout: None, a byte size (``"2MiB"``, an int) or a shape (-1: whole extent).
Layout = Union[None, int, str, Sequence[int]]
#: Compressors by name (one of COMPRESSORS), or the bytes-to-bytes codecs as Zarr v3 dicts.
Compressors = Union[None, str, Mapping[str, Any], Sequence[Mapping[str, Any]]]

#: The compressors written by name; "none" stores the elements as they are.
COMPRESSORS: tuple[str, ...] = ("zstd", "gzip", "blosc", "none")
# (default, lowest, highest); zstd 1 writes faster than zstd's own default (3), for a little more size.
_LEVELS = {"zstd": (1, -131072, 22), "gzip": (5, 0, 9), "blosc": (5, 0, 9)}


@dataclass(frozen=True)
class ConvertSummary:
    """What a conversion did. ``bytes_read``: the decoded bytes of every array copied;
    ``bytes_written``: the size of the destination's files (chunks and metadata)."""

    source: str
    destination: str
    arrays: int
    groups: int
    bytes_read: int
    bytes_written: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# -- sources ------------------------------------------------------------------------------------
# Every kind of input is read as one SourceTree: nodes, groups before their members, with paths
# relative to the node converted (""). Zarr is the one kind so far; another (a safetensors file, a
# Hugging Face folder) is one more reader giving the same nodes, and one entry in _SOURCE_KINDS.


@dataclass(frozen=True)
class SourceGroup:
    path: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class SourceArray:
    path: str
    shape: tuple[int, ...]
    data_type: str  # a Zarr v3 name
    itemsize: int
    fill_value: Any  # as Zarr v3 JSON
    chunks: tuple[int, ...]  # the source's (inner) chunks, kept unless others are asked for
    attributes: dict[str, Any]
    dimension_names: list[str | None] | None
    read: Callable[[tuple[slice, ...]], npt.NDArray[Any]]


@dataclass(frozen=True)
class SourceTree:
    description: str  # for messages and the summary
    local_root: str | None  # the directory read, when local: nothing may be written into it
    nodes: list[SourceGroup | SourceArray]


def _zarr_nodes(node: Array | Group, relative: str) -> Iterator[SourceGroup | SourceArray]:
    if isinstance(node, Group):
        yield SourceGroup(relative, dict(node.attrs))
        for name in sorted(node):
            yield from _zarr_nodes(node[name], join_path(relative, name))
        return
    yield SourceArray(
        path=relative,
        shape=node.shape,
        data_type=str(node._core.dtype),  # noqa: SLF001 - the package's own
        itemsize=node.dtype.itemsize,
        fill_value=node.fill_value,
        chunks=node.chunks,
        attributes=dict(node.attrs),
        dimension_names=node.metadata.get("dimension_names") if node.zarr_format == 3 else None,
        read=node.read,
    )


def read_zarr(source: StoreLike | Array | Group, path: str) -> SourceTree:
    """A Zarr array or group (v3, or v2) in any store the engine reads, or an opened node."""
    if isinstance(source, (Array, Group)):
        store, path = source.store, join_path(source.path, path)
    else:
        store = as_store(source)
    node = open_node(store, path=path, mode="r")
    root = None
    if isinstance(store, LocalStore):
        root = str(store.root)
    elif isinstance(store, ZarrStoreAdapter) and hasattr(store.store, "root"):
        root = str(store.store.root)
    where = store.handle.describe() + (f" :: /{node.path}" if node.path else "")
    return SourceTree(where, root, list(_zarr_nodes(node, "")))


# Input kinds, tried in order: the first whose test takes the source reads it. Zarr comes last,
# since any path or store may hold Zarr; more specific kinds go before it.
_SOURCE_KINDS: list[tuple[str, Callable[[Any], bool], Callable[[Any, str], SourceTree]]] = [
    ("zarr", lambda source: True, read_zarr),
]


def _local_path(source: Any) -> Path | None:
    if not isinstance(source, (str, os.PathLike)):
        return None
    text = os.fspath(source)
    return None if "://" in text and not text.startswith("file://") else Path(text.removeprefix("file://"))


def _is_model_folder(path: Path) -> bool:
    has_weights = (path / "model.safetensors.index.json").is_file() or (path / "model.safetensors").is_file()
    return path.is_dir() and has_weights and not (path / "zarr.json").exists()


# PyTorch checkpoint conversions (zarr_device.torch.interop): these inputs are not copied node by
# node as Zarr is, but written as a checkpoint (docs/checkpoint-format.md) by the checkpoint
# writer. Tried in order, before _SOURCE_KINDS.
_CHECKPOINT_KINDS: list[tuple[str, Callable[[Path], bool]]] = [
    ("safetensors", lambda path: path.is_file() and path.name.endswith(".safetensors")),
    ("huggingface", _is_model_folder),
    ("torch", lambda path: path.is_file() and path.suffix in (".pt", ".pth", ".bin", ".ckpt")),
]


def checkpoint_kind(source: Any, destination: Any) -> str | None:
    """The checkpoint conversion ``convert`` does from ``source`` to ``destination``: "safetensors",
    "huggingface" or "torch" (into a checkpoint), "to-safetensors" (a checkpoint into a
    ``*.safetensors`` file), or None (Zarr to Zarr)."""
    path = _local_path(source)
    kind = next((k for k, takes in _CHECKPOINT_KINDS if takes(path)), None) if path else None
    dest = _local_path(destination)
    if dest is not None and dest.name.endswith(".safetensors"):
        if kind is not None:
            raise UsageError(f"{source} is a {kind} file or folder, not a checkpoint to write as safetensors")
        return "to-safetensors"
    return kind


def read_source(source: Any, path: str = "") -> SourceTree:
    return next(reader for _kind, takes, reader in _SOURCE_KINDS if takes(source))(source, path)


# -- layout -------------------------------------------------------------------------------------


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


def region_shape(shape: Sequence[int], unit: Sequence[int], itemsize: int, max_bytes: int) -> tuple[int, ...]:
    """The shape of the regions an array is copied in: whole ``unit``s (destination shards or
    chunks), as many as fit in ``max_bytes`` (at least one), grown along the trailing dimensions
    first so that each region is as contiguous as it can be."""
    unit = [min(u, max(1, s)) for u, s in zip(unit, shape)]  # a unit past the edge: what is inside
    region = list(unit)
    budget = max(1, max_bytes // max(1, math.prod(unit) * itemsize))
    for d in reversed(range(len(shape))):
        along = -(-max(1, shape[d]) // unit[d])
        take = min(along, budget)
        region[d] = unit[d] * take
        budget //= take
        if take < along:
            break
    return tuple(region)


def _shape_in_units(spec: Layout, array: SourceArray, unit: tuple[int, ...], what: str) -> tuple[int, ...]:
    """A chunk shape (``unit``: single elements) or shard shape (``unit``: the chunk shape) from a
    byte size (whole units, split along the leading dimensions) or a shape (-1: all of a
    dimension, in whole units)."""
    grid = [-(-max(1, s) // u) for s, u in zip(array.shape, unit)]
    if isinstance(spec, str) or not isinstance(spec, Sequence):
        per = chunks_for_bytes(grid, math.prod(unit) * array.itemsize, parse_size(spec, what=what))
        return tuple(n * u for n, u in zip(per, unit))
    try:
        given = tuple(int(v) for v in spec)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a byte size or a shape, not {spec!r}") from None
    name, n = array.path or "/", len(array.shape)
    if len(given) != n:
        raise UsageError(f"array '{name}' has {n} dimension{'s' * (n != 1)}; {what} {given} has {len(given)}")
    if any(v < 1 and v != -1 for v in given):
        raise UsageError(f"{what} {given}: every extent must be at least 1 (or -1: the whole dimension)")
    shape = tuple(g * u if v == -1 else v for v, g, u in zip(given, grid, unit))
    if any(v % u for v, u in zip(shape, unit)):
        raise UsageError(f"array '{name}': {what} {shape} are not a multiple of its chunks {unit}")
    return shape


def _layout(array: SourceArray, chunks: Layout, shards: Layout) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The destination's chunk shape and shard shape (None: unsharded) for one array."""
    elements = (1,) * len(array.shape)
    chunk_shape = array.chunks if chunks is None else _shape_in_units(chunks, array, elements, "chunks")
    return chunk_shape, None if shards is None else _shape_in_units(shards, array, chunk_shape, "shards")


def _compressor_codecs(compressors: Compressors, level: int | None, itemsize: int) -> list[dict[str, Any]]:
    if compressors is None or compressors == "none":
        if level is not None:
            raise UsageError("level applies to a compressor, and none is chosen")
        return []
    if not isinstance(compressors, str):
        compressors = [compressors] if isinstance(compressors, Mapping) else compressors
        if level is not None:
            raise UsageError("level applies to a compressor given by name, not to codec dicts")
        return [dict(c) for c in compressors]
    if compressors not in _LEVELS:
        raise UsageError(f"unknown compressor {compressors!r}: use one of {', '.join(COMPRESSORS)}")
    default, low, high = _LEVELS[compressors]
    if level is not None and not low <= level <= high:
        raise UsageError(f"{compressors} level must be from {low} to {high}, not {level}")
    chosen = default if level is None else level
    configurations: dict[str, dict[str, Any]] = {
        "zstd": {"level": chosen, "checksum": False},
        "gzip": {"level": chosen},
        "blosc": {"cname": "zstd", "clevel": chosen, "shuffle": "bitshuffle" if itemsize == 1 else "shuffle",
                  "typesize": itemsize, "blocksize": 0},
    }
    return [{"name": compressors, "configuration": configurations[compressors]}]


def _array_document(
    array: SourceArray, compressors: list[dict[str, Any]], checksum: bool,
    chunk_shape: tuple[int, ...], shard_shape: tuple[int, ...] | None,
) -> str:
    """The destination's zarr.json for one array."""
    # One-byte types have no byte order, and the spec leaves it out for them.
    endian = {"configuration": {"endian": "little"}} if array.itemsize > 1 else {}
    codecs = [{"name": "bytes", **endian}, *compressors]
    if checksum and codecs[-1].get("name") != "crc32c":
        codecs.append({"name": "crc32c"})
    if shard_shape is not None:
        index = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(chunk_shape), "codecs": codecs, "index_codecs": index, "index_location": "end"}}]
    document: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(array.shape),
        "data_type": array.data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard_shape or chunk_shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": array.fill_value,
        "codecs": codecs,
        "attributes": array.attributes,
        "storage_transformers": [],
    }
    if array.dimension_names is not None:
        document["dimension_names"] = array.dimension_names
    return json.dumps(document)  # every value came from JSON the engine parsed


# -- the destination ----------------------------------------------------------------------------


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _check_destination(destination: Any, source: SourceTree, overwrite: bool) -> Path:
    dest = placement.local_destination(destination)
    if source.local_root is not None:
        real, root = os.path.realpath(dest), os.path.realpath(source.local_root)
        if _inside(real, root) or _inside(root, real):
            raise UsageError(f"{dest}: the destination must lie outside the source store {root}, and not hold it")
    placement.check_replaceable(dest, overwrite)
    return dest


# -- converting ---------------------------------------------------------------------------------


def _copy(array: SourceArray, document: str, grid: tuple[int, ...], store: LocalStore,
          max_bytes: int, advance: Callable[[int], object]) -> None:
    try:
        target = Array(_core.Array.create(store.handle, array.path, document, False), store, read_only=False)
        if 0 in array.shape:
            return
        region = region_shape(array.shape, grid, array.itemsize, max_bytes)
        for start in itertools.product(*(range(0, s, r) for s, r in zip(array.shape, region))):
            selection = tuple(slice(i, min(i + r, s)) for i, r, s in zip(start, region, array.shape))
            values = array.read(selection)
            target.write(selection, values)
            advance(values.nbytes)
            del values  # let the region go before the next one is read
    except ZarrDeviceError as e:
        raise type(e)(f"converting '{array.path or '/'}': {e}") from e


def convert(
    source: StoreLike | Array | Group,
    destination: str | os.PathLike[str] | LocalStore,
    *,
    path: str = "",
    compressors: Compressors = "zstd",
    level: int | None = None,
    checksum: bool | None = None,
    chunks: Layout = None,
    shards: Layout = None,
    max_bytes: int | str = 256 << 20,
    overwrite: bool = False,
    progress: Progress = True,
) -> ConvertSummary:
    """Rewrites the array or group at ``path`` in ``source`` (a path, a store, or a zarr_device
    Array or Group; Zarr v3 or v2) as a new Zarr v3 store at ``destination``, a local directory:
    every array below it with its data, data type, fill value, dimension names and attributes,
    every group with its attributes. The node converted becomes the destination's root.

    ``compressors``: "zstd" (level 1 unless ``level``), "gzip", "blosc", "none"/None, or codec
    dicts. ``checksum``: end every chunk's codecs with crc32c, which GPU reads need to decode
    chunks on the GPU (None: yes, for arrays). ``chunks``: None keeps each array's chunk shape (the inner chunks of a
    sharded source); a byte size (``"2MiB"``) picks about that many bytes, splitting leading
    dimensions; a shape (-1: the whole dimension) is used as given. ``shards``: None (unsharded),
    a byte size or a shape, in whole chunks. ``max_bytes``: the most one copied region holds,
    unless one shard (or chunk) is larger. ``overwrite``: replace a Zarr store at ``destination``
    once the new one is complete. ``progress``: a bar on stderr (True), nothing (False), or a
    function told of every byte count copied.

    PyTorch checkpoints (docs/checkpoint-format.md): a safetensors file, a Hugging Face model
    folder (``model.safetensors`` or shards with ``model.safetensors.index.json``) or a
    ``torch.save`` file (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) is written as a checkpoint, and a
    checkpoint is written as one safetensors file when ``destination`` ends in ``.safetensors``
    (zarr_device.torch.interop; needs torch and safetensors). Only ``compressors`` ("zstd" or
    none), ``checksum`` (into a checkpoint: None keeps the checkpoint's default, a crc32c with zstd
    and sizes only without, as ``zarr_device.torch.save``; True adds a crc32c to uncompressed
    chunks), ``overwrite`` and ``progress`` apply to those.

    The destination appears (or is replaced) at once and complete, or not at all: a failure
    leaves it as it was and removes the partial copy. Threads and in-flight memory come from
    :func:`zarr_device.set_config`. Raises UsageError for bad options, an existing destination or
    one inside the source; errors while copying name the array.
    """
    kind = checkpoint_kind(source, destination)
    if kind is not None:
        options = {"path": path, "level": level, "chunks": chunks, "shards": shards}
        try:
            from zarr_device.torch import interop
        except ImportError as e:
            raise UsageError(f"converting {kind} checkpoints needs PyTorch and safetensors: {e}") from None
        summary: ConvertSummary = interop.convert(
            kind, source, destination, options, compressors, checksum, overwrite, progress
        )
        return summary
    started = time.perf_counter()
    tree = read_source(source, path)
    dest = _check_destination(destination, tree, overwrite)
    region_bytes = parse_size(max_bytes, what="max_bytes")
    # Every array's layout is settled before anything is written, so a bad option fails at once.
    plans: list[tuple[SourceArray, str, tuple[int, ...]] | SourceGroup] = []
    for node in tree.nodes:
        if isinstance(node, SourceArray):
            chunk_shape, shard_shape = _layout(node, chunks, shards)
            codecs = _compressor_codecs(compressors, level, node.itemsize)
            document = _array_document(node, codecs, checksum is not False, chunk_shape, shard_shape)
            plans.append((node, document, shard_shape or chunk_shape))
        else:
            plans.append(node)
    arrays = [plan[0] for plan in plans if isinstance(plan, tuple)]
    total = sum(math.prod(a.shape) * a.itemsize for a in arrays)
    partial = placement.make_partial(dest)
    try:
        store = LocalStore(partial)
        with progress_bar(total, progress, "converting") as advance:
            for plan in plans:
                if isinstance(plan, SourceGroup):
                    create_group(store, path=plan.path, attributes=plan.attributes)
                else:
                    _copy(*plan, store, region_bytes, advance)
        written = placement.finish_files(partial)
        placement.place(partial, dest, overwrite, "converted store")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    elapsed = time.perf_counter() - started
    return ConvertSummary(tree.description, str(dest), len(arrays), len(plans) - len(arrays), total, written, elapsed)
