#include "shared_library.hpp"

#include <dlfcn.h>

#include <vector>

namespace zarr_device::cuda {

OpenedLibrary open_shared_library(EnvironmentVariable override_variable,
                                  std::initializer_list<const char*> names) {
  std::vector<std::string> candidates;
  if (auto path = environment_value(override_variable)) candidates.push_back(std::move(*path));
  candidates.insert(candidates.end(), names.begin(), names.end());
  OpenedLibrary opened;
  for (const auto& name : candidates) {
    opened.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (opened.handle) {
      opened.name = name;
      return opened;
    }
    const char* why = dlerror();
    opened.errors += name + ": " + (why ? why : "not found") + "; ";
  }
  return opened;
}

}  // namespace zarr_device::cuda
