"""PyTorch checkpoints on Zarr: a state dict saved as a Zarr v3 group, one array per tensor
(docs/checkpoint-format.md), loaded in one parallel pipeline onto the CPU or a GPU.

>>> import zarr_device.torch as zt
>>> zt.save(model, "model.zarr")
>>> state = zt.load("model.zarr", device="cuda")
>>> with torch.device("meta"):
...     fresh = Model()
>>> zt.load_into(fresh, "model.zarr", device="cuda")

No pickle: a checkpoint is JSON and array data, and loading one runs no code. Importing this
module imports torch; ``import zarr_device`` alone does not.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401 - a clear error when PyTorch is missing
except ImportError as _error:
    from zarr_device.io.adapters.base import import_failure

    # Not installed: what to install; installed but failing (a library that cannot be mapped, a
    # broken install): the cause.
    raise import_failure("torch", "zarr_device.torch needs PyTorch: pip install torch", _error) from _error

import os
from pathlib import Path
from typing import Union

from zarr_device.io import leftover_trees
from zarr_device.torch.device_map import plan_device_map
from zarr_device.torch.distributed import load_distributed
from zarr_device.torch.format import FORMAT_VERSION, decode_name, encode_name
from zarr_device.torch.load import auto_device_map, iter_load, load, metadata
from zarr_device.errors import MissingChunkError
from zarr_device.torch.load_into import CheckpointMismatchError, LoadResult, UnfilledTensorError, load_into
from zarr_device.torch.save import save
from zarr_device.torch.weights import iter_weights

__all__ = [
    "save",
    "load",
    "iter_load",
    "iter_weights",
    "load_distributed",
    "load_into",
    "metadata",
    "plan_device_map",
    "auto_device_map",
    "partials",
    "remove_partials",
    "LoadResult",
    "CheckpointMismatchError",
    "UnfilledTensorError",
    "MissingChunkError",
    "FORMAT_VERSION",
    "encode_name",
    "decode_name",
]


def partials(path: Union[str, "os.PathLike[str]"]) -> list[Path]:
    """What saves to ``path`` killed part-way left beside it: ``<path>.partial-<hex>`` (a
    checkpoint being written, or the old one on its way out) and ``<path>.replaced-<hex>``. A
    load of ``path`` never reads them; they only take space (docs/checkpoint-format.md)."""
    return leftover_trees.leftovers(path)


def remove_partials(path: Union[str, "os.PathLike[str]"], *, older_than_s: float = 0.0) -> list[Path]:
    """Removes :func:`partials` of ``path`` (those last modified at least ``older_than_s`` seconds
    ago) and returns them; ``path`` itself is never touched. A save in progress writes into such
    a directory too: call this when no save to ``path`` is running, or pass an age longer than a
    save takes."""
    return leftover_trees.remove_leftovers(path, older_than_s=older_than_s)
