// The pinned staging of a read onto a device as its options configure it: how many bytes, cut into
// how many slots of what size, and the device memory for decoding beside it. Worked out once as a
// read starts (host C++, so GoogleTest checks it without a GPU) and handed to every stage that
// plans against it (decode sharing, parts) and to the ring made for it.
#pragma once

#include <algorithm>
#include <cstddef>

namespace zarr_device::device_read {

// A slot's data is a whole number of the driver's 2 MiB pages, so the ring's slots hold exactly
// the staging, and a chunk of a quarter of the staging fills one of four slots.
inline constexpr std::size_t kSlotPage = std::size_t{2} << 20;

// The bytes of each slot of a staging of `staging_bytes` cut into `count` slots: whole pages.
constexpr std::size_t slot_bytes_of(std::size_t staging_bytes, std::size_t count) {
  return std::max<std::size_t>(
      staging_bytes / std::max<std::size_t>(count, 1) / kSlotPage * kSlotPage, kSlotPage);
}

struct StagingShape {
  std::size_t bytes = 0;  // the whole pinned staging
  // Its slots as configured: a read of chunks larger than a slot cuts the same bytes into fewer
  // (DeviceContext::fit).
  std::size_t slots = 1;
  std::size_t slot_bytes = 0;    // each of those slots: whole pages
  std::size_t decode_bytes = 0;  // device memory for decoding; 0: sized by the device

  // The shape of `bytes` in `slots` slots (at least one) with `decode_bytes` for decoding.
  static constexpr StagingShape of(std::size_t bytes, std::size_t slots, std::size_t decode_bytes) {
    slots = std::max<std::size_t>(slots, 1);
    return {bytes, slots, slot_bytes_of(bytes, slots), decode_bytes};
  }
  // Rings made for one shape are not lent to reads of another.
  bool operator==(const StagingShape&) const = default;
};

}  // namespace zarr_device::device_read
