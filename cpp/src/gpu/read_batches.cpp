#include "gpu/read_batches.hpp"

#include <algorithm>
#include <cmath>

namespace zarr_device::gpu {

std::size_t plan_decode_regions(std::span<Leaf> leaves, const DecodeCosts& costs,
                                const PerKind& output_alignment, std::size_t slots, bool in_place) {
  double staged = 0;
  double cost = 0;
  for (auto& leaf : leaves) {
    if (leaf.route != Route::kDeviceDecode) continue;
    const auto kind = static_cast<std::size_t>(leaf.codec);
    leaf.decode_scratch = in_place && decodes_in_place(leaf, output_alignment[kind])
                              ? 0
                              : align_up(leaf.spec->nbytes(), kStagingAlignment);
    staged += static_cast<double>(align_up(leaf.length, kStagingAlignment));
    cost += static_cast<double>(costs[kind].per_chunk + leaf.decode_scratch);
  }
  if (cost == 0) return 1;
  const auto regions =
      static_cast<std::size_t>(std::ceil(static_cast<double>(slots) * staged / cost));
  return std::clamp<std::size_t>(regions, 1,
                                 std::max<std::size_t>(1, std::min(slots, kMaxDecodeRegions)));
}

LargestLeaf largest_staged(std::span<const Leaf> leaves) {
  const Leaf* largest = nullptr;
  for (const auto& leaf : leaves) {
    if (!largest || staged_bytes(leaf) > staged_bytes(*largest)) largest = &leaf;
  }
  if (!largest) return {};
  return {staged_bytes(*largest), largest->array ? largest->where() : std::string()};
}

std::size_t batch_target(std::span<const Leaf> leaves, std::size_t capacity, std::size_t slots) {
  std::size_t total = 0;
  for (const auto& leaf : leaves) total += align_up(staged_bytes(leaf), kStagingAlignment);
  return std::min(
      std::clamp(total / std::max<std::size_t>(slots, 1), kMinBatchBytes, kCopyBatchBytes),
      capacity);
}

std::vector<Batch> pack_batches(std::span<Leaf> leaves, std::size_t capacity, std::size_t target,
                                const DecodeCosts& costs, std::size_t decode_budget) {
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
          throw OutOfMemoryError(leaf.where() + ": chunk of " + std::to_string(need) +
                                 " bytes is larger than a staging slot (" +
                                 std::to_string(capacity) + " bytes); raise staging_bytes");
        }
        break;
      }
      // Copies are cut at the target; batches with decodes (on the device or on CPU threads) fill
      // their slot: decoding is slow per chunk and fast only with many chunks at once, and a CPU
      // batch's chunks are decoded by as many threads as it holds chunks.
      const bool decoding = decodes > 0 || cpu_decodes > 0 || leaf.route == Route::kDeviceDecode ||
                            leaf.route == Route::kCpuDecode;
      if (end > begin && !decoding && at + need > target) break;
      if (leaf.route == Route::kCpuDecode) ++cpu_decodes;
      if (leaf.route == Route::kDeviceDecode) {
        const auto& cost = costs[static_cast<std::size_t>(leaf.codec)];
        if (decodes > 0 &&
            cost.region(decodes + 1, scratch + leaf.decode_scratch) > decode_budget) {
          break;
        }
        ++decodes;
        scratch += leaf.decode_scratch;
      }
      leaf.staging = at;
      leaf.staged = need;
      used = at + need;
      ++end;
    }
    batches.push_back({begin, end});
    begin = end;
  }
  return batches;
}

}  // namespace zarr_device::gpu
