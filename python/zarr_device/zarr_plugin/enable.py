"""Turning the plug-in on and off: zarr-python's config names the codec pipeline and the buffer
classes every array opened afterwards uses; :func:`enable` points them at this package's and
:func:`disable` puts back what was there. zarr-python is imported here only when enable() runs."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from zarr_device.io.adapters.base import import_failure, import_framework
from zarr_device.io.devices import DeviceLike, DeviceSpec, parse_device
from zarr_device.errors import UsageError

__all__ = ["enable", "disable", "Enabled", "is_enabled", "register_with_zarr"]

_PIPELINE = "zarr_device.zarr_plugin.pipeline.DevicePipeline"
_CPU_BUFFER = "zarr.buffer.cpu.Buffer"
_CONFIG_KEYS = ("codec_pipeline.path", "codec_pipeline.strict", "buffer", "ndbuffer")


@dataclass(frozen=True)
class _Saved:
    """What one enable() replaced."""

    config: dict[str, Any]
    torch_device: str
    jax_device: int | None


_stack: list[_Saved] = []


class Enabled:
    """What :func:`enable` returns: the plug-in is already on; as a context manager
    (``with zarr_device.enable(...):``) it is switched off again, to what was there before, on
    leaving the block. Entered again after that, it switches the plug-in on again with the same
    settings (a block entered twice, ``cfg = enable(...)`` then ``with cfg:`` in a loop, is on
    each time, not silently off)."""

    def __init__(self, depth: int, device: DeviceSpec, like: str, strict: bool) -> None:
        self._depth = depth
        self.device = device
        self.like = like
        self.strict = strict

    def __enter__(self) -> Enabled:
        if self._depth == 0:  # left once already: on again
            self._depth = enable(self.device.name, self.like, strict=self.strict)._depth
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        while self._depth and len(_stack) >= self._depth:
            disable()
        self._depth = 0

    def __repr__(self) -> str:
        return f"<zarr_device plug-in on {self.device.name}, like={self.like!r}>"


def _like_for(spec: DeviceSpec, like: str | None) -> str:
    if like is None:
        return {"cpu": "numpy", "cuda": "cupy"}.get(spec.kind, "torch")
    allowed = {"cpu": ("numpy", "torch", "jax"), "cuda": ("cupy", "torch", "jax"), "framework": ("torch",)}[spec.kind]
    if like not in allowed:
        raise UsageError(
            f"like={like!r} does not go with device={spec.name!r}: use one of {', '.join(map(repr, allowed))}"
        )
    return like


#: The buffer and NDBuffer classes zarr-python makes for each ``like=``.
_BUFFERS: dict[str, tuple[str, str]] = {
    "numpy": (_CPU_BUFFER, "zarr.buffer.cpu.NDBuffer"),
    "cupy": ("zarr.buffer.gpu.Buffer", "zarr.buffer.gpu.NDBuffer"),  # zarr-python's GPU buffers
    "torch": (_CPU_BUFFER, "zarr_device.zarr_plugin.buffers.TorchNDBuffer"),
    "jax": (_CPU_BUFFER, "zarr_device.zarr_plugin.buffers.JaxNDBuffer"),
}
#: The frameworks ``like=`` names beyond NumPy, and what to install when one is missing.
_INSTALL = {
    "cupy": "like='cupy' needs CuPy: pip install cupy-cuda12x (or cupy-cuda13x)",
    "torch": "like='torch' needs PyTorch: pip install torch",
    "jax": "like='jax' needs JAX: pip install jax",
}


def _buffer_classes(like: str) -> tuple[str, str]:
    if like in _INSTALL:
        import_framework(like, _INSTALL[like])
    return _BUFFERS[like]


def register_with_zarr(*, if_imported: bool = False) -> None:
    """Makes zarr-python know bfloat16 and the float8 types (:mod:`zarr_device.zarr_plugin.data_types`), so
    that ``zarr.open_array`` reads arrays that have them and ``zarr.create_array`` writes them.

    ``import zarr_device`` calls this when zarr is already imported (``if_imported``: importing
    zarr here would double the time ``import zarr_device`` takes); a program that imports zarr
    afterwards calls it itself. UsageError when zarr is not installed."""
    if if_imported and "zarr" not in sys.modules:
        return
    try:
        data_types = importlib.import_module("zarr_device.zarr_plugin.data_types")
    except ImportError as e:
        raise import_failure("zarr", "the zarr-python plug-in needs zarr-python: pip install zarr", e) from e
    data_types.register()


def enable(device: DeviceLike = "cpu", like: str | None = None, *, strict: bool = False) -> Enabled:
    """Makes zarr-python read and write arrays through the zarr-device engine, into memory on
    ``device``: ``zarr.open_array(...)[...]`` and assignments to it go through the engine, for
    arrays opened from now on.

    ``device``: "cpu", "cuda", "cuda:N" (or anything :func:`zarr_device.parse_device` takes).
    ``like``: what reads return: "numpy" (the default on the CPU), "cupy" (the default on a CUDA
    device; zarr-python's own GPU buffers), "torch" (a torch tensor on ``device``, the CPU
    included) or "jax" (a JAX array, decoded in host memory and handed to JAX, on CUDA device N
    when ``device`` names one). ``strict``: an array the engine cannot serve (a data type or codec
    it lacks) raises FormatError instead of being served by zarr-python's codecs with a
    :class:`~zarr_device.zarr_plugin.FallbackWarning`.

    Returns an :class:`Enabled`, which also works as a context manager; :func:`disable` undoes
    the last enable().
    """
    import zarr

    from zarr_device.zarr_plugin import buffers, pipeline  # registers the classes named below

    register_with_zarr()  # bfloat16 and float8, which the engine reads, for zarr-python too

    spec = parse_device(device)
    chosen = _like_for(spec, like)
    buffer, ndbuffer = _buffer_classes(chosen)
    torch_device = spec.name if chosen == "torch" else buffers.torch_device()
    jax_device = spec.index if chosen == "jax" and spec.kind == "cuda" else None
    saved = _Saved(
        config={key: zarr.config.get(key, None) for key in _CONFIG_KEYS},
        torch_device=buffers.torch_device(),
        jax_device=buffers.jax_device(),
    )
    zarr.config.set(
        {
            "codec_pipeline.path": _PIPELINE,
            pipeline.STRICT_KEY: bool(strict),
            "buffer": buffer,
            "ndbuffer": ndbuffer,
        }
    )
    buffers.set_torch_device(torch_device)
    buffers.set_jax_device(jax_device)
    _stack.append(saved)
    return Enabled(len(_stack), spec, chosen, bool(strict))


def disable() -> None:
    """Undoes the last :func:`enable`: zarr-python's config (codec pipeline, buffers) is what it
    was before it. Arrays opened while the plug-in was on keep using it. Does nothing when the
    plug-in is off."""
    if not _stack:
        return
    import zarr

    from zarr_device.zarr_plugin import buffers

    saved = _stack.pop()
    zarr.config.set(saved.config)
    buffers.set_torch_device(saved.torch_device)
    buffers.set_jax_device(saved.jax_device)


def is_enabled() -> bool:
    """Whether :func:`enable` is in force."""
    return bool(_stack)
