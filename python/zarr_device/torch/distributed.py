"""Loading a checkpoint on several ranks.

Tensor-parallel slices (``load(..., shard_plan=, rank=, world_size=)``): each rank reads only its
part of the tensors a plan names, as selections in the one read_many pipeline, so that a rank
reads only the chunks its part touches.

Read-once fan-out (:func:`load_distributed`): every rank reads about 1/world_size of the bytes,
then sends what it read to the others with one broadcast per tensor, each as soon as it has landed,
so the storage is read once in all rather than once per rank and the sends overlap the reads.
"""

from __future__ import annotations

import fnmatch
import heapq
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional

import torch

from zarr_device.errors import UsageError

if TYPE_CHECKING:
    from zarr_device.torch.load import Checkpoint, DeviceArg, Keys, PathLike

__all__ = [
    "ShardPlan",
    "Part",
    "chunk_range",
    "resolve_rank",
    "match_shard_plan",
    "tensor_parallel_parts",
    "part_selection",
    "assign_owners",
    "load_distributed",
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
    checkpoint: Checkpoint, names: list[str], shard_plan: ShardPlan, rank: int, world_size: int
) -> dict[str, Part]:
    """Each of ``names``' part for ``rank`` (None: the whole tensor)."""
    dims = match_shard_plan(names, {name: len(checkpoint.shape(name)) for name in names}, shard_plan)
    parts: dict[str, Part] = {}
    for name in names:
        dim = dims.get(name)
        if dim is None:
            parts[name] = None
        else:
            parts[name] = (dim, *chunk_range(checkpoint.shape(name)[dim], rank, world_size))
    return parts


def part_selection(shape: tuple[int, ...], part: Part) -> Any:
    """The array selection that reads ``part`` of an array of ``shape``."""
    if part is None:
        return Ellipsis
    dim, start, stop = part
    return tuple(slice(start, stop) if d == dim else slice(None) for d in range(len(shape)))


def assign_owners(sizes: Mapping[str, int], world_size: int) -> dict[str, int]:
    """The rank that reads each tensor: largest first (ties by name) to the rank with the fewest
    bytes so far (ties to the lower rank), so every rank reads about 1/world_size of the bytes.
    Depends only on the names and sizes, so every rank computes the same assignment."""
    loads = [(0, rank) for rank in range(world_size)]
    owners: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        load, rank = heapq.heappop(loads)
        owners[name] = rank
        heapq.heappush(loads, (load + sizes[name], rank))
    return owners


def _byte_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor sharing its storage: broadcasting bytes works
    for every dtype (bfloat16, float8, complex, bool) on every backend, and keeps NaN payloads."""
    return tensor.reshape(-1).view(torch.uint8)


def load_distributed(
    path: PathLike,
    *,
    device: DeviceArg = "cpu",
    group: Any = None,
    dtype: torch.dtype | None = None,
    keys: Keys = None,
) -> dict[str, torch.Tensor]:
    """Loads a checkpoint on every rank of ``group`` (None: the default process group) as
    :func:`zarr_device.torch.load` does, reading it once in all: each rank reads about
    1/world_size of the tensors' bytes (whole tensors, balanced by bytes, the same assignment on
    every rank) in one pipeline onto ``device``, and broadcasts each tensor as soon as it has landed
    while the rest are still being read. Every rank returns the full state dict, bit for bit as a plain load returns it
    (``dtype`` casts after the broadcast, so the stored bytes are what travels).

    Every rank of the group must call this with the same arguments, and the checkpoint must be
    readable at ``path`` on every rank (each opens its metadata). ``device`` must be one the
    group's backend sends from: a CPU device for Gloo, this rank's GPU for NCCL. Collective: a
    rank that fails leaves the others waiting until the group's timeout.
    """
    # Imported here: load.py imports this module for its slicing.
    from zarr_device.many import iter_many
    from zarr_device.torch.load import _caster, _select, open_checkpoint

    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise UsageError("load_distributed needs an initialised torch.distributed process group")
    target = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if dist.get_backend(group) == "nccl" and target.type != "cuda":
        raise UsageError(f"the NCCL backend sends GPU tensors only: pass this rank's GPU as device, not {device!r}")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    cast = _caster(dtype)  # a bad dtype fails here, before any collective

    checkpoint = open_checkpoint(path)
    names = _select(checkpoint.manifest, keys)
    stored = list(dict.fromkeys(checkpoint.manifest.stored(name) for name in names))
    nbytes = {s: checkpoint.arrays[s].nbytes for s in stored}
    owners = assign_owners(nbytes, world_size)
    # Each rank's tensors in the checkpoint's order: the order in which it reads and sends them.
    sent_by = [[s for s in stored if owners[s] == r and nbytes[s]] for r in range(world_size)]
    mine = [s for s in stored if owners[s] == rank]
    tensors: dict[str, torch.Tensor] = {}
    arriving = iter_many({s: checkpoint.arrays[s] for s in mine}, device=device, like="torch")
    for s in stored:
        if owners[s] != rank:
            tensors[s] = torch.empty(checkpoint.shape(s), dtype=checkpoint.dtype(s), device=target)
    global_ranks = [dist.get_global_rank(group, r) if group is not None else r for r in range(world_size)]

    def landed(name: str) -> torch.Tensor:
        """This rank's tensor ``name``, waiting for the read to hand it on."""
        while name not in tensors:
            key, tensor = next(arriving)
            tensors[key] = tensor
        return tensors[name]

    # The sends overlap the reads: in round k every rank sends its k-th tensor as soon as it has
    # landed, while the receives of the others' k-th tensors are already queued (every rank issues
    # the same collectives in the same order, as they must). A tensor's byte view is sent, so the
    # received bytes land in the tensor itself, whatever its dtype.
    for k in range(max(map(len, sent_by), default=0)):
        for r in range(world_size):
            if k < len(sent_by[r]):
                name = sent_by[r][k]
                tensor = landed(name) if r == rank else tensors[name]
                dist.broadcast(_byte_view(tensor), src=global_ranks[r], group=group)
    for name in mine:  # empty tensors, and the read's end (it raises what it met)
        landed(name)
    for _ in arriving:
        pass
    cast_once = {s: cast(tensors[s]) for s in stored}
    return {name: cast_once[checkpoint.manifest.stored(name)] for name in names}


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
