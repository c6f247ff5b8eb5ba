#include "device_read/read_batches.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "device_read/leaf_parts.hpp"

namespace zarr_device::device_read {

double device_decodes_per_slot(std::span<const Leaf> leaves, std::size_t capacity) {
  double staged = 0;
  std::size_t chunks = 0;
  for (const auto& leaf : leaves) {
    if (leaf.decoding.route != Route::kDeviceDecode) continue;
    staged += static_cast<double>(align_up(leaf.stored.length, kStagingAlignment));
    ++chunks;
  }
  if (chunks == 0) return std::numeric_limits<double>::infinity();
  return std::max(1.0,
                  std::floor(static_cast<double>(capacity) * static_cast<double>(chunks) / staged));
}

bool decodes_off_slots(std::span<const Leaf> leaves, std::size_t capacity,
                       std::size_t decode_memory, const DecodeCosts& costs) {
  if (device_decodes_per_slot(leaves, capacity) >= kFewPerSlot) return false;
  std::size_t largest = 0;  // decode memory of the costliest chunk alone
  for (const auto& leaf : leaves) {
    if (leaf.decoding.route != Route::kDeviceDecode) continue;
    largest = std::max(largest, costs[static_cast<std::size_t>(leaf.decoding.codec)].region(
                                    1, leaf.staging.scratch_bytes));
  }
  return largest <= off_slot_decode_budget(capacity, decode_memory);
}

std::size_t off_slot_decode_budget(std::size_t capacity, std::size_t decode_memory) {
  // A batch's first range is its slot's bytes and its arrays (a few entries per chunk).
  const std::size_t first =
      capacity + kMaxBatch * (5 * sizeof(void*) + sizeof(int)) + 2 * kStagingAlignment;
  return decode_memory > first ? (decode_memory - first) / 2 : 0;
}

std::size_t off_slot_streams(std::span<const Leaf> leaves, std::size_t decode_memory) {
  double each = 0;  // stored and decoded bytes of a device decode, on average
  std::size_t chunks = 0;
  for (const auto& leaf : leaves) {
    if (leaf.decoding.route != Route::kDeviceDecode) continue;
    each += static_cast<double>(leaf.stored.length + leaf.planned().spec->nbytes());
    ++chunks;
  }
  if (chunks == 0) return 1;
  each /= static_cast<double>(chunks);
  const double fit = std::ceil(static_cast<double>(decode_memory) / std::max(each, 1.0));
  return static_cast<std::size_t>(std::clamp(fit, 1.0, static_cast<double>(kMaxDecodeRegions)));
}

std::size_t plan_decode_regions(std::span<Leaf> leaves, const DecodeCosts& costs,
                                const PerKind& output_alignment, std::size_t slots,
                                std::size_t capacity, std::size_t decode_memory, bool in_place) {
  std::size_t chunks = 0;
  double per_chunk = 0;  // decode memory per further chunk of a call, on average
  double first = 0;      // a call's first chunk costs more (the largest over the codecs present)
  double scratch = 0;    // scratch per chunk, on average
  for (auto& leaf : leaves) {
    if (leaf.decoding.route != Route::kDeviceDecode) continue;
    const auto kind = static_cast<std::size_t>(leaf.decoding.codec);
    leaf.staging.scratch_bytes =
        in_place && decodes_in_place(leaf, output_alignment[kind]) ? 0 : decode_scratch_bytes(leaf);
    ++chunks;
    per_chunk += static_cast<double>(costs[kind].per_chunk);
    first = std::max(first, static_cast<double>(costs[kind].first));
    scratch += static_cast<double>(leaf.staging.scratch_bytes);
  }
  if (chunks == 0) return 1;
  const auto n = static_cast<double>(chunks);
  per_chunk /= n;
  scratch /= n;
  const double per_slot = device_decodes_per_slot(leaves, capacity);
  const std::size_t most = std::max<std::size_t>(
      1, std::min(slots, per_slot < kFewPerSlot ? kMaxDecodeRegions : kHardwareQueues));
  std::size_t best = 1;
  double best_in_flight = 0;
  for (std::size_t r = 1; r <= most; ++r) {
    // A region of budget B holds k chunks when first + per_chunk (k - 1) + scratch k <= B; a
    // region too small for one chunk is not a plan (one region always is: a batch's first chunk
    // is taken whatever it costs).
    const double budget = static_cast<double>(decode_memory) / static_cast<double>(r);
    const double fits =
        std::floor((budget - first + per_chunk) / std::max(per_chunk + scratch, 1.0));
    if (fits < 1 && r > 1) break;
    const double in_flight =
        std::min(n, static_cast<double>(r) * std::min(per_slot, std::max(fits, 1.0)));
    if (in_flight > best_in_flight) {
      best = r;
      best_in_flight = in_flight;
    }
  }
  return best;
}

StagingNeed staging_need(std::span<const Leaf> leaves) {
  const Leaf* largest = nullptr;
  std::size_t total = 0;
  for (const auto& leaf : leaves) {
    total += align_up(staged_bytes(leaf), kStagingAlignment);
    if (!largest || staged_bytes(leaf) > staged_bytes(*largest)) largest = &leaf;
  }
  if (!largest) return {};
  return {staged_bytes(*largest),
          largest->planned().array ? largest->planned().where() : std::string(), total};
}

std::size_t batch_target(const StagingNeed& need, std::size_t capacity, std::size_t slots) {
  return std::min(
      std::clamp(need.total / std::max<std::size_t>(slots, 1), kMinBatchBytes, kCopyBatchBytes),
      capacity);
}

std::size_t decode_batch_target(const StagingNeed& need, std::size_t capacity, bool waits) {
  if (!waits) return capacity;
  return std::min(std::max(need.total / kWaitingPieces, kMinDecodeBatchBytes), capacity);
}

std::size_t fetch_ahead(std::span<const Leaf> batch, std::size_t slots) {
  if (slots < 2) return 0;
  bool cpu = false;
  for (const auto& leaf : batch) {
    if (decodes_on_device(leaf.decoding.route)) return slots / 2;
    cpu = cpu || leaf.decoding.route == Route::kCpuDecode || checks_around(leaf);
  }
  return cpu ? slots - 1 : slots / 2;
}

std::vector<Batch> pack_batches(std::span<Leaf> leaves, std::size_t capacity, std::size_t target,
                                const DecodeCosts& costs, std::size_t decode_budget,
                                std::size_t decode_target) {
  std::vector<Batch> batches;
  for (std::size_t begin = 0; begin < leaves.size();) {
    std::size_t used = 0;
    std::size_t end = begin;
    std::size_t decodes = 0;
    std::size_t cpu_decodes = 0;
    std::size_t scratch = 0;
    while (end < leaves.size() && end - begin < kMaxBatch) {
      auto& leaf = leaves[end];
      const std::size_t need = staged_bytes(leaf);
      const std::size_t at = align_up(used, kStagingAlignment);
      if (at + need > capacity) {
        if (end == begin) {
          throw OutOfMemoryError(leaf.planned().where() + ": chunk of " + std::to_string(need) +
                                 " bytes is larger than a staging slot (" +
                                 std::to_string(capacity) + " bytes); raise staging_bytes");
        }
        break;
      }
      // Copies are cut at the target; batches with decodes (on the device or on CPU threads) fill
      // their slot: decoding is slow per chunk and fast only with many chunks at once, and a CPU
      // batch's chunks are decoded by as many threads as it holds chunks.
      const bool decoding = decodes > 0 || cpu_decodes > 0 ||
                            decodes_on_device(leaf.decoding.route) ||
                            leaf.decoding.route == Route::kCpuDecode;
      if (end > begin && !decoding && at + need > target) break;
      // A read that waits for its device decodes cuts them finer (decode_batch_target).
      const bool on_cpu = cpu_decodes > 0 || leaf.decoding.route == Route::kCpuDecode;
      if (end > begin && decoding && !on_cpu && at + need > decode_target) break;
      if (leaf.decoding.route == Route::kCpuDecode) ++cpu_decodes;
      if (leaf.decoding.route == Route::kDeviceDecode) {
        const auto& cost = costs[static_cast<std::size_t>(leaf.decoding.codec)];
        if (decodes > 0 &&
            cost.region(decodes + 1, scratch + leaf.staging.scratch_bytes) > decode_budget) {
          break;
        }
        ++decodes;
        scratch += leaf.staging.scratch_bytes;
      }
      leaf.staging.offset = at;
      leaf.staging.bytes = need;
      used = at + need;
      ++end;
    }
    batches.push_back({begin, end});
    begin = end;
  }
  return batches;
}

}  // namespace zarr_device::device_read
