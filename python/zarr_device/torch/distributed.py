"""Loading a checkpoint on several ranks, read once: each rank's slices of the tensors are in
:mod:`zarr_device.torch.parts`.

Read-once fan-out (:func:`load_distributed`): every rank reads about 1/world_size of the bytes,
then sends what it read to the others with one broadcast per tensor, each as soon as it has landed,
so the storage is read once in all rather than once per rank and the sends overlap the reads.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

import torch

from zarr_device.errors import UsageError
from zarr_device.core.many import iter_many
from zarr_device.torch.load import DeviceArg, Keys, PathLike, _caster, _select, open_checkpoint

__all__ = ["assign_owners", "load_distributed"]


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


