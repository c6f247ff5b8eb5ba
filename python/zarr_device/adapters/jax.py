"""JAX adapter: results handed to JAX through DLPack from device memory the engine owns (no copy
where JAX accepts the buffer's alignment; the engine's allocations are 256-byte aligned)."""

from __future__ import annotations

import importlib
from typing import Any

from zarr_device import _core
from zarr_device.dtypes import to_numpy_dtype
from zarr_device.errors import DeviceError, UsageError

__all__ = ["jax_dtype", "device", "from_device_array"]


def _jax() -> Any:
    try:
        return importlib.import_module("jax")
    except ImportError:
        raise UsageError('like=\'jax\' needs JAX with CUDA support: pip install "jax[cuda12]"') from None


def jax_dtype(zarr_name: str) -> Any:
    """The JAX dtype of a Zarr data type name. UsageError when JAX lacks the type, or when it is a
    64-bit type and 64-bit mode is off (JAX would silently narrow it to 32 bits)."""
    jax = _jax()
    jnp = importlib.import_module("jax.numpy")
    if zarr_name == "bfloat16" or zarr_name.startswith("float8"):
        dtype = getattr(jnp, zarr_name, None)
        if dtype is None:
            raise UsageError(f"JAX {jax.__version__} has no dtype for Zarr data type '{zarr_name}'")
        return dtype
    dtype = to_numpy_dtype(zarr_name)
    if (dtype.itemsize == 8 and dtype.kind in "iuf") or dtype.itemsize == 16:
        if not bool(jax.config.jax_enable_x64):
            raise UsageError(
                f"JAX narrows {zarr_name} to 32 bits unless 64-bit mode is on: call "
                "jax.config.update('jax_enable_x64', True) first, or read with like='torch'"
            )
    return dtype


def device(index: int) -> Any:
    """The JAX device of CUDA device ``index`` (DeviceError when JAX does not see it)."""
    jax = _jax()
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as e:
        raise DeviceError(f"JAX sees no GPU ({e}): install JAX with CUDA support") from None
    for candidate in gpus:
        if int(candidate.local_hardware_id) == index:
            return candidate
    raise DeviceError(f"JAX does not see CUDA device {index} (it sees {gpus})")


def from_device_array(array: _core.DeviceArray) -> Any:
    """Hands engine-owned device memory to JAX (a legacy DLPack capsule, which is what JAX asks
    for) on the device it lives on; the memory is freed when JAX drops the array."""
    return _jax().dlpack.from_dlpack(array)
