"""zarr-device: Zarr arrays read and written by a parallel C++ engine, straight into the memory
their users compute on.

>>> import zarr_device as zd
>>> arr = zd.create("data.zarr", shape=(1000, 1000), dtype="float32", chunks=(250, 250))
>>> arr[:] = 1.0
>>> zd.open_array("data.zarr")[10:20, ::2].sum()
"""

from __future__ import annotations

from zarr_device.api import (
    Array,
    CreateMode,
    Group,
    OpenMode,
    create,
    create_group,
    open,
    open_array,
    open_group,
)
from zarr_device.config import IoConfig, get_config, set_config
from zarr_device.dtypes import ZARR_DTYPE_NAMES
from zarr_device.errors import (
    ChecksumError,
    CodecError,
    DeviceError,
    FormatError,
    NodeNotFoundError,
    OutOfMemoryError,
    SelectionError,
    StoreError,
    UsageError,
    ZarrDeviceError,
)
from zarr_device.stores import LocalStore, MemoryStore, ZarrStoreAdapter

__version__ = "0.1.0"

__all__ = [
    "Array",
    "Group",
    "OpenMode",
    "CreateMode",
    "open",
    "open_array",
    "open_group",
    "create",
    "create_group",
    "IoConfig",
    "get_config",
    "set_config",
    "ZARR_DTYPE_NAMES",
    "LocalStore",
    "MemoryStore",
    "ZarrStoreAdapter",
    "ZarrDeviceError",
    "FormatError",
    "CodecError",
    "ChecksumError",
    "StoreError",
    "NodeNotFoundError",
    "SelectionError",
    "UsageError",
    "DeviceError",
    "OutOfMemoryError",
]
