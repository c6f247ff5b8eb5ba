"""Reading many arrays at once, the way a model's state dict loads: one parallel pass over every
chunk of every array on the host, or one pipeline through the staging ring onto a GPU, so that
neither the disk nor the copy engine waits between arrays."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Union

import zarr_device._core as _core
from zarr_device.io.adapters import adapter, default_adapter
from zarr_device.io.adapters.base import Destination, Like
from zarr_device.io.devices import DeviceLike, DeviceSpec
from zarr_device.errors import UsageError
from zarr_device.io.transfers import check_like, destination, resolve_target
from zarr_device.core.selection import normalize_selection
from zarr_device.io.staged_reads import StagedRead, iter_staged, read_staged

if TYPE_CHECKING:
    from zarr_device.core.array import Array

__all__ = ["read_many", "iter_many"]

ArraysLike = Union[
    Mapping[str, Union["Array", tuple["Array", Any]]],
    Iterable[Union["Array", tuple["Array", Any]]],
]


def _named(arrays: ArraysLike) -> list[tuple[str, Array, Any]]:
    """(name, array, selection) for each entry: mapping keys, or array paths for a list."""
    from zarr_device.core.array import Array

    entries: Iterable[tuple[str | None, Any]]
    if isinstance(arrays, Mapping):
        entries = arrays.items()
    else:
        entries = ((None, item) for item in arrays)
    named: list[tuple[str, Array, Any]] = []
    seen: set[str] = set()
    for name, item in entries:
        array, selection = item if isinstance(item, tuple) else (item, Ellipsis)
        if not isinstance(array, Array):
            raise UsageError(f"read_many takes zarr_device arrays (or (array, selection) pairs), not {array!r}")
        key = array.path if name is None else name
        if key in seen:
            raise UsageError(f"two entries are named {key!r}: pass a mapping of distinct names")
        seen.add(key)
        named.append((key, array, selection))
    return named


@dataclass(frozen=True)
class _Plan:
    """A checked read of many arrays: names, arrays' cores, selections and the target device."""

    named: list[tuple[str, Array, Any]]
    outs: dict[str, Any]
    like: Like | None
    target: DeviceSpec
    selections: dict[str, Any]
    cores: dict[str, _core.Array]


def _plan(arrays: ArraysLike, device: DeviceLike, like: Like | None, out: Mapping[str, Any] | None) -> _Plan:
    named = _named(arrays)
    outs = dict(out or {})
    unknown = set(outs) - {name for name, _, _ in named}
    if unknown:
        raise UsageError(f"out names {sorted(unknown)!r}, which are not among the arrays read")
    check_like(like)
    target = resolve_target(device, next(iter(outs.values()), None))
    # Refuse a like/device pair before anything is allocated or read.
    (default_adapter(target) if like is None else adapter(like)).check_device(target)
    selections = {name: normalize_selection(sel, array.shape) for name, array, sel in named}
    cores = {name: array._core for name, array, _ in named}  # noqa: SLF001 - the package's own
    return _Plan(named, outs, like, target, selections, cores)


def _destinations(plan: _Plan) -> dict[str, Destination]:
    """Every result allocated (or ``out`` checked), before anything is read."""
    return {
        name: destination(plan.cores[name], plan.selections[name].shape, plan.target, plan.like, plan.outs.get(name))
        for name, _, _ in plan.named
    }


def _read_cuda(
    plan: _Plan,
    destinations: dict[str, Destination],
    completed: Callable[[str], None] | None,
    non_blocking: bool = False,
) -> None:
    """One pipeline through the staging ring for every destination; ``completed(name)`` as each
    is complete (those with nothing to read first)."""
    assert plan.target.index is not None
    names = [name for name, d in destinations.items() if d.nbytes]
    if completed is not None:
        for name, d in destinations.items():
            if not d.nbytes:
                completed(name)
    if not names:
        return
    requests = [
        (
            plan.cores[n],
            list(plan.selections[n].slices),
            destinations[n].ptr,
            destinations[n].nbytes,
            destinations[n].stream,
        )
        for n in names
    ]
    _core.read_many_cuda(
        requests,
        plan.target.index,
        _core.ReadOptions(non_blocking=non_blocking),
        None if completed is None else (lambda i: completed(names[i])),
    )


