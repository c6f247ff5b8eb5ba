#include "shared_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace zarr_device::cuda {

OpenedLibrary open_shared_library(const char* override_variable,
                                  std::initializer_list<const char*> names) {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv(override_variable)) candidates.emplace_back(path);
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
