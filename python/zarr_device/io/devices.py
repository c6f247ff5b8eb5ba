"""Parsing ``device=`` arguments into the device a read lands on (reading itself is
:mod:`zarr_device.io.transfers`' and the adapters').

Three kinds of target:

* ``cpu``: host memory (NumPy arrays or CPU torch tensors).
* ``cuda``: an NVIDIA GPU the engine writes to itself, decoding on the GPU where it can.
* ``framework``: any other device PyTorch knows (Apple ``mps``, Intel ``xpu``, ``cuda`` on ROCm
  builds of torch, ...). The engine decodes into a host staging of at most ``staging_bytes``
  (pinned, where torch can pin) and torch copies it to the device
  (:mod:`zarr_device.io.staged_reads`).
"""

from __future__ import annotations

import importlib.util
import operator
import re
import sys
from dataclasses import dataclass
from typing import Any, Literal, Union

import zarr_device._core as _core
from zarr_device.errors import DeviceError, UsageError

#: The handle CUDA gives the legacy default stream (whose own handle, 0, means "no stream" to the
#: engine): ``cudaStreamLegacy``.
CUDA_STREAM_LEGACY = 1

__all__ = [
    "DeviceSpec",
    "DeviceLike",
    "CPU",
    "CUDA_STREAM_LEGACY",
    "parse_device",
    "cuda_device_count",
    "cuda_build_info",
]

DeviceKind = Literal["cpu", "cuda", "framework"]

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
