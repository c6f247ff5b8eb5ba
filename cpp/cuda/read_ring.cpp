#include "read_ring.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <vector>

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

std::string first_failure(std::span<const PendingCheck> checks, const int* statuses,
                          const std::size_t* sizes) {
  for (const auto& check : checks) {
    const int status = statuses[check.index];
    const std::size_t size = sizes[check.index];
    if (status != 0 || size != check.expected) {
      return check.where + ": the GPU decoder reported status " + std::to_string(status) + " and " +
             std::to_string(size) + " bytes, expected " + std::to_string(check.expected);
    }
  }
  return {};
}

std::string settle(Slot& slot) {
  if (!slot.busy) return {};
  slot.busy = false;
  std::string failure;
  const cudaError_t synced = cudaEventSynchronize(slot.done);
  if (synced == cudaSuccess) {
    failure = first_failure(slot.checks, slot.host_arrays.statuses, slot.host_arrays.sizes);
  }
  slot.checks.clear();
  ZD_CUDA_CHECK(synced);
  return failure;
}

namespace {

struct SpareReports {
  std::mutex mutex;
  std::map<int, std::vector<DecodeReport>> by_device;
};

SpareReports& spare_reports() {
  static auto* reports = new SpareReports;  // leaked, as the rings are
  return *reports;
}

}  // namespace

DecodeReport take_report(int device) {
  {
    auto& spare = spare_reports();
    const std::lock_guard lock(spare.mutex);
    auto& reports = spare.by_device[device];
    if (!reports.empty()) {
      const DecodeReport report = reports.back();
      reports.pop_back();
      return report;
    }
  }
  ZD_CUDA_CHECK(cudaSetDevice(device));
  DecodeReport report;
  void* memory = nullptr;
  ZD_CUDA_CHECK(cudaHostAlloc(&memory, kMaxBatch * (sizeof(int) + sizeof(std::size_t)),
                              cudaHostAllocPortable));
  report.sizes = static_cast<std::size_t*>(memory);
  report.statuses = reinterpret_cast<int*>(report.sizes + kMaxBatch);
  if (const cudaError_t made = cudaEventCreateWithFlags(&report.done, cudaEventDisableTiming);
      made != cudaSuccess) {
    cudaFreeHost(memory);
    ZD_CUDA_CHECK(made);
  }
  return report;
}

void give_back_report(int device, DecodeReport report) noexcept {
  auto& spare = spare_reports();
  const std::lock_guard lock(spare.mutex);
  try {
    spare.by_device[device].push_back(report);
  } catch (...) {  // out of memory for the list: the report is let go of
    cudaEventDestroy(report.done);
    cudaFreeHost(report.sizes);
  }
}

AwaitedBatch::AwaitedBatch(int device, cudaStream_t stream, const int* statuses,
                           const std::size_t* sizes, std::vector<PendingCheck> checks,
                           std::size_t batch)
    : device_(device), batch_(batch), report_(take_report(device)) {
  try {
    std::size_t count = 0;
    for (const auto& check : checks) count = std::max(count, check.index + 1);
    if (count) {
      ZD_CUDA_CHECK(cudaMemcpyAsync(report_.statuses, statuses, count * sizeof(int),
                                    cudaMemcpyDeviceToHost, stream));
      ZD_CUDA_CHECK(cudaMemcpyAsync(report_.sizes, sizes, count * sizeof(std::size_t),
                                    cudaMemcpyDeviceToHost, stream));
    }
    ZD_CUDA_CHECK(cudaEventRecord(report_.done, stream));
  } catch (...) {
    give_back_report(device_, report_);
    throw;
  }
  checks_ = std::move(checks);
}

AwaitedBatch::AwaitedBatch(int device, Slot& slot, std::size_t batch)
    : AwaitedBatch(device, slot.stream, slot.device_arrays.statuses, slot.device_arrays.sizes,
                   std::move(slot.checks), batch) {
  slot.checks.clear();
}

std::string AwaitedBatch::settle() const {
  ZD_CUDA_CHECK(cudaEventSynchronize(report_.done));
  return first_failure(checks_, report_.statuses, report_.sizes);
}

bool AwaitedBatch::ended() const { return cudaEventQuery(report_.done) != cudaErrorNotReady; }

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

namespace {

// Small reads (one chunk each from many threads, as Dask's per-chunk tasks make) find the full
// rings lent when more threads read than there are rings, and would queue behind each other's
// reads though each needs a sliver of a ring. They take a small ring instead, up to
// kSmallRingsPerDevice of them: through the full rings, many threads reading one small chunk each
// got less than the CPU path gave them (the benchmark notebook, "Single-chunk reads from many
// threads, reads at once, a process's first read").
constexpr std::size_t kSmallReadBytes = std::size_t{16} << 20;  // staged by the whole read
constexpr std::size_t kSmallRingBytes = std::size_t{32} << 20;
constexpr std::size_t kSmallRingSlots = 4;
constexpr std::size_t kSmallRingDecodeBytes = std::size_t{128} << 20;
constexpr std::size_t kSmallRingsPerDevice = 12;

// Leaked: freeing pinned memory at exit races with the driver's own teardown.
auto* const full_rings = new ReadContexts(kContextsPerDevice);
auto* const small_rings = new ReadContexts(kSmallRingsPerDevice);

}  // namespace

std::array<ReadContexts*, 2> read_rings() { return {full_rings, small_rings}; }

ReadContexts::Lease context_for(int device, const device_read::StagingShape& staging,
                                const device_read::StagingNeed& need) {
  const device_read::StagingShape& full = staging;
  auto make = [device](const device_read::StagingShape& shape) {
    return [device, shape] { return std::make_unique<DeviceContext>(device, shape); };
  };
  auto fitted = [&](ReadContexts::Lease lease) {
    lease->fit(need.largest, need.where);
    return lease;
  };
  if (need.total > kSmallReadBytes || staging.bytes <= kSmallRingBytes) {
    return fitted(full_rings->acquire(device, full, make(full)));
  }
  // A small read takes a full ring when one is free (a loop on one thread keeps its ring), and a
  // small one rather than wait for it.
  if (auto lease = full_rings->try_acquire(device, full, make(full))) {
    return fitted(std::move(*lease));
  }
  const auto small =
      device_read::StagingShape::of(kSmallRingBytes, std::min(staging.slots, kSmallRingSlots),
                                    staging.decode_bytes == 0  // (automatic: sized by the device)
                                        ? kSmallRingDecodeBytes
                                        : std::min(staging.decode_bytes, kSmallRingDecodeBytes));
  return fitted(small_rings->acquire(device, small, make(small)));
}

}  // namespace zarr_device::cuda
