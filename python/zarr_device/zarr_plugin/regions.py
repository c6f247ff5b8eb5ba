"""zarr-python's batch items (one per chunk: which elements of the chunk, where they go in the
output) as regions of the array the engine reads or writes.

A chunk's selection becomes the smallest strided box of the array that holds it (slices keep
their step, integers and integer arrays their bounds) and a selection into that box with the
chunk selection's NumPy meaning, so that ``box[local]`` is what zarr-python's
``chunk[chunk_selection]`` would be. When every chunk's part is a box and together they tile the
output with one stride per dimension (what basic, block and orthogonal selections of slices and
integers give), the whole batch is one box of the array: :func:`single_box`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ChunkPart", "Region", "chunk_part", "single_box", "tiling_part", "as_slices"]

#: (start, step, count) per dimension, in array coordinates.
Region = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class ChunkPart:
    """What one batch item asks of the array.

    ``region``: the box of the array holding the chunk's selected elements. ``local``: a
    selection into the box's values (``box[local]`` is zarr-python's ``chunk[chunk_selection]``).
    ``out_selection``: where those go in the output, as zarr-python gave it. ``dropped``: per
    dimension, whether an integer selected it (the output has no such dimension). ``basic``: no
    integer arrays were involved.
    """

    region: Region
    local: tuple[Any, ...]
    out_selection: Any
    dropped: tuple[bool, ...]
    basic: bool


_ALL = slice(None)


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def chunk_part(
    origin: Sequence[int], chunk_shape: Sequence[int], chunk_selection: Any, out_selection: Any
) -> ChunkPart | None:
    """The part of the array one batch item selects (None when it selects nothing).
    ``origin``: the chunk's first element in the array; ``chunk_shape``: its extent."""
    selection = chunk_selection if isinstance(chunk_selection, tuple) else (chunk_selection,)
    region: list[tuple[int, int, int]] = []
    local: list[Any] = []
    dropped: list[bool] = []
    basic = True
    for start0, extent, item in zip(origin, chunk_shape, selection):
        if isinstance(item, slice):  # first: what nearly every read has
            start, stop, step = item.indices(extent)
            count = len(range(start, stop, step))
            if count == 0:
                return None
            region.append((start0 + start, step, count))
            local.append(_ALL)
            dropped.append(False)
            continue
        if _is_integer(item):
            region.append((start0 + operator.index(item), 1, 1))
            local.append(0)
            dropped.append(True)
            continue
        dropped.append(False)
        basic = False
        indices = np.asarray(item)
        if indices.dtype == np.bool_:
            indices = np.flatnonzero(indices)
        if indices.size == 0:
            return None
        low, high = int(indices.min()), int(indices.max())
        region.append((start0 + low, 1, high - low + 1))
        local.append(indices - low)
    return ChunkPart(tuple(region), tuple(local), out_selection, tuple(dropped), basic)


