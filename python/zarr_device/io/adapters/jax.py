"""JAX adapter: results handed to JAX through DLPack from device memory the engine owns (no copy
where JAX accepts the buffer's alignment; the engine's allocations are 256-byte aligned). JAX
arrays are immutable (no ``out=``); values to write on a GPU go to the engine through torch's
DLPack import."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

import zarr_device._core as _core
from zarr_device.io.adapters.base import (
    Adapter,
    CudaSource,
    Destination,
    Target,
    engine_destination,
    gpu_only,
    import_framework,
)
from zarr_device.io.devices import CPU, DeviceSpec, parse_device
from zarr_device.basics.numpy_dtypes import to_numpy_dtype
from zarr_device.errors import DeviceError, UsageError

__all__ = ["JaxAdapter", "jax_dtype", "device"]


def _jax() -> Any:
    return import_framework("jax", 'like=\'jax\' needs JAX with CUDA support: pip install "jax[cuda12]"')


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


def _on_gpu(values: Any) -> bool:
    try:
        return all(d.platform == "gpu" for d in values.devices())
    except (AttributeError, RuntimeError):
        return False


class JaxAdapter(Adapter):
    like: ClassVar[str | None] = "jax"
    array_name: ClassVar[str] = "JAX array"
    module: ClassVar[str] = "jax"
    array_types: ClassVar[tuple[str, ...]] = ("Array",)

    def device_of(self, array: Any) -> DeviceSpec:
        devices = list(array.devices())
        return parse_device(devices[0]) if len(devices) == 1 else CPU

    def check_device(self, device: DeviceSpec) -> None:
        gpu_only("jax", device)

    def allocate(self, target: Target) -> Destination:
        self.check_device(target.device)
        assert target.device.index is not None
        jax_dtype(target.dtype)  # refuse a type, or a device, JAX cannot hold before any I/O
        device(target.device.index)
        return engine_destination(target, self.wrap)

    def wrap(self, buffer: Any, dtype: str) -> Any:
        """Hands engine-owned device memory to JAX (a legacy DLPack capsule, which is what JAX
        asks for) on the device it lives on; the memory is freed when JAX drops the array."""
        assert isinstance(buffer, _core.DeviceArray)
        return _jax().dlpack.from_dlpack(buffer)

    def to_host(self, values: Any) -> npt.NDArray[Any]:
        return np.asarray(values)

    def cuda_source(self, values: Any, dtype: str, shape: tuple[int, ...], what: str) -> CudaSource | None:
        if not _on_gpu(values):
            return None
        try:
            from torch.utils.dlpack import from_dlpack

            tensor = from_dlpack(values)
        except (ImportError, RuntimeError, TypeError, BufferError):
            return None  # no torch, or one that cannot import this array: through the host
        from zarr_device.io.adapters import adapter

        return adapter("torch").cuda_source(tensor, dtype, shape, what)
