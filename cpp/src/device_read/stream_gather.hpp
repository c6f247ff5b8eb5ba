// Where each byte of a block decoded stream by stream comes from: the host-side arithmetic of the
// GPU's gather (cuda/kernels.hpp, launch_gather_blocks), testable without a GPU. A block's bytes
// are byte-shuffled elements of `typesize` bytes (byte j of element i at j * elements + i, the
// bytes past the last whole element as they are; typesize 1: no shuffle), cut into `streams`
// equal parts in order (DeviceStreams' blocks).
#pragma once

#include <cstdint>

#include "basics/host_device.hpp"

namespace zarr_device::device_read {

struct StreamByte {
  std::uint32_t stream = 0;
  std::uint32_t offset = 0;  // in that stream's decoded bytes
};

// The source of byte `at` of a block's unshuffled bytes (blocks are below 2 GiB: Blosc's sizes
// are 32-bit, and so is this arithmetic, which the GPU does per byte).
ZD_HOST_DEVICE inline StreamByte stream_byte(std::uint32_t at, std::uint32_t bytes,
                                             std::uint32_t typesize, std::uint32_t streams) {
  const std::uint32_t elements = bytes / typesize;
  const std::uint32_t shuffled =
      at < elements * typesize ? (at % typesize) * elements + at / typesize : at;
  const std::uint32_t part = bytes / streams;
  const std::uint32_t stream = shuffled / part;
  return {stream, shuffled - stream * part};
}

}  // namespace zarr_device::device_read
