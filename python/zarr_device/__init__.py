"""zarr-device: Zarr arrays read and written by a parallel C++ engine, straight into the memory
their users compute on.

>>> import zarr_device as zd
>>> arr = zd.create("data.zarr", shape=(1000, 1000), dtype="float32", chunks=(250, 250))
>>> arr[:] = 1.0
>>> zd.open_array("data.zarr")[10:20, ::2].sum()
"""

from __future__ import annotations

import glob as _glob
import os as _os


def _locate_nvcomp() -> None:
    # The GPU path opens nvCOMP on first use; point it at the library of the
    # nvidia-libnvcomp-cu13 wheel when that is installed and nothing else was chosen.
    if "ZARR_DEVICE_NVCOMP_LIBRARY" in _os.environ:
        return
    try:
        import nvidia.libnvcomp as _nvcomp  # type: ignore[import-untyped]
    except ImportError:
        return
    found = sorted(_glob.glob(_os.path.join(_os.path.dirname(_nvcomp.__file__), "lib64", "libnvcomp.so.*")))
    if found:
        _os.environ["ZARR_DEVICE_NVCOMP_LIBRARY"] = found[-1]


_locate_nvcomp()


def _locate_cufile() -> None:
    # Likewise cuFile (GPUDirect Storage, io="gds"), from the nvidia-cufile wheel.
    if "ZARR_DEVICE_CUFILE_LIBRARY" in _os.environ:
        return
    try:
        import nvidia
    except ImportError:
        return
    for root in nvidia.__path__:
        for folder in ("cu13", "cufile"):
            found = sorted(_glob.glob(_os.path.join(root, folder, "lib", "libcufile.so.*")))
            if found:
                _os.environ["ZARR_DEVICE_CUFILE_LIBRARY"] = found[0]
                return


_locate_cufile()

# The public API, gathered from the package's layers, each importing only those below it:
# basics/ (data types, casting, sizes, settings, progress bars) < io/ (stores, devices,
# transfers, adapters, atomic directory writes) < core/ (arrays, groups, create, read_many) < the
# integrations (zarr_plugin/, torch/, transformers.py, vllm.py, dask.py) and tools/ (the CLI,
# convert, fsck). errors.py is for all of them (docs/architecture.md, "Python package").
from zarr_device.core.array import Array
from zarr_device.core.create import create
from zarr_device.core.group import Group, create_group, open, open_array, open_group
from zarr_device.core.nodes import CreateMode, OpenMode
from zarr_device.basics.config import IoConfig, get_config, set_config
from zarr_device.convert.shared import ConvertSummary
from zarr_device.convert.zarr_to_zarr import convert
from zarr_device.core.many import iter_many, read_many
from zarr_device.io.devices import DeviceSpec, cuda_build_info, cuda_device_count, parse_device
from zarr_device.basics.numpy_dtypes import ZARR_DTYPE_NAMES
from zarr_device.errors import (
    ChecksumError,
    CodecError,
    DeviceError,
    FormatError,
    MissingChunkError,
    NodeNotFoundError,
    OutOfMemoryError,
    SelectionError,
    StoreError,
    UsageError,
    ZarrDeviceError,
)
from zarr_device.io.stores import LocalStore, MemoryStore, ZarrStoreAdapter
from zarr_device.io.transfers import empty_cache, synchronize
from zarr_device.zarr_plugin import disable, enable
from zarr_device.zarr_plugin.enable import register_with_zarr

register_with_zarr(if_imported=True)

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
    "read_many",
    "convert",
    "ConvertSummary",
    "iter_many",
    "synchronize",
    "empty_cache",
    "IoConfig",
    "get_config",
    "set_config",
    "ZARR_DTYPE_NAMES",
    "register_with_zarr",
    "DeviceSpec",
    "parse_device",
    "cuda_device_count",
    "cuda_build_info",
    "LocalStore",
    "MemoryStore",
    "ZarrStoreAdapter",
    "enable",
    "disable",
    "ZarrDeviceError",
    "FormatError",
    "MissingChunkError",
    "CodecError",
    "ChecksumError",
    "StoreError",
    "NodeNotFoundError",
    "SelectionError",
    "UsageError",
    "DeviceError",
    "OutOfMemoryError",
]
