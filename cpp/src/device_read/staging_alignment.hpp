// Where things start in staging and scratch memory, for reads and writes alike: 256 bytes, what
// CUDA's allocations and nvCOMP's batched (de)compressors align their buffers to.
#pragma once

#include <cstddef>

namespace zarr_device::device_read {

inline constexpr std::size_t kStagingAlignment = 256;

inline constexpr std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace zarr_device::device_read
