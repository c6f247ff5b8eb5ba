"""Moving array data between the engine and the frameworks' memory: the device a read lands on,
the adapter its ``like=`` or ``out=`` names, the destination that adapter allocates or checks, the
engine call that fills it; and writes, from device memory where the values' framework allows, else
from the host. The flow goes one way: callers -> transfers -> adapters -> devices (parsing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

import zarr_device._core as _core
from zarr_device.io.adapters import adapter, adapter_of, default_adapter
from zarr_device.io.adapters.base import Adapter, Destination, Target
from zarr_device.io.devices import CPU, DeviceLike, DeviceSpec, cuda_device_count, parse_device
from zarr_device.basics.numpy_dtypes import is_time_name
from zarr_device.errors import UsageError
from zarr_device.io.staged_reads import StagedRead, read_staged

__all__ = [
    "check_like",
    "resolve_target",
    "destination",
    "fill",
    "read",
    "synchronize",
    "write_from_device",
    "host_values",
]

_OUT_KINDS = "a NumPy array, a torch tensor, a CuPy array, an MLX array or a tf.Variable"


def check_like(like: Any) -> None:
    """UsageError unless ``like`` is a ``like=`` name or None."""
    adapter(like)


def resolve_target(device: DeviceLike, out: Any) -> DeviceSpec:
    """The device a read writes to: ``device`` when given (``out`` must then live there), else
    where ``out`` lives, else the CPU."""
    owner = None if out is None else adapter_of(out)
    where = None if owner is None else owner.device_of(out)
    if device is None:
        return where or CPU
    spec = parse_device(device)
    if where is not None and where != spec:
        raise UsageError(f"out lives on {where} but device={spec.name!r} was asked for")
    return spec


def _adapter(like: str | None, out: Any, device: DeviceSpec) -> Adapter:
    """The adapter of a read: the framework of ``out`` (which ``like``, when given, must name),
    else the one ``like`` names, else the device's default. Callers have checked ``like``
    (check_like), before anything else of the read."""
    if out is None:
        return default_adapter(device) if like is None else adapter(like)
    owner = adapter_of(out)
    if owner is None:
        raise UsageError(f"out must be {_OUT_KINDS} on {device.name}, not {type(out).__name__}")
    if like is not None and like != owner.like:
        raise UsageError(f"out is a {owner.array_name} but like={like!r} was asked for")
    return owner


def destination(core: _core.Array, shape: tuple[int, ...], device: DeviceSpec, like: Any, out: Any) -> Destination:
    """The memory a read of ``shape`` from ``core`` fills on ``device``: ``out``, checked, or a
    new result of the kind ``like`` asks for. Nothing is read yet; every refusal comes first."""
    chosen = _adapter(like, out, device)
    chosen.check_device(device)
    if is_time_name(core.dtype) and chosen.like != "numpy":
        raise UsageError(
            f"{core.describe()} holds {core.dtype}, which {chosen.array_name}s have no type for: read it "
            f"into NumPy (device='cpu', like='numpy'), and convert the counts (.view('int64')) yourself"
        )
    target = Target(shape, core.dtype, device, core.describe())
    return chosen.allocate(target) if out is None else chosen.check_out(out, target)


def fill(
    core: _core.Array, slices: Sequence[tuple[int, int, int]], into: Destination, non_blocking: bool = False
) -> None:
    """Reads a resolved selection into a destination (host bytes, or device memory)."""
    if into.host is not None:
        core.read(list(slices), into.host)
    elif into.staged is not None:
        read_staged([StagedRead(core, tuple(slices), into.staged)])
    elif into.nbytes:  # an empty selection has nothing to decode (it was validated already)
        options = _core.ReadOptions(consumer_stream=into.stream, non_blocking=non_blocking)
        core.read_cuda(list(slices), into.index, into.ptr, into.nbytes, options)


def read(
    core: _core.Array,
    slices: Sequence[tuple[int, int, int]],
    shape: tuple[int, ...],
    device: DeviceLike,
    like: Any,
    out: Any,
    non_blocking: bool = False,
) -> Any:
    """One read, as :meth:`zarr_device.Array.read` describes."""
    check_like(like)
    into = destination(core, shape, resolve_target(device, out), like, out)
    fill(core, slices, into, non_blocking)
    return into.complete()


def synchronize(device: DeviceLike = None) -> None:
    """Waits for the reads onto a CUDA device that returned without waiting (``non_blocking=True``)
    and raises CodecError, naming the array and the chunk, if the GPU failed to decode any of
    their chunks (each failure is reported once). ``device``: "cuda:N" (or N, or a torch device);
    None: every CUDA device read onto so far. A no-op where no read ran on a GPU."""
    if cuda_device_count() == 0:
        return
    if device is None:
        _core.synchronize_cuda(-1)
        return
    spec = parse_device(device)
    if spec.kind == "cuda" and spec.index is not None:
        _core.synchronize_cuda(spec.index)


def empty_cache(device: DeviceLike = None) -> None:
    """Frees the memory reads and writes keep between calls for a CUDA device: the staging ring
    (pinned host memory and its copy on the device), the decode memory and the decoder process
    (with the arenas it is lent), as
    ``torch.cuda.empty_cache()`` frees torch's cache. Call it after loading a model, before the
    memory is wanted for something else (a serving engine's KV cache); the next read allocates them
    again (pinning the staging takes tens of milliseconds). Rings in use by reads on other threads
    are kept. Failures of reads that did not wait stay for :func:`synchronize`. ``device``:
    "cuda:N" (or N, or a torch device); None: every CUDA device. With ``device=None``, a no-op
    without a GPU."""
    index = -1
    if device is not None:
        spec = parse_device(device)
        if spec.kind != "cuda":
            raise UsageError(f"empty_cache frees what reads keep for CUDA devices, not {spec.kind!r}")
        index = -1 if spec.index is None else spec.index
    if cuda_device_count() == 0:
        return
    _core.release_cuda_memory(index)


def write_from_device(
    core: _core.Array, slices: Sequence[tuple[int, int, int]], shape: tuple[int, ...], values: Any, what: str
) -> bool:
    """Writes ``values`` held on a CUDA device (torch, CuPy or JAX) straight from device memory:
    the engine lays chunks out, and compresses zstd chunks, on the GPU. False (nothing written)
    for values elsewhere, which the caller writes through :func:`host_values`. Casts as host
    writes do (:func:`zarr_device.basics.casting.check_cast`; ``what`` names the array in errors)."""
    owner = adapter_of(values)
    source = None if owner is None else owner.cuda_source(values, core.dtype, shape, what)
    if source is None or cuda_device_count() == 0:
        return False
    if source.nbytes:
        core.write_cuda(list(slices), source.index, source.address, source.nbytes, source.stream)
    return True  # the memory written from (source.owner) stayed alive until here


def host_values(values: Any) -> npt.NDArray[Any]:
    """Values to write, as a NumPy array in host memory."""
    owner = adapter_of(values)
    return np.asarray(values) if owner is None else owner.to_host(values)
