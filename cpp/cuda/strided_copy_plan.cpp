#include "kernels.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {

StridedCopy plan_strided_copy(const std::byte* src, std::span<const std::int64_t> src_strides,
                              const StridedView& dst, std::size_t element_size, bool swap,
                              std::size_t swap_unit) {
  const auto loop = place::simplify_copy(dst.shape, src_strides, dst.byte_strides);
  if (loop.shape.size() > static_cast<std::size_t>(kMaxKernelRank)) {
    throw UsageError("selections of more than " + std::to_string(kMaxKernelRank) +
                     " non-contiguous dimensions are not supported on the GPU");
  }
  StridedCopy c;
  c.rank = static_cast<int>(loop.shape.size());
  for (int d = 0; d < c.rank; ++d) {
    c.shape[d] = loop.shape[d];
    c.src_strides[d] = loop.src[d];
    c.dst_strides[d] = loop.dst[d];
  }
  c.src = src;
  c.dst = dst.data;
  c.element_size = static_cast<int>(element_size);
  c.swap_unit = swap ? static_cast<int>(swap_unit) : 1;
  return c;
}

}  // namespace zarr_device::cuda
