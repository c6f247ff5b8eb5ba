// Stores in module zarr_device._core: the engine's Store, and the local, memory and Python-backed
// stores (used by zarr_device/io/stores.py).
#pragma once

#include <nanobind/nanobind.h>

// Store (get, set, erase, erase_prefix, list_dir, exists, size, describe, read_only),
// local_store(root, io, read_only), memory_store(read_only), python_store(impl, read_only).
void bind_stores(nanobind::module_& m);
