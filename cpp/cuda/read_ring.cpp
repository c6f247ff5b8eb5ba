#include "read_ring.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "cuda_check.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {
namespace {

struct DeferredFailures {
  std::mutex mutex;
  std::map<int, std::vector<std::string>> by_device;
};

DeferredFailures& deferred() {
  static auto* failures = new DeferredFailures;  // leaked: used until the process ends
  return *failures;
}

}  // namespace

std::string settle(Slot& slot) {
  if (!slot.busy) return {};
  slot.busy = false;
  std::string failure;
  const cudaError_t synced = cudaEventSynchronize(slot.done);
  if (synced == cudaSuccess) {
    const auto arrays = BatchArrays::at(slot.host + slot.capacity);
    for (const auto& check : slot.checks) {
      const int status = arrays.statuses[check.index];
      const std::size_t size = arrays.sizes[check.index];
      if (status != 0 || size != check.expected) {
        failure = check.where + ": the GPU decoder reported status " + std::to_string(status) +
                  " and " + std::to_string(size) + " bytes, expected " +
                  std::to_string(check.expected);
        break;
      }
    }
  }
  slot.checks.clear();
  ZD_CUDA_CHECK(synced);
  return failure;
}

void defer_failure(int device, std::string message) {
  auto& failures = deferred();
  const std::lock_guard lock(failures.mutex);
  failures.by_device[device].push_back(std::move(message));
}

void settle_later(int device, Slot& slot) {
  if (auto failure = settle(slot); !failure.empty()) defer_failure(device, std::move(failure));
}

void raise_deferred_failures(int device) {
  std::vector<std::string> found;
  {
    auto& failures = deferred();
    const std::lock_guard lock(failures.mutex);
    const auto it = failures.by_device.find(device);
    if (it == failures.by_device.end() || it->second.empty()) return;
    found = std::move(it->second);
    failures.by_device.erase(it);
  }
  std::string message =
      "an earlier read onto cuda:" + std::to_string(device) +
      " that did not wait for its data (non_blocking) returned wrong values: " + found.front();
  if (found.size() > 1) message += " (and " + std::to_string(found.size() - 1) + " more)";
  throw CodecError(message);
}

ReadContexts& read_contexts() {
  // Leaked: freeing pinned memory at exit races with the driver's own teardown.
  static auto* pool = new ReadContexts(kContextsPerDevice);
  return *pool;
}

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
  return read_contexts().acquire(device, {options.staging_bytes, slots, options.decode_bytes}, [&] {
    return std::make_unique<DeviceContext>(device, options.staging_bytes, slots,
                                           options.decode_bytes);
  });
}

}  // namespace zarr_device::cuda
