// Regions of an array: which elements a selection takes in each dimension, and where elements lie
// in memory. The words that selections, codecs and the strided copies share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zarr_device {

// One dimension of a selection inside a chunk: elements start, start + step, ... (count of them).
struct DimSlice {
  std::int64_t start = 0;
  std::int64_t step = 1;
  std::int64_t count = 0;
};

// Where decoded elements go (or where encoded elements come from): a base pointer, the shape of the
// selected region and a byte stride per dimension. Strides may be anything, so a transpose is a
// permutation of strides, not a copy.
struct StridedView {
  std::byte* data = nullptr;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> byte_strides;
};

}  // namespace zarr_device
