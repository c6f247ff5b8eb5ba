#include "read_ring.hpp"

namespace zarr_device::cuda {

std::shared_ptr<DeviceContext> context_for(int device, const CudaReadOptions& options) {
  // Leaked: freeing pinned memory at exit races with the driver's own teardown.
  static auto* cache = new ContextCache<DeviceContext, std::pair<std::size_t, int>>();
  return cache->get(device, {options.staging_bytes, options.slots}, [&] {
    return std::make_shared<DeviceContext>(device, options.staging_bytes, options.slots);
  });
}

}  // namespace zarr_device::cuda
