// Small CUDA kernels of the GPU read path: placing decoded elements into the output (strided,
// with byte order changes, which also covers transposes) and filling regions with a fill value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace zarr_device::cuda {

constexpr int kMaxKernelRank = 16;

struct StridedCopy {
  int rank = 0;
  std::int64_t shape[kMaxKernelRank] = {};
  std::int64_t src_strides[kMaxKernelRank] = {};  // bytes
  std::int64_t dst_strides[kMaxKernelRank] = {};  // bytes
  const std::byte* src = nullptr;                 // device memory
  std::byte* dst = nullptr;                       // device memory
  int element_size = 1;
  int swap_unit = 1;  // > 1: reverse the bytes of each swap_unit-sized piece
};

// Copies every element of the region (src may have stride 0 everywhere: then it is a fill).
void launch_strided_copy(const StridedCopy& copy, cudaStream_t stream);

}  // namespace zarr_device::cuda
