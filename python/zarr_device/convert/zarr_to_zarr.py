"""Rewriting a Zarr array or group as a new Zarr v3 store with another codec chain and chunk
layout (``zarr-device convert``). The usual reason: zarr-python and tensorstore write zstd chunks
without a checksum, and reads to a GPU decode a chunk there only when a crc32c vouches for it;
converted once to zstd + crc32c, every chunk decodes on the GPU.

Data moves region by region (whole destination shards or chunks, about ``max_bytes`` at a time)
through the engine's host reads and writes, so memory is bounded by settings, not by the data.
Only the regions that overlap a chunk (or shard) the source stores are copied, where its store
can list them: a sparse array, or one declaring 2^40 elements and storing none, costs what it
holds, not what its shape declares; the rest is the fill value, left unstored.
Everything is written into ``<destination>.partial-<random>`` beside the destination, flushed to
disk and renamed into place when complete (:mod:`zarr_device.io.atomic_trees`): the destination is the old store or
all of the new one, never a part.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union

import zarr_device._core as _core
from zarr_device.io import atomic_trees
from zarr_device.core.array import Array
from zarr_device.convert.shared import (
    ConvertSummary,
    SourceArray,
    SourceGroup,
    check_destination,
    checkpoint_kind,
    read_source,
)
from zarr_device.core.create import chunks_for_bytes, weight_codecs
from zarr_device.basics.numpy_dtypes import data_type_json
from zarr_device.errors import UsageError, ZarrDeviceError
from zarr_device.core.group import Group, create_group
from zarr_device.core.nodes import check_attributes, json_text
from zarr_device.basics.progress import Progress, progress_bar, wanted
from zarr_device.basics.sizes import format_bytes, parse_size
from zarr_device.io.stores import LocalStore, StoreLike

__all__ = ["convert", "COMPRESSORS", "region_shape"]

#: A chunk or shard layout: None, a byte size (``"2MiB"``, an int) or a shape (-1: whole extent).
Layout = Union[None, int, str, Sequence[int]]
#: Compressors by name (one of COMPRESSORS), or the bytes-to-bytes codecs as Zarr v3 dicts.
Compressors = Union[None, str, Mapping[str, Any], Sequence[Mapping[str, Any]]]

#: The compressors written by name; "none" stores the elements as they are.
COMPRESSORS: tuple[str, ...] = ("zstd", "auto", "gzip", "blosc", "none")
# (default, lowest, highest); zstd 1 writes faster than zstd's own default (3), for a little more size.
# "auto": zstd, after a byte shuffle for floating point types (zarr_device.core.create.weight_codecs).
_LEVELS = {"zstd": (1, -131072, 22), "auto": (1, -131072, 22), "gzip": (5, 0, 9), "blosc": (5, 0, 9)}


# -- layout -------------------------------------------------------------------------------------


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
        target, unit_bytes = parse_size(spec, what=what), math.prod(unit) * array.itemsize
        if target < unit_bytes:
            # A shard holds whole chunks (and a chunk whole elements): one that small cannot be.
            of = f"one of its chunks {unit}" if what == "shards" else "one element"
            raise UsageError(
                f"array '{array.path or '/'}': {what} of {format_bytes(target)} are smaller than "
                f"{of} ({format_bytes(unit_bytes)}); give {what} of at least {format_bytes(unit_bytes)}"
                + (", or smaller chunks" if what == "shards" else ""))
        per = chunks_for_bytes(grid, unit_bytes, target)
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


def _compressor_codecs(compressors: Compressors, level: int | None, itemsize: int,
                       data_type: str) -> list[dict[str, Any]]:
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
    if compressors == "auto":
        return weight_codecs(data_type, chosen)
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
        "data_type": data_type_json(array.data_type),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard_shape or chunk_shape)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": array.fill_value,
        "codecs": codecs,
        "attributes": array.attributes,
        "storage_transformers": [],
    }
    if array.dimension_names is not None:
        document["dimension_names"] = array.dimension_names
    # Every value came from JSON the engine parsed, but not necessarily at this depth (a Zarr v2
    # array's .zattrs is one level shallower than attributes in zarr.json): checked as readers
    # will parse it, before anything is written.
    return json_text(document, f"the metadata of array '{array.path or '/'}'")


# -- converting ---------------------------------------------------------------------------------


#: Above this many declared bytes, an array copied region by region over its whole shape (its
#: store cannot list what it holds) is announced before it is read.
ANNOUNCE_BYTES = 64 << 30


def _regions(array: SourceArray, grid: tuple[int, ...], max_bytes: int) -> tuple[Iterable[tuple[slice, ...]], int, bool]:
    """The regions ``array`` is copied in, the bytes they hold, and whether they are only those
    that overlap what the source stores. A source that lists its stored chunks (or shards) is
    copied only where they lie: each one's box, mapped onto the region grid; every other region
    holds nothing but the fill value, which the destination leaves unstored (as the engine does
    for an all-fill chunk a full copy would write). Other sources: every region of the shape."""
    shape = array.shape
    if 0 in shape:
        return [], 0, True
    region = region_shape(shape, grid, array.itemsize, max_bytes)

    def box(start: Sequence[int]) -> tuple[slice, ...]:
        return tuple(slice(i, min(i + r, s)) for i, r, s in zip(start, region, shape))

    # The regions a full copy would take, each cut down to the box around the stored units it
    # overlaps (widened to whole destination units, ``grid``): only what is stored is read,
    # however much a region declares (a region of a shape that declares 2^32 columns would cover
    # millions of unstored chunks), and no element is read twice (the regions are disjoint).
    found: dict[tuple[int, ...], tuple[list[int], list[int]]] | None = None
    if array.stored is not None:
        try:
            found = {}
            unit = array.stored_shape
            for index in array.stored():
                low = [i * u for i, u in zip(index, unit)]
                high = [min((i + 1) * u, s) for i, u, s in zip(index, unit, shape)]
                if any(lo >= hi for lo, hi in zip(low, high)):
                    continue
                for start in itertools.product(*(range(lo // r * r, hi, r) for lo, hi, r in zip(low, high, region))):
                    cut_low = [max(lo // g * g, b) for lo, g, b in zip(low, grid, start)]
                    cut_high = [min(-(-hi // g) * g, b + r, s) for hi, g, b, r, s in zip(high, grid, start, region, shape)]
                    if start in found:
                        seen_low, seen_high = found[start]
                        cut_low = [min(a, b) for a, b in zip(seen_low, cut_low)]
                        cut_high = [max(a, b) for a, b in zip(seen_high, cut_high)]
                    found[start] = (cut_low, cut_high)
        except (ZarrDeviceError, NotImplementedError, OSError):
            found = None  # the listing failed: every region is read, as for a store that cannot list
    if found is None:
        full = itertools.product(*(range(0, s, r) for s, r in zip(shape, region)))
        return (box(start) for start in full), math.prod(shape) * array.itemsize, False
    boxes = [tuple(slice(lo, hi) for lo, hi in zip(*found[start])) for start in sorted(found)]
    nbytes = sum(math.prod(b.stop - b.start for b in selection) for selection in boxes) * array.itemsize
    return boxes, nbytes, True


def _copy(array: SourceArray, document: str, regions: Iterable[tuple[slice, ...]], store: LocalStore,
          advance: Callable[[int], object]) -> None:
    try:
        target = Array(_core.Array.create(store.handle, array.path, document, False), store, read_only=False)
        for selection in regions:
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
    dest = check_destination(destination, tree, overwrite)
    region_bytes = parse_size(max_bytes, what="max_bytes")
    # Every array's layout is settled before anything is written, so a bad option fails at once.
    plans: list[tuple[SourceArray, str, tuple[int, ...]] | SourceGroup] = []
    for node in tree.nodes:
        if isinstance(node, SourceArray):
            chunk_shape, shard_shape = _layout(node, chunks, shards)
            codecs = _compressor_codecs(compressors, level, node.itemsize, node.data_type)
            document = _array_document(node, codecs, checksum is not False, chunk_shape, shard_shape)
            plans.append((node, document, shard_shape or chunk_shape))
        else:
            check_attributes(node.attributes, f"the attributes of group '{node.path or '/'}'")
            plans.append(node)
    arrays = [plan[0] for plan in plans if isinstance(plan, tuple)]
    # What each array copies (only where the source stores data, when its store lists that),
    # known before anything is read: the progress total counts the bytes actually copied.
    work: dict[int, Iterable[tuple[slice, ...]]] = {}
    total = 0
    for number, plan in enumerate(plans):
        if isinstance(plan, tuple):
            regions, nbytes, listed = _regions(plan[0], plan[2], region_bytes)
            work[number] = regions
            total += nbytes
            if not listed and nbytes > ANNOUNCE_BYTES and (progress is True or (progress is None and wanted(None))):
                print(f"converting '{plan[0].path or '/'}': its store cannot list the chunks it holds, so all "
                      f"{format_bytes(nbytes)} its shape declares is read (fill values where nothing is stored)",
                      file=sys.stderr, flush=True)
    partial = atomic_trees.make_partial(dest)
    try:
        store = LocalStore(partial)
        with progress_bar(total, progress, "converting") as advance:
            for number, plan in enumerate(plans):
                if isinstance(plan, SourceGroup):
                    create_group(store, path=plan.path, attributes=plan.attributes)
                else:
                    _copy(plan[0], plan[1], work[number], store, advance)
        written = atomic_trees.finish_files(partial)
        atomic_trees.place(partial, dest, overwrite, "converted store")
    except BaseException:
        atomic_trees.discard(partial, dest)  # the record last, so that a kill here leaves a proven tree
        raise
    elapsed = time.perf_counter() - started
    return ConvertSummary(tree.description, str(dest), len(arrays), len(plans) - len(arrays), total, written, elapsed)