def tiling_part(
    coords: Sequence[Sequence[int]],
    grid: Sequence[int],
    selections: Sequence[tuple[Any, Any]],
    out_shape: tuple[int, ...],
) -> ChunkPart | None:
    """A whole batch as one part, when every chunk's selection and output selection are slices of
    step 1 with both bounds given (what zarr-python gives for slices of step 1) and the chunks'
    parts tile the output, shifted alike: what :func:`single_box` finds for such a batch, without
    a part per chunk (a read of a whole array hands over thousands). None otherwise, for the
    general path to decide. ``coords``: each chunk's coordinates in the ``grid``;
    ``selections``: its (chunk selection, output selection).

    Disjoint chunks shifted alike land on disjoint parts of the output, so when each lies inside
    it and their sizes add up to it, they cover it exactly."""
    ndim = len(out_shape)
    if ndim == 0 or len(grid) != ndim:
        return None
    offset: list[int] | None = None
    volume = 0
    for chunk, (chunk_selection, out_selection) in zip(coords, selections):
        if not (isinstance(chunk_selection, tuple) and isinstance(out_selection, tuple)):
            return None
        if len(chunk_selection) != ndim or len(out_selection) != ndim:
            return None
        size = 1
        shift: list[int] = []
        for c, g, inner, outer, extent in zip(chunk, grid, chunk_selection, out_selection, out_shape):
            if not (isinstance(inner, slice) and isinstance(outer, slice)):
                return None
            if inner.step not in (None, 1) or outer.step not in (None, 1):
                return None
            start, stop, out_start, out_stop = inner.start, inner.stop, outer.start, outer.stop
            if start is None or stop is None or out_start is None or out_stop is None:
                return None
            count = stop - start
            if count <= 0 or start < 0 or out_stop - out_start != count or out_start < 0 or out_stop > extent:
                return None
            shift.append(c * g + start - out_start)
            size *= count
        if offset is None:
            offset = shift
        elif shift != offset:
            return None
        volume += size
    if offset is None or volume != math.prod(out_shape) or min(offset) < 0:
        return None
    return ChunkPart(
        tuple((int(at), 1, n) for at, n in zip(offset, out_shape)),
        (_ALL,) * ndim,
        tuple(slice(0, n) for n in out_shape),
        (False,) * ndim,
        True,
    )


def as_slices(region: Region) -> tuple[slice, ...]:
    """A region as the basic selection (slices with steps) that reads it, every dimension kept."""
    return tuple(slice(start, start + step * (count - 1) + 1, step) for start, step, count in region)


def _out_slices(part: ChunkPart, ndim_out: int) -> list[tuple[int, int]] | None:
    """The output slices of a basic part as (start, stop), or None when they are not plain
    slices (a step, an index array) or do not match the part's kept dimensions."""
    selection = part.out_selection if isinstance(part.out_selection, tuple) else (part.out_selection,)
    if len(selection) != ndim_out:
        return None
    bounds: list[tuple[int, int]] = []
    for item in selection:
        if not isinstance(item, slice) or item.step not in (None, 1):
            return None
        if item.start is None or item.stop is None:
            return None
        bounds.append((operator.index(item.start), operator.index(item.stop)))
    return bounds


def single_box(parts: Sequence[ChunkPart], out_shape: tuple[int, ...] | None) -> tuple[int | slice, ...] | None:
    """The basic selection of the array whose result is the whole output of these parts, or None
    when they do not form one box (index arrays, gaps, steps that differ between chunks).
    ``out_shape``: the output's shape, checked against the box's (None: not checked)."""
    if not parts or not all(p.basic for p in parts):
        return None
    dropped = parts[0].dropped
    if any(p.dropped != dropped for p in parts):
        return None
    kept = [d for d, gone in enumerate(dropped) if not gone]
    # Per dimension: the index (dropped) or the array position of output element 0 and the step.
    origin: list[int | None] = [None] * len(dropped)
    steps: list[int | None] = [None] * len(dropped)
    extent = [0] * len(kept)
    volume = 0
    for part in parts:
        bounds = _out_slices(part, len(kept))
        if bounds is None:
            return None
        for d, (start, step, count) in enumerate(part.region):
            if dropped[d]:
                first = start
            else:
                k = kept.index(d)
                out_start, out_stop = bounds[k]
                if out_stop - out_start != count:
                    return None
                first = start - out_start * step
                extent[k] = max(extent[k], out_stop)
                if steps[d] is None:
                    steps[d] = step
                elif steps[d] != step:
                    return None
            if origin[d] is None:
                origin[d] = first
            elif origin[d] != first:
                return None
        volume += math.prod(count for (_, _, count) in part.region)
    if volume != math.prod(extent) or (out_shape is not None and tuple(extent) != tuple(out_shape)):
        return None
    selection: list[int | slice] = []
    for d, gone in enumerate(dropped):
        at = origin[d]
        if at is None or at < 0:
            return None
        if gone:
            selection.append(at)
        else:
            step = steps[d] or 1
            selection.append(slice(at, at + step * (extent[kept.index(d)] - 1) + 1, step))
    return tuple(selection)
