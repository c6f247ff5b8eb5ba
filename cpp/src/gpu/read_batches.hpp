// Batching a device read: leaves packed, in order, into batches that fit a pinned staging slot and
// whose device decodes fit a decode region; the decode memory split into as many regions as the
// data calls for. Pure host logic: every figure it needs is given.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "gpu/read_leaf.hpp"

namespace zarr_device::gpu {

inline constexpr std::size_t kMaxBatch = 8192;         // leaves per slot
inline constexpr std::size_t kStagingAlignment = 256;  // of every leaf in a slot
inline constexpr std::size_t kMaxDecodeRegions = 8;    // CUDA's hardware queues per device

// What decoding chunks at once costs in device memory: the decoder's temporary memory, linear in
// the chunks of one call, then scratch for the chunks not decoded straight into place.
struct DecodeCost {
  std::size_t first = 0;      // temporary bytes for a call's first chunk
  std::size_t per_chunk = 0;  // for each further chunk
  // Region bytes of a call of `chunks` chunks (at least one) whose scratch totals `scratch`.
  [[nodiscard]] std::size_t region(std::size_t chunks, std::size_t scratch) const {
    return align_up(first + per_chunk * (chunks - 1), kStagingAlignment) + scratch;
  }
};
using DecodeCosts = std::array<DecodeCost, DeviceDecoding::kKinds>;
using PerKind = std::array<std::size_t, DeviceDecoding::kKinds>;

// Sets each device decode's scratch (none when it decodes straight into its place: whole,
// contiguous, aligned to its decoder's `output_alignment`) and returns how many regions the decode
// memory of a ring of `slots` slots is best split into.
//
// A batched decoder decodes a chunk per thread block: its speed follows the chunks decoded at
// once, not how they are split into calls (measured on an H200, 256 KiB zstd chunks: about 17 GB/s
// with 512 in flight, 30 with 1024, 95 with 8192), while its temporary memory grows with them.
// A batch is cut where its slot or its decode region is full, and the batches of R regions decode
// at once: min(R x a slot's chunks, the decode memory's chunks) in flight. The fewest regions
// that reach the memory's limit make the largest calls; more streams than CUDA's hardware queues
// would share them.
std::size_t plan_decode_regions(std::span<Leaf> leaves, const DecodeCosts& costs,
                                const PerKind& output_alignment, std::size_t slots);

struct Batch {
  std::size_t begin = 0;  // leaves [begin, end)
  std::size_t end = 0;
};

// Packs `leaves` in order into batches: as many as fit a slot of `capacity` bytes (at most
// kMaxBatch) and whose device decodes fit a region of `decode_budget` bytes; sets each leaf's
// place in its slot. OutOfMemoryError naming the chunk when one leaf is larger than a slot.
std::vector<Batch> pack_batches(std::span<Leaf> leaves, std::size_t capacity,
                                const DecodeCosts& costs, std::size_t decode_budget);

}  // namespace zarr_device::gpu
