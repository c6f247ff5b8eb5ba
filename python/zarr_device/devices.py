"""Where a read lands: parsing ``device=`` arguments, and reading into device memory.

Three kinds of target:

* ``cpu``: host memory (NumPy arrays or CPU torch tensors).
* ``cuda``: an NVIDIA GPU the engine writes to itself, decoding on the GPU where it can.
* ``framework``: any other device PyTorch knows (Apple ``mps``, Intel ``xpu``, ``cuda`` on ROCm
  builds of torch, ...). The engine decodes into host memory (pinned, where torch can pin) and
  torch makes the one non-blocking copy to the device.
"""

from __future__ import annotations

import importlib.util
import operator
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union

from zarr_device import _core
from zarr_device.errors import DeviceError, FormatError, UsageError

#: The handle CUDA gives the legacy default stream (whose own handle, 0, means "no stream" to the
#: engine): ``cudaStreamLegacy``.
CUDA_STREAM_LEGACY = 1

__all__ = [
    "DeviceSpec",
    "DeviceLike",
    "Like",
    "CPU",
    "parse_device",
    "cuda_device_count",
    "cuda_build_info",
    "device_of",
    "resolve_target",
    "read_to_device",
]

DeviceKind = Literal["cpu", "cuda", "framework"]
Like = Literal["numpy", "torch", "cupy", "jax"]
LIKES: tuple[str, ...] = ("numpy", "torch", "cupy", "jax")

#: What ``device=`` accepts: None, "cpu", "cuda", "cuda:N", an int N (CUDA device N), a
#: ``torch.device``, a ``cupy.cuda.Device``, a JAX device, another torch device string ("mps",
#: "xpu:1", ...) or a :class:`DeviceSpec`.
DeviceLike = Union[None, str, int, "DeviceSpec", Any]


@dataclass(frozen=True)
class DeviceSpec:
    """A resolved read target.

    ``kind``: "cpu", "cuda" (the engine writes device memory itself) or "framework" (the engine
    fills host memory, torch copies it to the device). ``index``: the device ordinal, or None
    where the device has none (CPU, or a framework device named without one). ``name``: the
    device as torch spells it ("cpu", "cuda:0", "mps", "xpu:1").
    """

    kind: DeviceKind
    index: int | None
    name: str

    def __str__(self) -> str:
        return self.name


CPU = DeviceSpec("cpu", None, "cpu")

_DEVICE_STRING = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::(\d+))?$")
_NATIVE_HELP = "'cpu', 'cuda', 'cuda:N', an int N, a torch.device or a torch device string such as 'mps'"


def cuda_device_count() -> int:
    """How many CUDA devices the engine can use: 0 when it was built without CUDA, when no driver
    is loaded or when no GPU is visible."""
    count = getattr(_core, "cuda_device_count", None)
    return 0 if count is None else int(count())


def cuda_build_info() -> dict[str, Any]:
    """What the engine was built with: ``{"compiled": bool, "nvcomp": str | None, ...}``."""
    info = getattr(_core, "cuda_build_info", None)
    return {"compiled": False, "nvcomp": None} if info is None else dict(info())


def _no_cuda_device(index: int, count: int) -> DeviceError:
    info = cuda_build_info()
    if not info.get("compiled"):
        return DeviceError(
            f"CUDA device {index} was asked for, but this build of zarr_device has no CUDA support "
            "(it was built without the CUDA toolkit); read to device='cpu', or rebuild with CUDA"
        )
    if count == 0:
        nvcomp = info.get("nvcomp")
        return DeviceError(
            f"CUDA device {index} was asked for, but no CUDA device is visible (0 devices; this build "
            f"has CUDA{f' and nvCOMP {nvcomp}' if nvcomp else ''}): check the NVIDIA driver and "
            "CUDA_VISIBLE_DEVICES"
        )
    return DeviceError(
        f"CUDA device {index} was asked for, but there {'is' if count == 1 else 'are'} only {count} "
        f"CUDA device{'' if count == 1 else 's'} (0..{count - 1})"
    )


def _torch_if_installed() -> Any | None:
    if "torch" in sys.modules:
        return sys.modules["torch"]
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def _is_rocm_torch() -> bool:
    torch = _torch_if_installed()
    return torch is not None and getattr(torch.version, "hip", None) is not None


