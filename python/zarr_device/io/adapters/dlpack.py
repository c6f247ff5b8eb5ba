"""The adapter of ``like=None`` on a CUDA device: engine-owned device memory as a
``_core.DeviceArray``, which any framework imports through DLPack without a copy
(``torch.from_dlpack``, ``cupy.from_dlpack``, ``jax.dlpack.from_dlpack``), bfloat16 and float8
included."""

from __future__ import annotations

from typing import Any, ClassVar

from zarr_device.io.adapters.base import Adapter, Destination, Target, engine_destination, gpu_only
from zarr_device.io.devices import DeviceSpec

__all__ = ["DLPackAdapter"]


class DLPackAdapter(Adapter):
    like: ClassVar[str | None] = None
    array_name: ClassVar[str] = "DLPack array"
    module: ClassVar[str] = "zarr_device._core"
    array_types: ClassVar[tuple[str, ...]] = ()

    def owns(self, obj: Any) -> bool:
        return False  # results only: out= takes the frameworks' arrays

    def check_device(self, device: DeviceSpec) -> None:
        gpu_only("None", device)

    def allocate(self, target: Target) -> Destination:
        self.check_device(target.device)
        return engine_destination(target)
