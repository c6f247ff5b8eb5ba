"""Reading many arrays at once, the way a model's state dict loads: one parallel pass over every
chunk of every array on the host, or one pipeline through the staging ring onto a GPU, so that
neither the disk nor the copy engine waits between arrays."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Union

from zarr_device import _core
from zarr_device.config import get_config
from zarr_device.devices import LIKES, DeviceLike, Like, cuda_destination, resolve_target
from zarr_device.errors import UsageError
from zarr_device.selection import normalize_selection

if TYPE_CHECKING:
    from zarr_device.api import Array

__all__ = ["read_many"]

ArraysLike = Union[
    Mapping[str, Union["Array", tuple["Array", Any]]],
    Iterable[Union["Array", tuple["Array", Any]]],
]


def _named(arrays: ArraysLike) -> list[tuple[str, Array, Any]]:
    """(name, array, selection) for each entry: mapping keys, or array paths for a list."""
    from zarr_device.api import Array

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


def read_many(
    arrays: ArraysLike,
    *,
    device: DeviceLike = None,
    like: Like | None = None,
    out: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Reads many arrays, or selections of them, in one call; returns ``{name: result}``.

    ``arrays``: a mapping of names to arrays or ``(array, selection)`` pairs, or a list of them
    (named by their paths). ``device``, ``like``: as for :meth:`zarr_device.Array.read`, for every
    result. ``out``: results to fill in place, by name (a model's parameters, say), each of its
    selection's shape and dtype on the device; the others are allocated.

    On the host every chunk of every array is work for one pool of threads under one memory budget;
    on a CUDA device every chunk is one stream through the staging ring, decoded on the GPU where
    it can be. An error names the array and the chunk; the results are then not handed out.
    """
    named = _named(arrays)
    outs = dict(out or {})
    unknown = set(outs) - {name for name, _, _ in named}
    if unknown:
        raise UsageError(f"out names {sorted(unknown)!r}, which are not among the arrays read")
    if like is not None and like not in LIKES:
        raise UsageError(f"like={like!r} is not one of {', '.join(map(repr, LIKES))} or None")
    target = resolve_target(device, next(iter(outs.values()), None))
    config = get_config()
    selections = {name: normalize_selection(sel, array.shape) for name, array, sel in named}
    cores = {name: array._core for name, array, _ in named}  # noqa: SLF001 - the package's own

    if target.kind == "cuda":
        if like == "numpy":
            raise UsageError("like='numpy' makes host arrays: read them with device='cpu'")
        assert target.index is not None
        destinations = {
            name: cuda_destination(cores[name].dtype, selections[name].shape, target.index, like, outs.get(name))
            for name, _, _ in named
        }
        requests = [
            (cores[name], list(selections[name].slices), d.ptr, d.nbytes, d.stream)
            for name, d in destinations.items()
            if d.nbytes
        ]
        if requests:
            _core.read_many_cuda(
                requests,
                target.index,
                config.threads,
                config.max_inflight_bytes,
                config.gpu_decode,
                config.staging_bytes,
                config.staging_slots,
            )
        return {name: d.finish(d.result) if d.finish else d.result for name, d in destinations.items()}

    from zarr_device.api import host_destination

    if target.kind == "framework":
        # Other torch devices: pinned host memory filled in one pass, then one copy each.
        from zarr_device import torch as torch_adapter

        if like not in (None, "torch"):
            raise UsageError(f"device {target.name!r} is reached through PyTorch: use like='torch'")
        staging = {
            name: torch_adapter.pinned_empty(selections[name].shape, cores[name].dtype) for name, _, _ in named
        }
        _core.read_many(
            [(cores[n], list(selections[n].slices), torch_adapter.byte_view(staging[n])) for n in staging],
            config.threads,
            config.max_inflight_bytes,
        )
        return {n: torch_adapter.to_device(staging[n], target.name, out=outs.get(n)) for n in staging}

    if like in ("cupy", "jax"):
        raise UsageError(f"like={like!r} reads onto a GPU: pass device='cuda' (or device='cuda:N')")
    results: dict[str, Any] = {}
    host_requests = []
    for name, _, _ in named:
        result, bytes_view = host_destination(cores[name], selections[name].shape, like, outs.get(name))
        results[name] = result
        host_requests.append((cores[name], list(selections[name].slices), bytes_view))
    _core.read_many(host_requests, config.threads, config.max_inflight_bytes)
    return results
