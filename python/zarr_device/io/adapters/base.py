"""The one protocol every framework adapter follows, and what adapters share.

A read asks one adapter (chosen by ``like=``, or by the type of ``out=``) for a
:class:`Destination`: memory the engine fills, on the host (``host``: bytes), on a CUDA device
(``ptr``, ``nbytes``, in order on ``stream``) or on another device torch drives (``staged``),
owned by ``result``; ``finish`` turns the filled
result into what the caller gets (an engine buffer wrapped as a framework array, a copy to
another device). A write asks the adapter of its values for their bytes on the host, or for a
:class:`CudaSource` the engine writes from directly.
"""

from __future__ import annotations

import importlib
import math
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

import zarr_device._core as _core
from zarr_device.basics.casting import check_cast
from zarr_device.io.devices import CPU, DeviceSpec
from zarr_device.basics.numpy_dtypes import to_numpy_dtype
from zarr_device.errors import FormatError, OutOfMemoryError, UsageError

__all__ = [
    "Like",
    "Target",
    "Destination",
    "CudaSource",
    "Adapter",
    "import_framework",
    "import_failure",
    "is_not_installed",
    "engine_destination",
    "host_array",
    "check_shape_and_dtype",
    "check_device_cast",
    "gpu_only",
]

#: What ``like=`` names: the kind of array a read returns.
Like = Literal["numpy", "torch", "cupy", "jax", "mlx", "tensorflow"]


@dataclass(frozen=True)
class Target:
    """What a read produces: ``shape`` elements of the Zarr data type ``dtype`` on ``device``;
    ``what`` names the array in errors."""

    shape: tuple[int, ...]
    dtype: str
    device: DeviceSpec
    what: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * to_numpy_dtype(self.dtype).itemsize


@dataclass
class Destination:
    """Where a read lands (see the module's docstring). ``index`` is the CUDA device of device
    memory. ``staged``: a C-contiguous tensor on a device torch drives itself, filled through a
    bounded host staging (:mod:`zarr_device.io.staged_reads`)."""

    result: Any
    host: npt.NDArray[np.uint8] | None = None
    index: int = 0
    ptr: int = 0
    nbytes: int = 0
    stream: int = 0
    finish: Callable[[Any], Any] | None = None
    staged: Any = None

    def complete(self) -> Any:
        """What the caller gets, once the engine has filled the memory."""
        return self.finish(self.result) if self.finish else self.result


@dataclass(frozen=True)
class CudaSource:
    """Values on CUDA device ``index`` to write: ``nbytes`` at ``address``, produced in order on
    ``stream`` (``cudaStreamLegacy``, 1, for the legacy default stream: 0 means no stream, and
    the write would then not wait for the work that made them); ``owner`` keeps the memory alive."""

    index: int
    address: int
    nbytes: int
    stream: int
    owner: Any


def is_not_installed(error: ImportError, module: str) -> bool:
    """Whether ``error``, raised importing ``module``, says the module (or a package it is in) is
    not installed: a ModuleNotFoundError for that very name. Any other failure (a library that
    cannot be mapped under a memory limit, a missing dependency of the framework, an error in its
    own import) is not "not installed", and must be reported as what it is."""
    missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    return missing is not None and (module == missing or module.startswith(missing + "."))


def import_failure(module: str, install: str, error: ImportError) -> UsageError:
    """The error for ``module`` failing to import with ``error``: ``install`` (what to install)
    when it is not installed, else a message naming the failure itself."""
    if is_not_installed(error, module):
        return UsageError(install)
    return UsageError(
        f"{install.split(':', 1)[0]}, and '{module}' is installed but failed to import: "
        f"{type(error).__name__}: {error}"
    )


def import_framework(module: str, install: str) -> Any:
    """The framework's module, imported now; UsageError saying what to install when it is not
    there, or naming the failure when it is there but its import fails (:func:`import_failure`).
    Every read asks (several times), so a module already imported is taken from ``sys.modules``
    without the import machinery's lock and lookups."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise import_failure(module, install, e) from (None if is_not_installed(e, module) else e)


def engine_destination(target: Target, wrap: Callable[[Any, str], Any] | None = None) -> Destination:
    """Fresh engine-owned memory on ``target``'s CUDA device, as a DLPack-exporting
    ``_core.DeviceArray`` that ``wrap`` hands to a framework (none: the DeviceArray itself)."""
    assert target.device.index is not None
    buffer = _core.DeviceBuffer(target.device.index, target.nbytes)
    array = _core.DeviceArray(buffer, list(target.shape), target.dtype)
    finish = None if wrap is None else (lambda filled: wrap(filled, target.dtype))
    return Destination(array, index=target.device.index, ptr=buffer.ptr, nbytes=target.nbytes, finish=finish)


def host_array(target: Target, dtype: np.dtype[Any] | None = None) -> npt.NDArray[Any]:
    """A new NumPy array of the target's shape (of ``dtype``, default the target's own), or
    OutOfMemoryError naming the read when it cannot be had."""
    try:
        return np.empty(target.shape, dtype=to_numpy_dtype(target.dtype) if dtype is None else dtype)
    except (MemoryError, ValueError) as e:
        raise OutOfMemoryError(
            f"{target.what}: the selection's {target.nbytes} bytes cannot be allocated ({e}); read a "
            "smaller selection, or into memory you provide (out=)"
        ) from None


def check_shape_and_dtype(out: Any, target: Target, dtype: Any) -> None:
    """UsageError unless ``out`` has the selection's shape and ``dtype`` (the framework's type
    for the target's Zarr data type)."""
    if tuple(out.shape) != target.shape or out.dtype != dtype:
        raise UsageError(
            f"out has shape {tuple(out.shape)} and dtype {out.dtype}; the selection needs shape "
            f"{target.shape} and dtype {target.dtype}"
        )


