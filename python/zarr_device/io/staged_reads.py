"""Reads onto the devices torch drives itself (Apple MPS, Intel XPU, AMD GPUs under ROCm, any other
accelerator torch knows): the engine fills host memory and torch copies it to the device.

The host memory is one staging a call of at most ``staging_bytes`` (the setting that bounds a CUDA
read's pinned ring), pinned where torch can pin. A call whose results fit in it reads every chunk
of every array in one parallel pass, then copies each result over. A larger call cuts its results
into C-contiguous pieces (whole rows, cut at the chunks' edges where a row range is cut) and
packs them into two halves of the staging: the engine fills one half while torch copies the
other out, and a half is filled again only once its copies have finished. So host memory is
bounded by the setting, not by the data: a 30 GB state dict loads onto a 32 GB Mac through
768 MiB instead of through 30 GB of pinned memory beside the 30 GB on the device.

A call returns once its copies have finished: torch's copies from host memory that does not wait
for them (``non_blocking``) may still read the staging after the call, so the call waits for them
before it lets the staging go.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import zarr_device._core as _core
from zarr_device.basics.config import get_config

__all__ = ["StagedRead", "Piece", "cut_pieces", "pack_pieces", "read_staged", "iter_staged"]

Slices = tuple[tuple[int, int, int], ...]

# Where a piece may start in a half: a multiple of every element size (16 for complex128), so that
# a piece's bytes view as its result's dtype.
_PIECE_ALIGNMENT = 64


@dataclass(frozen=True)
class StagedRead:
    """One result to fill: ``slices`` of ``core`` ((start, step, count) per dimension) into
    ``tensor``, a C-contiguous torch tensor on the device, in C order."""

    core: _core.Array
    slices: Slices
    tensor: Any


@dataclass(frozen=True)
class Piece:
    """A C-contiguous stretch of one result: ``slices`` of its array fill ``count`` elements of
    the result from element ``offset`` on (C order)."""

    request: int
    slices: Slices
    offset: int
    count: int
    nbytes: int


def _aligned_rows(start: int, step: int, extent: int, rows: int, align: int) -> Iterator[tuple[int, int]]:
    """Ranges [first, end) of a dimension's ``extent`` selected positions, at most ``rows`` long,
    each ending on a multiple of ``align`` in the array (a chunk's edge) where it can: a chunk cut
    by two pieces is decoded twice."""
    first = 0
    while first < extent:
        end = min(extent, first + rows)
        if end < extent and step == 1 and align > 0:
            at_edge = (start + end) // align * align - start
            if at_edge > first:
                end = at_edge
        yield first, end
        first = end


def cut_pieces(
    slices: Slices, itemsize: int, most_bytes: int, chunk_shapes: Sequence[Sequence[int]]
) -> list[tuple[Slices, int, int]]:
    """A selection cut into C-contiguous pieces of at most ``most_bytes`` each: (slices, offset,
    count) triples in C order. The pieces are the whole selection when it fits; else runs of whole
    rows of the first dimension whose rows fit, one piece per index of the dimensions before it,
    the runs ending on the edges of the first of ``chunk_shapes`` (a shard's, then its inner
    chunks') whose chunks they hold. An element larger than ``most_bytes`` is a piece of its own."""
    extents = [count for _, _, count in slices]
    total = math.prod(extents)
    if total == 0:
        return []
    if total * itemsize <= most_bytes:
        return [(slices, 0, total)]
    # The first dimension whose rows (all of the dimensions after it) fit.
    cut = next(
        (d for d in range(len(extents)) if math.prod(extents[d + 1 :]) * itemsize <= most_bytes),
        len(extents) - 1,
    )
    row = math.prod(extents[cut + 1 :])
    rows = max(1, most_bytes // (row * itemsize))
    start, step, _ = slices[cut]
    align = next((shape[cut] for shape in chunk_shapes if shape[cut] <= rows), 0)
    runs = list(_aligned_rows(start, step, extents[cut], rows, align))
    pieces: list[tuple[Slices, int, int]] = []
    for outer in itertools.product(*(range(n) for n in extents[:cut])):
        fixed = tuple((s + i * st, 1, 1) for (s, st, _), i in zip(slices[:cut], outer))
        base = sum(i * math.prod(extents[d + 1 :]) for d, i in enumerate(outer))
        for first, end in runs:
            piece = fixed + ((start + first * step, step, end - first),) + slices[cut + 1 :]
            pieces.append((piece, base + first * row, (end - first) * row))
    return pieces


def pack_pieces(pieces: Sequence[Piece], half_bytes: int) -> list[list[tuple[Piece, int]]]:
    """Consecutive pieces packed into halves of ``half_bytes``: each group a list of (piece,
    position in the half), positions aligned for any element size."""
    groups: list[list[tuple[Piece, int]]] = []
    group: list[tuple[Piece, int]] = []
    used = 0
    for piece in pieces:
        at = -(-used // _PIECE_ALIGNMENT) * _PIECE_ALIGNMENT
        if group and at + piece.nbytes > half_bytes:
            groups.append(group)
            group, at = [], 0
        group.append((piece, at))
        used = at + piece.nbytes
    if group:
        groups.append(group)
    return groups


def _copies_done(torch: Any, device: Any) -> Callable[[], None]:
    """A wait for the copies queued on ``device`` so far: an event recorded now, or, where the
    device has none, the device's synchronisation. Copies to the CPU have finished when queued and
    the meta device moves nothing."""
    if device.type in ("cpu", "meta"):
        return lambda: None
    try:
        event = torch.Event(device=device)
        event.record()
        wait: Callable[[], None] = event.synchronize
        return wait
    except (AttributeError, RuntimeError, TypeError):
        module = getattr(torch, device.type, None)
        synchronize = getattr(module, "synchronize", None)
        if synchronize is None:
            synchronize = torch.accelerator.synchronize
        return lambda: synchronize()


def _staging_bytes(total: int) -> tuple[int, int]:
    """The staging a call of ``total`` bytes takes and the bytes of each group filled in it: all
    of it at once when ``total`` fits in ``staging_bytes``, else two halves of the setting."""
    budget = get_config().staging_bytes
    if total <= budget:
        return total, total
    half = budget // 2 // _PIECE_ALIGNMENT * _PIECE_ALIGNMENT
    return 2 * half, half


def iter_staged(reads: Sequence[StagedRead]) -> Iterator[int]:
    """Fills every read's tensor through one bounded staging, yielding each read's index once its
    last copy is queued (its values are in the device's queue, in order before any later work on
    it). Waits for every copy before it ends, also when a read fails or the caller stops early."""
    import torch

    from zarr_device.io.adapters.torch import pinned_empty

    pieces: list[Piece] = []
    total = sum(r.tensor.numel() * r.tensor.element_size() for r in reads)
    size, half = _staging_bytes(total + len(reads) * _PIECE_ALIGNMENT)
    for index, read in enumerate(reads):
        itemsize = read.tensor.element_size()
        for slices, offset, count in cut_pieces(
            read.slices, itemsize, half, (read.core.chunk_shape, read.core.inner_chunk_shape)
        ):
            pieces.append(Piece(index, slices, offset, count, count * itemsize))
    last_piece = {piece.request: n for n, piece in enumerate(pieces)}
    empty = [index for index in range(len(reads)) if index not in last_piece]
    yield from empty
    if not pieces:
        return
    staging = pinned_empty((size,), "uint8")
    halves = [staging[:half], staging[half : 2 * half]] if size > half else [staging]
    pending: list[Callable[[], None] | None] = [None] * len(halves)
    flats = [r.tensor.view(-1) for r in reads]
    done = 0
    try:
        for number, group in enumerate(pack_pieces(pieces, half)):
            slot = number % len(halves)
            wait = pending[slot]
            if wait is not None:
                wait()  # the half's last copies have read it
            buffer = halves[slot]
            host = buffer.numpy()
            _core.read_many(
                [(reads[p.request].core, list(p.slices), host[at : at + p.nbytes]) for p, at in group]
            )
            for piece, at in group:
                flat = flats[piece.request]
                source = buffer[at : at + piece.nbytes].view(flat.dtype)
                flat[piece.offset : piece.offset + piece.count].copy_(source, non_blocking=True)
            pending[slot] = _copies_done(torch, reads[group[0][0].request].tensor.device)
            for piece, _ in group:
                done += 1
                if last_piece[piece.request] == done - 1:
                    yield piece.request
    finally:
        for wait in pending:
            if wait is not None:
                wait()


def read_staged(reads: Sequence[StagedRead]) -> None:
    """Fills every read's tensor through one bounded staging (see the module's docstring)."""
    for _ in iter_staged(reads):
        pass
