#include "write_ring.hpp"

namespace zarr_device::cuda {

WriteContexts& write_contexts() {
  // Leaked, like the read rings.
  static auto* pool = new WriteContexts(kContextsPerDevice);
  return *pool;
}

WriteContexts::Lease write_context_for(int device, std::size_t staging_bytes) {
  return write_contexts().acquire(
      device, staging_bytes, [&] { return std::make_unique<WriteContext>(device, staging_bytes); });
}

}  // namespace zarr_device::cuda
