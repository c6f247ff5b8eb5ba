#include "gpu/decode_share.hpp"

#include <algorithm>
#include <vector>

namespace zarr_device::gpu {

double decode_seconds(double device_bytes, double cpu_bytes, double largest, double fetched,
                      const DecodeRates& rates) {
  const double threads = static_cast<double>(std::max<std::size_t>(rates.cpu_threads, 1));
  double device = 0;
  if (device_bytes > 0) {
    const double lanes = static_cast<double>(std::max<std::size_t>(rates.device_lanes, 1));
    device = std::max(largest, device_bytes / lanes) / rates.device_chunk;
  }
  // The CPU threads fetch every stored byte and decode their share. A CPU-decoded chunk waits
  // decoded in a staging slot until its batch crosses: the ring holds so many at once, and about
  // half of its slots are being filled while the others cross.
  double cpu = fetched / rates.cpu_fetch / threads;
  if (cpu_bytes > 0) {
    const double staging = static_cast<double>(std::max<std::size_t>(rates.staging_bytes, 1));
    const double slots_wanted = static_cast<double>(std::max<std::size_t>(rates.slots, 1));
    const double slots = std::clamp(std::floor(staging / largest), 1.0, slots_wanted);
    const double per_slot = std::max(1.0, std::floor(staging / slots / largest));
    const double in_flight = (std::floor(slots / 2) + 1) * per_slot;
    const double lanes = std::min(threads, in_flight);
    cpu = std::max({cpu + cpu_bytes / rates.cpu_thread / threads,
                    cpu_bytes / (lanes * rates.cpu_thread), largest / rates.cpu_thread});
  }
  return std::max(device, cpu);
}

std::size_t share_decodes(std::span<Leaf> leaves, DecodeKind kind, const DecodeRates& rates) {
  double total = 0;
  double largest = 0;
  double fetched = 0;
  for (const auto& leaf : leaves) {
    fetched += static_cast<double>(leaf.length);
    if (leaf.route != Route::kDeviceDecode || leaf.codec != kind) continue;
    const auto decoded = static_cast<double>(leaf.spec->nbytes());
    total += decoded;
    largest = std::max(largest, decoded);
  }
  if (total == 0) return 0;
  // The CPU's share of the bytes, on a grid fine enough for the estimate's accuracy.
  constexpr int kSteps = 64;
  std::vector<double> seconds(kSteps + 1);
  double best = 0;
  for (int s = 0; s <= kSteps; ++s) {
    const double share = static_cast<double>(s) / kSteps;
    seconds[s] = decode_seconds(total * (1 - share), total * share, largest, fetched, rates);
    best = s == 0 ? seconds[0] : std::min(best, seconds[s]);
  }
  int chosen = 0;
  while (seconds[chosen] > best * 1.02) ++chosen;  // within 2% of the best, the device's
  if (chosen == 0) return 0;
  const double share = static_cast<double>(chosen) / kSteps;
  // In order, each leaf to the CPU while the CPU's bytes lag the share of the bytes seen so far.
  std::size_t moved = 0;
  double seen = 0;
  double on_cpu = 0;
  for (auto& leaf : leaves) {
    if (leaf.route != Route::kDeviceDecode || leaf.codec != kind) continue;
    const auto decoded = static_cast<double>(leaf.spec->nbytes());
    seen += decoded;
    if (on_cpu + decoded / 2 <= share * seen) {
      leaf.route = Route::kCpuDecode;
      on_cpu += decoded;
      ++moved;
    }
  }
  return moved;
}

}  // namespace zarr_device::gpu
