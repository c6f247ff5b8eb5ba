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

// The fast way through a block whose bytes are byte planes of whole elements of TS bytes: plane j
// (byte j of every element) is stream j when the block has TS streams (Blosc's split blocks), or
// the j-th part of its one stream. The GPU takes four elements at a time, a 32-bit word of each
// plane, and writes TS words of output: per byte, no division and no byte-wide load or store
// (stream_byte divides twice per byte). False where the block is laid out otherwise.
ZD_HOST_DEVICE inline bool has_planes(std::uint32_t bytes, std::uint32_t typesize,
                                      std::uint32_t streams) {
  return streams == 1 || (streams == typesize && bytes % typesize == 0);
}

// Four elements from the words of their planes (word j: byte j of elements 0-3, in the order a
// little-endian load gives them), as the TS words they are in memory: byte r of word k is
// byte (4k + r) % TS of element (4k + r) / TS. The loops unroll, TS being a constant.
template <std::uint32_t TS>
ZD_HOST_DEVICE inline void interleave_planes(const std::uint32_t (&planes)[TS],
                                             std::uint32_t (&words)[TS]) {
  for (std::uint32_t k = 0; k < TS; ++k) {
    std::uint32_t word = 0;
    for (std::uint32_t r = 0; r < 4; ++r) {
      const std::uint32_t at = 4 * k + r;
      word |= ((planes[at % TS] >> (8 * (at / TS))) & 0xFFU) << (8 * r);
    }
    words[k] = word;
  }
}

}  // namespace zarr_device::device_read
