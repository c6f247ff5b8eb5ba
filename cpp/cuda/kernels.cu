#include "kernels.hpp"

namespace zarr_device::cuda {
namespace {

template <int kSize>
struct alignas(kSize <= 16 ? kSize : 16) Element {
  unsigned char bytes[kSize];
};

// One thread per element; the index arithmetic is cheap next to the memory traffic. Elements are
// moved as whole words when the pointers allow it.
template <int kSize>
__global__ void strided_copy_kernel(StridedCopy p, std::int64_t count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    std::int64_t rest = i;
    std::int64_t src = 0;
    std::int64_t dst = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const std::int64_t index = rest % p.shape[d];
      rest /= p.shape[d];
      src += index * p.src_strides[d];
      dst += index * p.dst_strides[d];
    }
    Element<kSize> e = *reinterpret_cast<const Element<kSize>*>(p.src + src);
    if (p.swap_unit > 1) {
      for (int u = 0; u < kSize; u += p.swap_unit) {
        for (int a = u, b = u + p.swap_unit - 1; a < b; ++a, --b) {
          const unsigned char t = e.bytes[a];
          e.bytes[a] = e.bytes[b];
          e.bytes[b] = t;
        }
      }
    }
    *reinterpret_cast<Element<kSize>*>(p.dst + dst) = e;
  }
}

__global__ void strided_copy_bytes_kernel(StridedCopy p, std::int64_t count) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    std::int64_t rest = i;
    std::int64_t src = 0;
    std::int64_t dst = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const std::int64_t index = rest % p.shape[d];
      rest /= p.shape[d];
      src += index * p.src_strides[d];
      dst += index * p.dst_strides[d];
    }
    for (int b = 0; b < p.element_size; ++b) {
      int from = b;
      if (p.swap_unit > 1)
        from = (b / p.swap_unit) * p.swap_unit + (p.swap_unit - 1 - b % p.swap_unit);
      p.dst[dst + b] = p.src[src + from];
    }
  }
}

bool aligned(const StridedCopy& p, int alignment) {
  if (reinterpret_cast<std::uintptr_t>(p.src) % alignment != 0 ||
      reinterpret_cast<std::uintptr_t>(p.dst) % alignment != 0) {
    return false;
  }
  for (int d = 0; d < p.rank; ++d) {
    if (p.src_strides[d] % alignment != 0 || p.dst_strides[d] % alignment != 0) return false;
  }
  return true;
}

}  // namespace

void launch_strided_copy(const StridedCopy& copy, cudaStream_t stream) {
  std::int64_t count = 1;
  for (int d = 0; d < copy.rank; ++d) count *= copy.shape[d];
  if (count == 0) return;
  const int threads = 256;
  const std::int64_t wanted = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(wanted < 65535 * 8 ? wanted : 65535 * 8);
  const int size = copy.element_size;
  if (size <= 16 && (size & (size - 1)) == 0 && aligned(copy, size)) {
    switch (size) {
      case 1:
        strided_copy_kernel<1><<<blocks, threads, 0, stream>>>(copy, count);
        return;
      case 2:
        strided_copy_kernel<2><<<blocks, threads, 0, stream>>>(copy, count);
        return;
      case 4:
        strided_copy_kernel<4><<<blocks, threads, 0, stream>>>(copy, count);
        return;
      case 8:
        strided_copy_kernel<8><<<blocks, threads, 0, stream>>>(copy, count);
        return;
      case 16:
        strided_copy_kernel<16><<<blocks, threads, 0, stream>>>(copy, count);
        return;
      default:
        break;
    }
  }
  strided_copy_bytes_kernel<<<blocks, threads, 0, stream>>>(copy, count);
}

}  // namespace zarr_device::cuda
