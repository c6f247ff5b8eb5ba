// Locks by name within this process, for stores whose data only this process sees (memory) or
// that offer nothing better (stores implemented in Python).
#pragma once

#include <memory>
#include <string>

#include "zarr_device/store.hpp"

namespace zarr_device::stores {

// Waits until no one else holds `name`, then holds it until the result is destroyed.
std::unique_ptr<KeyLock> lock_in_process(std::string name);

}  // namespace zarr_device::stores
