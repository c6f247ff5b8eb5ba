// Stores implemented in Python, in module zarr_device._core.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "zarr_device/store.hpp"

// A store over a Python object with get/set/erase/erase_prefix/list_dir/size/describe; when it
// also has get_many, sizes_many and get_ranges, the store offers BatchedGets (the engine's reads
// then hand it many chunks, or many ranges of shards, in one call).
std::shared_ptr<zarr_device::Store> make_python_store(nanobind::object impl, bool read_only);
