#include "read_ring.hpp"

#include <algorithm>
#include <string>

namespace zarr_device::cuda {

ReadContexts::Lease context_for(int device, const CudaReadOptions& options,
                                const gpu::LargestLeaf& largest) {
  const std::size_t configured = static_cast<std::size_t>(std::max(options.slots, 1));
  const std::size_t needed = align_up(largest.bytes + BatchArrays::bytes(), kSlotPage);
  const std::size_t fit = options.staging_bytes / needed;
  if (fit == 0) {
    throw OutOfMemoryError(largest.where + ": a chunk of " + std::to_string(largest.bytes) +
                           " bytes does not fit the staging of " +
                           std::to_string(options.staging_bytes) + " bytes; raise staging_bytes");
  }
  const int slots = static_cast<int>(std::min(configured, fit));
  // Leaked: freeing pinned memory at exit races with the driver's own teardown.
  static auto* pool = new ReadContexts(kContextsPerDevice);
  return pool->acquire(device, {options.staging_bytes, slots}, [&] {
    return std::make_unique<DeviceContext>(device, options.staging_bytes, slots);
  });
}

}  // namespace zarr_device::cuda
