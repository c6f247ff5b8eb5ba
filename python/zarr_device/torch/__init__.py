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
except ImportError:
    from zarr_device.errors import UsageError

    raise UsageError("zarr_device.torch needs PyTorch: pip install torch") from None

from zarr_device.torch.distributed import load_distributed
from zarr_device.torch.format import FORMAT_VERSION, decode_name, encode_name
from zarr_device.torch.load import iter_load, load, metadata
from zarr_device.torch.load_into import CheckpointMismatchError, LoadResult, load_into
from zarr_device.torch.save import save

__all__ = [
    "save",
    "load",
    "iter_load",
    "load_distributed",
    "load_into",
    "metadata",
    "LoadResult",
    "CheckpointMismatchError",
    "FORMAT_VERSION",
    "encode_name",
    "decode_name",
]
