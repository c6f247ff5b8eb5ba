// Opening an optional shared library at run time (nvCOMP, cuFile): the package works without
// them, and a user can point at a copy of their own.
#pragma once

#include <initializer_list>
#include <string>

#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {

struct OpenedLibrary {
  void* handle = nullptr;  // nullptr when none could be opened; kept open for the process
  std::string name;        // the name that opened
  std::string errors;      // why each name failed, "name: reason; " each
};

// dlopen of the first that opens of: the path in the environment variable `override_variable`
// (when set), then `names` (found on the loader's search path).
OpenedLibrary open_shared_library(EnvironmentVariable override_variable,
                                  std::initializer_list<const char*> names);

}  // namespace zarr_device::cuda