def _staged_reads(plan: _Plan, destinations: dict[str, Destination]) -> list[StagedRead]:
    """The reads of a call onto a device torch drives, through one bounded host staging."""
    return [
        StagedRead(plan.cores[n], plan.selections[n].slices, d.staged) for n, d in destinations.items()
    ]


def read_many(
    arrays: ArraysLike,
    *,
    device: DeviceLike = None,
    like: Like | None = None,
    out: Mapping[str, Any] | None = None,
    non_blocking: bool = False,
) -> dict[str, Any]:
    """Reads many arrays, or selections of them, in one call; returns ``{name: result}``.

    ``arrays``: a mapping of names to arrays or ``(array, selection)`` pairs, or a list of them
    (named by their paths). ``device``, ``like``: as for :meth:`zarr_device.Array.read`, for every
    result. ``out``: results to fill in place, by name (a model's parameters, say), each of its
    selection's shape and dtype on the device; the others are allocated.

    On the host every chunk of every array is work for one pool of threads under one memory budget;
    on a CUDA device every chunk is one stream through the staging ring, decoded on the GPU where
    it can be; on another device torch drives (Apple MPS, Intel XPU, ROCm) the chunks pass through
    one host staging of at most ``staging_bytes`` (:mod:`zarr_device.io.staged_reads`). An error
    names the array and the chunk; the results are then not handed out. :func:`iter_many` hands
    each result on as soon as it is complete. ``non_blocking``: as for
    :meth:`zarr_device.Array.read`.
    """
    plan = _plan(arrays, device, like, out)
    destinations = _destinations(plan)
    if plan.target.kind == "cuda":
        _read_cuda(plan, destinations, None, non_blocking)
    elif plan.target.kind == "framework":
        read_staged(_staged_reads(plan, destinations))
    else:  # host memory: every chunk in one pass
        _core.read_many(
            [(plan.cores[n], list(plan.selections[n].slices), d.host) for n, d in destinations.items()]
        )
    return {name: d.complete() for name, d in destinations.items()}


def iter_many(
    arrays: ArraysLike,
    *,
    device: DeviceLike = None,
    like: Like | None = None,
    out: Mapping[str, Any] | None = None,
) -> Iterator[tuple[str, Any]]:
    """Reads many arrays as :func:`read_many` does, yielding ``(name, result)`` as each result is
    complete, while the rest are still being read: a loader can hand tensors on (copy them into a
    model, send them to other ranks) as they arrive.

    On a CUDA device the arrays are one pipeline through the staging ring, read in the order given,
    and each is yielded as soon as its last chunk is on the device; on another device torch drives,
    as soon as its last copy from the host staging is queued (its values are then in the device's
    queue ahead of any later work). On the CPU they are read one after another, each with every
    thread. An error is raised where the iteration stands; the
    results already yielded are complete, the others are dropped. Leaving the loop early waits for
    the read in flight to end.
    """
    plan = _plan(arrays, device, like, out)
    if plan.target.kind == "cpu":
        for name, array, selection in plan.named:
            one = {name: plan.outs[name]} if name in plan.outs else None
            yield name, read_many({name: (array, selection)}, device=device, like=like, out=one)[name]
        return
    destinations = _destinations(plan)
    if plan.target.kind == "framework":
        names = list(destinations)
        for index in iter_staged(_staged_reads(plan, destinations)):
            yield names[index], destinations.pop(names[index]).complete()
        return
    done: queue.SimpleQueue[tuple[str | None, BaseException | None]] = queue.SimpleQueue()

    def run() -> None:
        try:
            _read_cuda(plan, destinations, lambda name: done.put((name, None)))
            done.put((None, None))
        except BaseException as error:  # handed to the iterating thread, which raises it
            done.put((None, error))

    reader = threading.Thread(target=run, name="zarr-device-iter-many", daemon=True)
    reader.start()
    try:
        while True:
            ready, error = done.get()
            if error is not None:
                raise error
            if ready is None:
                return
            yield ready, destinations.pop(ready).complete()
    finally:
        reader.join()
