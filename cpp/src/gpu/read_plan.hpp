// Planning a device read: the chunks (and inner chunks of shards) that selections of one or many
// arrays touch, as one list of leaves, each routed (fill, copy, device decode, CPU decode).
#pragma once

#include <array>
#include <span>
#include <vector>

#include "engine/thread_pool.hpp"
#include "gpu/read_leaf.hpp"
#include "zarr_device/cuda.hpp"

namespace zarr_device::gpu {

// One array's part of a read: a selection of `array`, landing in `out` (device memory, the
// selection's shape).
struct ReadTarget {
  const Array* array = nullptr;
  std::vector<DimSlice> selection;
  StridedView out;
  // Where its chunks are read from: a view of the array's store for this one read (StoreViews),
  // or null for the array's store itself.
  const Store* store = nullptr;
};

// The device decoders present (nvCOMP's, on this machine), by kind.
struct DeviceDecoders {
  std::array<bool, DeviceDecoding::kKinds> present{};
  [[nodiscard]] bool has(DecodeKind kind) const { return present[static_cast<std::size_t>(kind)]; }
};

// A chunk changed between a read's plan and its fetch (a writer replaced it): the read starts
// again from a new plan, so it never mixes two versions of one chunk.
class ValueChanged : public StoreError {
 public:
  using StoreError::StoreError;
};

// Plans every target's chunks, in parallel on `pool` (reading shard indexes), leaves in target
// order. Errors name the array and the chunk.
std::vector<Leaf> plan_reads(std::span<const ReadTarget> targets, const DeviceDecoders& decoders,
                             GpuDecode policy, engine::ThreadPool& pool, std::size_t workers);

// Decides how a stored chunk travels: by what its codecs can do on the device, the decoders
// present and the policy (kChecked: device decoding only under a crc32c).
void choose_route(Leaf& leaf, const DeviceDecoders& decoders, GpuDecode policy);

// Whether a device-decode leaf's stored bytes (crc32c trailers included) are of the plain form the
// device decoder takes; false sends it to the CPU decoder, which raises on corruption.
bool device_can_take(const Leaf& leaf, std::span<const std::byte> stored);

}  // namespace zarr_device::gpu
