// Planning a device read: the chunks (and inner chunks of shards) that selections of one or many
// arrays touch, as one list of leaves, each routed (fill, copy, device decode, CPU decode).
#pragma once

#include <array>
#include <span>
#include <vector>

#include "device_read/read_leaf.hpp"
#include "engine/thread_pool.hpp"
#include "read/read_plan.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::device_read {

// The targets of a device read: their outputs are device memory.
using read::ReadTarget;

// The device decoders present (nvCOMP's, on this machine), by kind: in the caller's process, and
// in the decoder process (where its program is installed).
struct DeviceDecoders {
  std::array<bool, DeviceDecoding::kKinds> present{};
  std::array<bool, DeviceDecoding::kKinds> isolated{};
  [[nodiscard]] bool has(DecodeKind kind) const { return present[static_cast<std::size_t>(kind)]; }
  [[nodiscard]] bool has_isolated(DecodeKind kind) const {
    return isolated[static_cast<std::size_t>(kind)];
  }
};

// A chunk changed between a read's plan and its fetch (a writer replaced it): the read starts
// again from a new plan, so it never mixes two versions of one chunk.
class ValueChanged : public StoreError {
 public:
  using StoreError::StoreError;
};

// Chunks (not inner chunks of shards) whose codecs store them in at most this many bytes are
// planned without asking the store for their size (StoredBytes::sized false, room for the most they
// can be): the fetch opens each chunk anyway, and learns there whether and how large it is stored.
// Finding a chunk's file is most of what planning it costs (a path walk: the benchmark notebook,
// "Small chunks sized by their fetch"), and for small chunks that doubled the work per file of a
// read; a large chunk pays it once against milliseconds of reading, and is sized exactly, so that
// its slot holds what it stores, not its bound.
inline constexpr std::size_t kSizedAtFetchBytes = std::size_t{1} << 20;

// How chunks are sized by a plan: as above, or every one asked for its size now (for callers
// that read the stored bytes themselves, which need their exact sizes).
enum class PlanSizes { kAtFetch, kNow };

// Lays out the chunks of a read plan (read/read_plan.hpp) of `targets` as leaves, in parallel on
// `pool` (reading shard indexes and expanding shards into their inner chunks), in target order.
// Errors name the array and the chunk.
std::vector<Leaf> plan_reads(std::span<const ReadTarget> targets, const DeviceDecoders& decoders,
                             GpuDecode policy, engine::ThreadPool& pool, std::size_t workers,
                             PlanSizes sizes = PlanSizes::kAtFetch);

// Decides how a stored chunk travels: by what its codecs can do on the device, the decoders
// present and the policy (GpuDecode says which chunks decode in the caller's process, which in the
// decoder process).
Decoding choose_route(const PlannedChunk& planned, const DeviceDecoders& decoders,
                      GpuDecode policy);

// Whether a device-decode leaf's stored bytes (crc32c trailers included) are of the plain form the
// device decoder takes; false sends it to the CPU decoder, which raises on corruption.
bool device_can_take(const Leaf& leaf, std::span<const std::byte> stored);

}  // namespace zarr_device::device_read
