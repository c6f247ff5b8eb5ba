"""Adapters between the engine and array frameworks, one module per framework behind one protocol
(:class:`~zarr_device.io.adapters.base.Adapter`: allocation, ``out=`` checks, wrapping engine memory,
streams, values to write), and the one registry that finds them by ``like=`` name or by the type
of an array. Each adapter imports its framework only when called, so that ``import
zarr_device`` imports none of them."""

from __future__ import annotations

import importlib
from typing import get_args

from zarr_device.io.adapters.base import Adapter, Like
from zarr_device.io.devices import DeviceSpec
from zarr_device.errors import UsageError

__all__ = ["Like", "LIKES", "Adapter", "adapter", "adapter_of", "default_adapter"]

#: Every ``like=`` name, in the order arrays are matched against frameworks.
LIKES: tuple[str, ...] = get_args(Like)

# The module and class of each adapter; None: the engine's own DLPack arrays (like=None on a GPU).
_MODULES: dict[str | None, tuple[str, str]] = {
    "numpy": ("numpy", "NumpyAdapter"),
    "torch": ("torch", "TorchAdapter"),
    "cupy": ("cupy", "CupyAdapter"),
    "jax": ("jax", "JaxAdapter"),
    "mlx": ("mlx", "MlxAdapter"),
    "tensorflow": ("tensorflow", "TensorflowAdapter"),
    None: ("dlpack", "DLPackAdapter"),
}
assert set(LIKES) | {None} == set(_MODULES)

_LOADED: dict[str | None, Adapter] = {}


def adapter(like: str | None) -> Adapter:
    """The adapter of a ``like=`` name (UsageError for a name that is none)."""
    if like not in _MODULES:
        raise UsageError(f"like={like!r} is not one of {', '.join(map(repr, LIKES))} or None")
    if like not in _LOADED:
        module, name = _MODULES[like]
        _LOADED[like] = getattr(importlib.import_module(f"zarr_device.io.adapters.{module}"), name)()
    return _LOADED[like]


def adapter_of(obj: object) -> Adapter | None:
    """The adapter of the framework ``obj`` is an array of (None: none zarr-device knows)."""
    for like in LIKES:
        candidate = adapter(like)
        if candidate.owns(obj):
            return candidate
    return None


def default_adapter(device: DeviceSpec) -> Adapter:
    """The adapter of ``like=None``: NumPy on the CPU, torch on other torch devices, the engine's
    DLPack arrays on a CUDA device."""
    return adapter({"cpu": "numpy", "framework": "torch"}.get(device.kind))