def _default_cuda_index() -> int:
    """The device plain "cuda" means: torch's current CUDA device when torch has set one up, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return int(torch.cuda.current_device())
    return 0


def _cuda(index: int | None) -> DeviceSpec:
    if index is None:
        index = _default_cuda_index()
    if index < 0:
        raise UsageError(f"CUDA device index {index} is negative")
    count = cuda_device_count()
    if index >= count:
        raise _no_cuda_device(index, count)
    return DeviceSpec("cuda", index, f"cuda:{index}")


def _framework(kind: str, index: int | None, text: str) -> DeviceSpec:
    torch = _torch_if_installed()
    if torch is None:
        raise UsageError(
            f"device {text!r} is reached through PyTorch, which is not installed: pip install torch"
        )
    try:
        parsed = torch.device(f"{kind}:{index}" if index is not None else kind)
    except RuntimeError as e:
        raise UsageError(f"device {text!r} is not a device torch knows ({e}); use {_NATIVE_HELP}") from None
    name = str(parsed)
    return DeviceSpec("framework", parsed.index, name)


def _parse_string(text: str) -> DeviceSpec:
    match = _DEVICE_STRING.match(text.strip())
    if match is None:
        raise UsageError(f"malformed device string {text!r}: use {_NATIVE_HELP}")
    kind = match.group(1).lower()
    index = int(match.group(2)) if match.group(2) is not None else None
    if kind == "cpu":
        if index not in (None, 0):
            raise UsageError(f"device {text!r}: there is only one CPU device, 'cpu'")
        return CPU
    if kind == "cuda":
        if cuda_device_count() == 0 and _is_rocm_torch():
            return _framework("cuda", index, text)  # torch on ROCm spells AMD GPUs "cuda"
        return _cuda(index)
    return _framework(kind, index, text)


def parse_device(device: DeviceLike) -> DeviceSpec:
    """Resolves a ``device=`` argument.

    None and "cpu" mean host memory; "cuda", "cuda:N", an int N, ``torch.device("cuda", N)``, a
    ``cupy.cuda.Device`` and a JAX GPU device mean CUDA device N (plain "cuda": torch's current
    device, else 0); other torch device types ("mps", "xpu", "cuda" with a ROCm build of torch)
    are framework devices. Raises UsageError for a malformed argument and DeviceError when the CUDA
    device asked for does not exist (the message says how many there are and whether this build
    has CUDA).
    """
    if device is None:
        return CPU
    if isinstance(device, DeviceSpec):
        return device
    if isinstance(device, bool):
        raise UsageError(f"device={device!r}: a boolean is not a device; use {_NATIVE_HELP}")
    if isinstance(device, str):
        return _parse_string(device)
    module = type(device).__module__ or ""
    if module == "torch" and type(device).__name__ == "device":
        return _parse_string(str(device))
    if module.startswith("cupy") and hasattr(device, "id"):
        return _cuda(int(device.id))
    platform = getattr(device, "platform", None)
    if isinstance(platform, str) and hasattr(device, "local_hardware_id"):  # a JAX device
        if platform == "cpu":
            return CPU
        if platform in ("gpu", "cuda"):
            return _cuda(int(device.local_hardware_id))
        raise UsageError(f"JAX {platform!r} devices are not supported; use {_NATIVE_HELP}")
    try:
        index = operator.index(device)
    except TypeError:
        raise UsageError(f"device={device!r} is not a device: use {_NATIVE_HELP}") from None
    return _cuda(index)


def device_of(out: Any) -> DeviceSpec | None:
    """The device an ``out=`` argument lives on (None for objects zarr_device does not fill)."""
    from zarr_device.adapters import cupy as cupy_adapter
    from zarr_device.adapters import torch as torch_adapter

    if torch_adapter.is_tensor(out):
        return parse_device(out.device)
    if cupy_adapter.is_array(out):
        return _cuda(cupy_adapter.device_index(out))
    if type(out).__module__ == "numpy":
        return CPU
    return None


def resolve_target(device: DeviceLike, out: Any) -> DeviceSpec:
    """The device a read writes to: ``device`` when given (``out`` must then live there), else
    where ``out`` lives, else the CPU."""
    if device is None:
        if out is None:
            return CPU
        return device_of(out) or CPU
    spec = parse_device(device)
    if out is not None:
        where = device_of(out)
        if where is not None and where != spec:
            raise UsageError(f"out lives on {where} but device={spec.name!r} was asked for")
    return spec


def _out_framework(out: Any) -> str | None:
    from zarr_device.adapters import cupy as cupy_adapter
    from zarr_device.adapters import torch as torch_adapter

    if torch_adapter.is_tensor(out):
        return "torch"
    if cupy_adapter.is_array(out):
        return "cupy"
    return None


def _read_cuda(
    core: _core.Array,
    slices: Sequence[tuple[int, int, int]],
    index: int,
    ptr: int,
    nbytes: int,
    stream: int,
) -> None:
    if nbytes == 0:
        return  # nothing to decode (an empty selection); the selection was validated already
    core.read_cuda(list(slices), index, ptr, nbytes, stream)


def read_to_device(
    core: _core.Array,
    slices: Sequence[tuple[int, int, int]],
    shape: tuple[int, ...],
    spec: DeviceSpec,
    like: Like | None,
    out: Any,
) -> Any:
    """Reads a resolved selection into memory on ``spec`` (a "cuda" or "framework" device); see
    :meth:`zarr_device.Array.read` for what ``like`` and ``out`` select."""
    if spec.kind == "cpu":
        raise UsageError("read_to_device reads to a GPU or framework device, not to the CPU")
    if like is not None and like not in LIKES:
        raise UsageError(f"like={like!r} is not one of {', '.join(map(repr, LIKES))} or None")
    if like == "numpy":
        raise UsageError(
            f"like='numpy' makes host arrays, but device={spec.name!r} was asked for: use like='torch', "
            "'cupy', 'jax' or None (a DLPack array) with a GPU device, or device='cpu' for NumPy"
        )
    if out is not None:
        framework = _out_framework(out)
        if framework is None:
            raise UsageError(
                f"out must be a torch tensor or a CuPy array on {spec.name}, not {type(out).__name__}"
            )
        if like is not None and like != framework:
            raise UsageError(f"out is a {framework} array but like={like!r} was asked for")
    if spec.kind == "framework":
        return _read_framework(core, slices, shape, spec, like, out)
    assert spec.index is not None
    return _read_to_cuda(core, slices, shape, spec.index, like, out)


@dataclass
class CudaDestination:
    """Where a read to a CUDA device lands: device memory (``ptr``, ``nbytes``) that ``result``
    owns, allocated on ``stream``; ``finish`` turns the filled result into what the caller gets."""

    result: Any
    ptr: int
    nbytes: int
    stream: int
    finish: Callable[[Any], Any] | None = None


def cuda_destination(
    dtype: str, shape: tuple[int, ...], index: int, like: Like | None, out: Any
) -> CudaDestination:
    """Allocates (or checks ``out`` as) the memory a read of ``shape`` and ``dtype`` fills on CUDA
    device ``index``, as ``like`` asks; nothing is read yet."""
    from zarr_device.adapters import cupy as cupy_adapter
    from zarr_device.adapters import torch as torch_adapter

    if out is not None:
        if torch_adapter.is_tensor(out):
            ptr, nbytes = torch_adapter.check_out(out, shape, dtype, f"cuda:{index}")
            return CudaDestination(out, ptr, nbytes, torch_adapter.consumer_stream(index))
        ptr, nbytes = cupy_adapter.check_out(out, shape, dtype, index)
        return CudaDestination(out, ptr, nbytes, cupy_adapter.consumer_stream(index))
    if like == "torch":
        tensor = torch_adapter.empty(shape, dtype, device=f"cuda:{index}")
        ptr, nbytes = torch_adapter.pointer(tensor)
        return CudaDestination(tensor, ptr, nbytes, torch_adapter.consumer_stream(index))
    if like == "cupy":
        array = cupy_adapter.empty(shape, dtype, index)
        ptr, nbytes = cupy_adapter.pointer(array)
        return CudaDestination(array, ptr, nbytes, cupy_adapter.consumer_stream(index))
    finish = None
    if like == "jax":
        from zarr_device.adapters import jax as jax_adapter

        jax_adapter.jax_dtype(dtype)  # refuse a type, or a device, JAX cannot hold before any I/O
        jax_adapter.device(index)
        finish = jax_adapter.from_device_array
    # Fresh engine-owned device memory, wrapped as a DLPack-exporting array.
    from zarr_device.dtypes import to_numpy_dtype

    nbytes = int(to_numpy_dtype(dtype).itemsize)
    for n in shape:
        nbytes *= n
    buffer = _core.DeviceBuffer(index, nbytes)
    return CudaDestination(_core.DeviceArray(buffer, list(shape), dtype), buffer.ptr, nbytes, 0, finish)


def _read_to_cuda(
    core: _core.Array,
    slices: Sequence[tuple[int, int, int]],
    shape: tuple[int, ...],
    index: int,
    like: Like | None,
    out: Any,
) -> Any:
    destination = cuda_destination(core.dtype, shape, index, like, out)
    _read_cuda(core, slices, index, destination.ptr, destination.nbytes, destination.stream)
    return destination.finish(destination.result) if destination.finish else destination.result


def write_from_device(
    core: _core.Array,
    slices: Sequence[tuple[int, int, int]],
    shape: tuple[int, ...],
    values: Any,
    what: str,
) -> bool:
    """Writes ``values`` held on a CUDA device (torch, CuPy or JAX) straight from device memory:
    the engine lays chunks out, and compresses zstd chunks, on the GPU. False (nothing written)
    for values elsewhere, which the caller writes through the host. Casts as host writes do
    (:func:`zarr_device.casting.check_cast`; ``what`` names the array in errors)."""
    from zarr_device.adapters import cupy as cupy_adapter
    from zarr_device.adapters import torch as torch_adapter
    from zarr_device.casting import check_cast
    from zarr_device.dtypes import to_numpy_dtype

    source = None
    if type(values).__module__.split(".")[0] == "jax" and _jax_on_gpu(values):
        try:
            from torch.utils.dlpack import from_dlpack
        except ImportError:
            return False
        values = from_dlpack(values)
    framework = torch_adapter.is_tensor(values) or cupy_adapter.is_array(values)
    if framework:
        target = to_numpy_dtype(core.dtype)
        try:
            given = to_numpy_dtype(str(values.dtype).removeprefix("torch."))
        except FormatError:
            given = None  # a type without a Zarr name: the conversion below reports it
        if given is not None:
            check_cast(
                given,
                target,
                python_values=False,
                what=what,
                bounds=lambda: (values.min().item(), values.max().item()) if _count(values) else (0, 0),
            )
    if torch_adapter.is_tensor(values):
        source = torch_adapter.cuda_source(values, core.dtype, shape)
    elif cupy_adapter.is_array(values):
        source = cupy_adapter.cuda_source(values, core.dtype, shape)
    if source is None or cuda_device_count() == 0:
        return False
    index, address, nbytes, stream, owner = source
    if nbytes:
        core.write_cuda(list(slices), index, address, nbytes, stream)
    del owner  # the memory written from stays alive until here
    return True


def _count(values: Any) -> int:
    """Elements of a torch tensor or CuPy array."""
    return int(values.numel()) if hasattr(values, "numel") else int(values.size)


def _jax_on_gpu(values: Any) -> bool:
    try:
        return all(d.platform == "gpu" for d in values.devices())
    except (AttributeError, RuntimeError):
        return False


def _read_framework(
    core: _core.Array,
    slices: Sequence[tuple[int, int, int]],
    shape: tuple[int, ...],
    spec: DeviceSpec,
    like: Like | None,
    out: Any,
) -> Any:
    from zarr_device.adapters import torch as torch_adapter

    if like not in (None, "torch") or (out is not None and not torch_adapter.is_tensor(out)):
        raise UsageError(
            f"device {spec.name!r} is reached through PyTorch: use like='torch' (or a torch tensor "
            f"on {spec.name} as out)"
        )
    if out is not None:
        torch_adapter.check_out_shape(out, shape, core.dtype)
    staging = torch_adapter.pinned_empty(shape, core.dtype)
    core.read(list(slices), torch_adapter.byte_view(staging))
    return torch_adapter.to_device(staging, spec.name, out=out)
