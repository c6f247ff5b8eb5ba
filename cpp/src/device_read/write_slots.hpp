// How a write from a GPU divides its staging (host C++, so GoogleTest checks it without a GPU).
#pragma once

#include <algorithm>
#include <cstddef>

namespace zarr_device::device_read {

// A write's batches alternate between two slots: one is encoded on the GPU while the other's
// chunks are stored.
inline constexpr std::size_t kWriteSlots = 2;

// Each slot's share of staging_bytes, which is the whole pinned staging of a write as of a read:
// an equal part, rounded down to whole MiB (so that the slots together stay within it) and at
// least one MiB.
constexpr std::size_t write_slot_bytes(std::size_t staging_bytes) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  return std::max(staging_bytes / kWriteSlots / kMiB * kMiB, kMiB);
}

}  // namespace zarr_device::device_read