def gpu_only(like: str, device: DeviceSpec) -> None:
    """UsageError unless ``device`` is a CUDA device: for frameworks zarr-device reads onto GPUs
    only."""
    if device.kind == "cpu":
        raise UsageError(
            f"like={like!r} reads onto a GPU: pass device='cuda' (or device='cuda:N'); on the CPU, read "
            "NumPy (like='numpy') or torch (like='torch')"
        )
    if device.kind == "framework":
        raise UsageError(f"device {device.name!r} is reached through PyTorch: use like='torch'")


def check_device_cast(values: Any, dtype_name: str, target_dtype: str, what: str) -> None:
    """The casting rule of host writes (:func:`zarr_device.basics.casting.check_cast`) for device
    values of Zarr type ``dtype_name`` (a type without a Zarr name: the framework's conversion
    reports it)."""
    try:
        given = to_numpy_dtype(dtype_name)
    except FormatError:
        return
    count = int(values.numel()) if hasattr(values, "numel") else int(values.size)
    check_cast(
        given,
        to_numpy_dtype(target_dtype),
        python_values=False,
        what=what,
        bounds=lambda: (values.min().item(), values.max().item()) if count else (0, 0),
    )


class Adapter(ABC):
    """One framework: the arrays it owns, where they live, how a read's result is allocated or
    an ``out=`` checked on each kind of device, the stream the engine orders its work on, and
    how values to write reach the engine. The defaults refuse what a framework cannot do, with
    messages that say what to do instead."""

    #: The ``like=`` name (None: the engine's own DLPack arrays).
    like: ClassVar[str | None]
    #: How the framework's arrays are called in messages ("a NumPy array").
    array_name: ClassVar[str]
    #: The framework's module and the names of its array types in it.
    module: ClassVar[str]
    array_types: ClassVar[tuple[str, ...]]

    # -- arrays --------------------------------------------------------------------------------
    def owns(self, obj: Any) -> bool:
        """Whether ``obj`` is an array of this framework (never imports the framework: an array
        of it exists only once it is imported)."""
        framework = sys.modules.get(self.module)
        return framework is not None and isinstance(obj, tuple(getattr(framework, t) for t in self.array_types))

    def device_of(self, array: Any) -> DeviceSpec:
        """The device an array of this framework lives on."""
        return CPU

    # -- reads ---------------------------------------------------------------------------------
    def check_device(self, device: DeviceSpec) -> None:
        """UsageError when this framework's results cannot live on ``device`` (before any I/O)."""
        if device.kind == "framework":
            raise UsageError(
                f"device {device.name!r} is reached through PyTorch: use like='torch' (or a torch "
                f"tensor on {device.name} as out)"
            )
        if device.kind == "cuda":
            raise UsageError(
                f"like={self.like!r} makes host arrays, but device={device.name!r} was asked for: use "
                "like='torch', 'cupy', 'jax', 'tensorflow' or None (a DLPack array) with a GPU device, "
                f"or device='cpu' for {self.array_name}s"
            )

    @abstractmethod
    def allocate(self, target: Target) -> Destination:
        """A new result for ``target`` (after :meth:`check_device`)."""

    def check_out(self, out: Any, target: Target) -> Destination:
        """``out``, checked (shape, type, device, layout), as the destination of ``target``."""
        raise UsageError(f"{self.array_name}s are immutable: read without out=, or into a NumPy array")

    def wrap(self, buffer: Any, dtype: str) -> Any:
        """Memory the engine filled with values of the Zarr type ``dtype`` (a NumPy array on the
        host, a ``_core.DeviceArray`` on a CUDA device) as this framework's array, sharing it
        where the framework can."""
        return buffer

    def stream(self, index: int) -> int:
        """The framework's current stream on CUDA device ``index``, which the engine's work is
        ordered with (0: none; the engine's reads then complete before they return)."""
        return 0

    # -- writes --------------------------------------------------------------------------------
    def to_host(self, values: Any) -> npt.NDArray[Any]:
        """Values to write, as a NumPy array in host memory (one copy from a device at most)."""
        return np.asarray(values)

    def cuda_source(self, values: Any, dtype: str, shape: tuple[int, ...], what: str) -> CudaSource | None:
        """Values on a CUDA device, converted to the Zarr type ``dtype`` (as host writes cast,
        ``what`` naming the array) and laid out C-contiguous with ``shape``, for the engine to
        write from; None for values elsewhere, which go through :meth:`to_host`."""
        return None
