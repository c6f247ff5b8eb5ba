"""PyTorch adapter: results allocated as torch tensors (every Zarr type torch has, bfloat16 and
float8 included, which NumPy cannot hand over through DLPack)."""

from __future__ import annotations

from typing import Any

from zarr_device.errors import UsageError

__all__ = ["torch_dtype", "empty", "byte_view"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UsageError("like='torch' needs PyTorch: pip install torch") from None
    return torch


def torch_dtype(zarr_name: str) -> Any:
    """The torch dtype of a Zarr data type name; UsageError when torch has none."""
    torch = _torch()
    names = {"bool": "bool", "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}
    dtype = getattr(torch, names.get(zarr_name, zarr_name), None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"torch has no dtype for Zarr data type '{zarr_name}'")
    return dtype


def empty(shape: tuple[int, ...], zarr_name: str) -> Any:
    """An uninitialised CPU tensor to read into."""
    return _torch().empty(shape, dtype=torch_dtype(zarr_name))


def byte_view(tensor: Any) -> Any:
    """The tensor's bytes as a flat uint8 tensor (no copy)."""
    torch = _torch()
    if not tensor.is_contiguous() or tensor.device.type != "cpu":
        raise UsageError("out must be a contiguous CPU tensor")
    return tensor.reshape(-1).view(torch.uint8)
