"""The zarr-python 3 plug-in: a codec pipeline and buffers that make ``zarr.open_array(...)[...]``
and assignments go through the zarr-device engine, into NumPy, CuPy, torch or JAX arrays.

>>> import zarr, zarr_device
>>> with zarr_device.enable(device="cpu", like="torch"):
...     z = zarr.open_array("data.zarr", mode="r")
...     t = z[10:20]          # a torch.Tensor, read by the engine

Importing this package does not import zarr-python; :func:`enable` does.
"""

from __future__ import annotations

from typing import Any

from zarr_device.zarr_plugin.enable import Enabled, disable, enable, is_enabled

__all__ = ["enable", "disable", "is_enabled", "Enabled", "DevicePipeline", "FallbackWarning"]


def __getattr__(name: str) -> Any:
    # The pipeline and its warning need zarr-python: imported on first use.
    if name in ("DevicePipeline", "FallbackWarning"):
        from zarr_device.zarr_plugin import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'zarr_device.zarr_plugin' has no attribute {name!r}")
