#include "write_ring.hpp"

namespace zarr_device::cuda {

WriteContexts::Lease write_context_for(int device, std::size_t staging_bytes) {
  // Leaked, like the read rings.
  static auto* pool = new WriteContexts(kContextsPerDevice);
  return pool->acquire(device, staging_bytes,
                       [&] { return std::make_unique<WriteContext>(device, staging_bytes); });
}

}  // namespace zarr_device::cuda
