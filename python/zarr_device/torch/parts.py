"""Tensor-parallel slices (``load(..., shard_plan=, rank=, world_size=)``): which part of each
tensor a rank reads, so that it reads only the chunks its part touches, as selections in the one
read_many pipeline; and the bytes a selection makes a read decode."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import torch

from zarr_device.errors import UsageError

__all__ = [
    "ShardPlan",
    "Part",
    "chunk_range",
    "resolve_rank",
    "match_shard_plan",
    "tensor_parallel_parts",
    "part_selection",
    "bytes_touched",
]

#: Glob patterns of tensor names and the dimension the matching tensors are split along.
ShardPlan = Mapping[str, int]
#: A rank's part of a tensor: (dimension, start, stop) along that dimension; None for all of it.
Part = Optional[tuple[int, int, int]]


def chunk_range(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s part of ``size`` elements, as ``torch.chunk(n)[rank]``:
    every part holds ``ceil(size / n)`` elements except at the end, where the last non-empty part
    may be smaller and any parts after it are empty (``start == stop == size``); torch.chunk
    returns fewer than n pieces there, and those ranks get an empty part."""
    per = -(-size // world_size)
    return min(rank * per, size), min((rank + 1) * per, size)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size), each taken from the default process group where it is None."""
    if rank is None or world_size is None:
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            raise UsageError(
                "shard_plan needs rank= and world_size= (or an initialised torch.distributed process group)"
            )
        rank = torch.distributed.get_rank() if rank is None else rank
        world_size = torch.distributed.get_world_size() if world_size is None else world_size
    if not _is_int(world_size) or world_size < 1:
        raise UsageError(f"world_size must be a positive integer, not {world_size!r}")
    if not _is_int(rank) or not 0 <= rank < world_size:
        raise UsageError(f"rank must be an integer in [0, {world_size}), not {rank!r}")
    return rank, world_size


def match_shard_plan(names: Iterable[str], ndims: Mapping[str, int], shard_plan: ShardPlan) -> dict[str, int]:
    """``{name: dimension}`` for each name a pattern matches (fnmatch, case-sensitive; the first
    pattern in the plan's order that matches wins), the dimension made non-negative. Raises
    UsageError for a pattern that matches none of ``names`` (a typo would otherwise load every
    tensor whole on every rank) or a dimension outside a matched tensor's dimensions."""
    if not isinstance(shard_plan, Mapping):
        raise UsageError(f"shard_plan must be a mapping of name patterns to dimensions, not {shard_plan!r}")
    for pattern, dim in shard_plan.items():
        if not isinstance(pattern, str) or not _is_int(dim):
            raise UsageError(f"shard_plan entry {pattern!r}: {dim!r} is not a name pattern and an integer dimension")
    used: set[str] = set()
    dims: dict[str, int] = {}
    for name in names:
        for pattern, dim in shard_plan.items():
            if fnmatch.fnmatchcase(name, pattern):
                used.add(pattern)
                ndim = ndims[name]
                if ndim == 0 or not -ndim <= dim < ndim:
                    raise UsageError(
                        f"shard_plan pattern {pattern!r} splits tensor '{name}' along dimension {dim}, "
                        f"but it has {ndim} dimension(s)"
                    )
                dims[name] = dim % ndim
                break
    unused = [pattern for pattern in shard_plan if pattern not in used]
    if unused:
        raise UsageError(f"shard_plan patterns match no tensor loaded: {', '.join(map(repr, unused))}")
    return dims


def tensor_parallel_parts(
    shapes: Mapping[str, tuple[int, ...]], shard_plan: ShardPlan, rank: int, world_size: int
) -> dict[str, Part]:
    """Each tensor's part for ``rank`` (None: the whole tensor), for tensors of ``shapes`` by name."""
    dims = match_shard_plan(list(shapes), {name: len(shape) for name, shape in shapes.items()}, shard_plan)
    parts: dict[str, Part] = {}
    for name, shape in shapes.items():
        dim = dims.get(name)
        if dim is None:
            parts[name] = None
        else:
            parts[name] = (dim, *chunk_range(shape[dim], rank, world_size))
    return parts


def part_selection(shape: tuple[int, ...], part: Part) -> Any:
    """The array selection that reads ``part`` of an array of ``shape``."""
    if part is None:
        return Ellipsis
    dim, start, stop = part
    return tuple(slice(start, stop) if d == dim else slice(None) for d in range(len(shape)))


def bytes_touched(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, selection: Any) -> int:
    """The decoded bytes of the chunks (of shape ``chunks``, clipped at the array's edge) that a
    selection of slices touches: what reading it decodes."""
    if selection is Ellipsis:
        selection = tuple(slice(None) for _ in shape)
    total = itemsize
    for extent, chunk, item in zip(shape, chunks, selection):
        start, stop, _ = item.indices(extent)
        if stop <= start:
            return 0
        first, last = start // chunk, (stop - 1) // chunk
        total *= min(extent, (last + 1) * chunk) - first * chunk
    return total if math.prod(shape) else 0
