#include <algorithm>

#include "device_read/stream_gather.hpp"
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

// One thread block per shuffled block; its threads walk the output in order (coalesced writes),
// each gathering the bytes of its element from their streams.
__global__ void byte_unshuffle_kernel(const UnshuffleBlock* blocks) {
  const UnshuffleBlock b = blocks[blockIdx.x];
  const std::uint64_t elements = b.bytes / b.typesize;
  const std::uint64_t whole = elements * b.typesize;
  const auto* in = reinterpret_cast<const unsigned char*>(b.shuffled);
  auto* out = reinterpret_cast<unsigned char*>(b.out);
  for (std::uint64_t k = threadIdx.x; k < whole; k += blockDim.x) {
    const std::uint64_t element = k / b.typesize;
    const std::uint64_t byte = k % b.typesize;
    out[k] = in[byte * elements + element];
  }
  for (std::uint64_t k = whole + threadIdx.x; k < b.bytes; k += blockDim.x) out[k] = in[k];
}

// One whole chunk's unshuffle over the grid: a thread gathers an element's bytes from the streams
// (each read coalesced across the warp) and writes the element whole; the shuffle (kShuffle) reads
// an element whole and scatters its bytes to the streams.
template <int kTypesize, bool kShuffle>
__global__ void chunk_shuffling_kernel(const unsigned char* in, unsigned char* out,
                                       std::uint64_t elements) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < elements; i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    unsigned char element[kTypesize];
#pragma unroll
    for (int j = 0; j < kTypesize; ++j)
      element[j] = kShuffle ? in[i * kTypesize + j] : in[j * elements + i];
#pragma unroll
    for (int j = 0; j < kTypesize; ++j) {
      if constexpr (kShuffle) {
        out[j * elements + i] = element[j];
      } else {
        out[i * kTypesize + j] = element[j];
      }
    }
  }
}

template <bool kShuffle>
__global__ void chunk_shuffling_any_kernel(const unsigned char* in, unsigned char* out,
                                           std::uint64_t elements, std::uint64_t typesize) {
  const std::uint64_t whole = elements * typesize;
  for (std::uint64_t k = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       k < whole; k += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t streamed = (k % typesize) * elements + k / typesize;
    if constexpr (kShuffle) {
      out[streamed] = in[k];
    } else {
      out[k] = in[streamed];
    }
  }
}

template <bool kShuffle>
void launch_chunk_shuffling(const std::byte* from, std::byte* to, std::size_t bytes,
                            std::size_t typesize, cudaStream_t stream) {
  const auto* in = reinterpret_cast<const unsigned char*>(from);
  auto* out = reinterpret_cast<unsigned char*>(to);
  if (typesize <= 1) {
    if (bytes > 0) cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream);
    return;
  }
  const std::uint64_t elements = bytes / typesize;
  const std::uint64_t whole = elements * typesize;
  const int threads = 256;
  const std::uint64_t wanted = (elements + threads - 1) / threads;
  const auto blocks =
      static_cast<unsigned int>(wanted < 65535 * 8 ? (wanted > 0 ? wanted : 1) : 65535 * 8);
  switch (typesize) {
    case 2:
      chunk_shuffling_kernel<2, kShuffle><<<blocks, threads, 0, stream>>>(in, out, elements);
      break;
    case 4:
      chunk_shuffling_kernel<4, kShuffle><<<blocks, threads, 0, stream>>>(in, out, elements);
      break;
    case 8:
      chunk_shuffling_kernel<8, kShuffle><<<blocks, threads, 0, stream>>>(in, out, elements);
      break;
    default:
      chunk_shuffling_any_kernel<kShuffle>
          <<<blocks, threads, 0, stream>>>(in, out, elements, typesize);
  }
  if (whole < bytes) {
    cudaMemcpyAsync(to + whole, from + whole, bytes - whole, cudaMemcpyDeviceToDevice, stream);
  }
}

}  // namespace

void launch_chunk_unshuffle(const std::byte* shuffled, std::byte* out, std::size_t bytes,
                            std::size_t typesize, cudaStream_t stream) {
  launch_chunk_shuffling<false>(shuffled, out, bytes, typesize, stream);
}

void launch_chunk_shuffle(const std::byte* in, std::byte* shuffled, std::size_t bytes,
                          std::size_t typesize, cudaStream_t stream) {
  launch_chunk_shuffling<true>(in, shuffled, bytes, typesize, stream);
}

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

namespace zarr_device::cuda {
namespace {

struct FillPattern {
  unsigned char bytes[16];
};

// Blocks of one chunk (blockIdx.y) stride over its elements; any thread that sees a difference sets
// the flag (every writer writes 1, so the race is benign).
__global__ void mark_non_fill_kernel(const void* const* inputs, const std::size_t* sizes,
                                     FillPattern fill, int element_size, int* flags) {
  const std::size_t chunk = blockIdx.y;
  const auto* data = static_cast<const unsigned char*>(inputs[chunk]);
  const std::size_t n = sizes[chunk] / static_cast<std::size_t>(element_size);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  bool differs = false;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n && !differs; i += stride) {
    const unsigned char* e = data + i * element_size;
    for (int b = 0; b < element_size; ++b) differs |= e[b] != fill.bytes[b];
  }
  if (__syncthreads_or(differs) && threadIdx.x == 0) flags[chunk] = 1;
}

__global__ void fill_kernel(void* const* ranges, const std::size_t* sizes, unsigned char value) {
  auto* range = static_cast<unsigned char*>(ranges[blockIdx.x]);
  for (std::size_t i = threadIdx.x; i < sizes[blockIdx.x]; i += blockDim.x) range[i] = value;
}

constexpr std::size_t kPackAlignment = 16;

__global__ void pack_kernel(const void* const* inputs, const std::size_t* sizes,
                            unsigned char* packed, std::size_t* offsets) {
  __shared__ std::size_t partial[256];
  const std::size_t chunk = blockIdx.x;
  std::size_t sum = 0;
  for (std::size_t j = threadIdx.x; j < chunk; j += blockDim.x) {
    sum += (sizes[j] + kPackAlignment - 1) / kPackAlignment * kPackAlignment;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const std::size_t offset = partial[0];
  if (threadIdx.x == 0) offsets[chunk] = offset;
  const std::size_t n = sizes[chunk];
  const auto* in = static_cast<const unsigned char*>(inputs[chunk]);
  unsigned char* out = packed + offset;
  // Inputs are at least 16-byte aligned (nvCOMP's outputs), so whole 16-byte words move first.
  const std::size_t words = n / 16;
  const auto* in16 = reinterpret_cast<const uint4*>(in);
  auto* out16 = reinterpret_cast<uint4*>(out);
  for (std::size_t i = threadIdx.x; i < words; i += blockDim.x) out16[i] = in16[i];
  for (std::size_t i = words * 16 + threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}

}  // namespace

void launch_mark_non_fill(const void* const* inputs, const std::size_t* sizes, std::size_t count,
                          const std::byte* fill, int element_size, int* flags,
                          cudaStream_t stream) {
  if (count == 0) return;
  FillPattern pattern{};
  for (int b = 0; b < element_size && b < 16; ++b) {
    pattern.bytes[b] = static_cast<unsigned char>(fill[b]);
  }
  const dim3 grid(32, static_cast<unsigned int>(count));
  mark_non_fill_kernel<<<grid, 256, 0, stream>>>(inputs, sizes, pattern, element_size, flags);
}

void launch_fill(void* const* ranges, const std::size_t* sizes, std::size_t count, std::byte value,
                 cudaStream_t stream) {
  if (count == 0) return;
  fill_kernel<<<static_cast<unsigned int>(count), 256, 0, stream>>>(
      ranges, sizes, static_cast<unsigned char>(value));
}

void launch_pack(const void* const* inputs, const std::size_t* sizes, std::size_t count,
                 std::byte* packed, std::size_t* offsets, cudaStream_t stream) {
  if (count == 0) return;
  pack_kernel<<<static_cast<unsigned int>(count), 256, 0, stream>>>(
      inputs, sizes, reinterpret_cast<unsigned char*>(packed), offsets);
}

namespace {

struct CopyLaunch {
  std::uint32_t count = 0;
  CopyRange range[kCopiesPerLaunch];
};

// Blocks of one range (blockIdx.x) stride over it (blockIdx.y), in 16-byte words where both ends
// allow.
__global__ void copy_ranges_kernel(const __grid_constant__ CopyLaunch launch) {
  const CopyRange& r = launch.range[blockIdx.x];
  const auto* in = reinterpret_cast<const unsigned char*>(r.src);
  auto* out = reinterpret_cast<unsigned char*>(r.dst);
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.y) * blockDim.x;
  std::uint64_t words = 0;
  if ((reinterpret_cast<std::uintptr_t>(in) | reinterpret_cast<std::uintptr_t>(out)) % 16 == 0) {
    words = r.bytes / 16;
    const auto* in16 = reinterpret_cast<const uint4*>(in);
    auto* out16 = reinterpret_cast<uint4*>(out);
    for (std::uint64_t i = first; i < words; i += stride) out16[i] = in16[i];
  }
  for (std::uint64_t i = words * 16 + first; i < r.bytes; i += stride) out[i] = in[i];
}

struct GatherLaunch {
  StreamBlock block[kGatherBlocks];
  const unsigned char* source[kGatherSources];
};

// Byte `at` onwards of a block, a byte at a time from where stream_byte says.
__device__ void gather_bytes(const StreamBlock& b, const unsigned char* const* sources,
                             std::uint32_t at, std::uint32_t stride) {
  auto* out = reinterpret_cast<unsigned char*>(b.out);
  for (; at < b.bytes; at += stride) {
    const auto from = device_read::stream_byte(at, b.bytes, b.typesize, b.streams);
    out[at] = sources[from.stream][from.offset];
  }
}

// A block of byte planes (device_read::has_planes) four elements a thread at a time: a 32-bit load
// from each plane, TS words stored as wide as the output allows. False, with nothing written,
// where an address is not aligned for that (the block is then gathered byte by byte); the decoded
// streams and the outputs in the read path are aligned, so that is for odd callers.
template <std::uint32_t TS>
__device__ bool gather_planes(const StreamBlock& b, const unsigned char* const* sources,
                              std::uint32_t first, std::uint32_t stride) {
  static_assert(TS == 2 || TS % 4 == 0);
  const std::uint32_t elements = b.bytes / TS;
  const unsigned char* planes[TS];
  bool aligned = reinterpret_cast<std::uintptr_t>(b.out) % (TS == 2 ? 8 : 16) == 0;
#pragma unroll
  for (std::uint32_t j = 0; j < TS; ++j) {
    planes[j] = b.streams == 1 ? sources[0] + j * elements : sources[j];
    aligned = aligned && reinterpret_cast<std::uintptr_t>(planes[j]) % 4 == 0;
  }
  if (!aligned) return false;
  const std::uint32_t groups = elements / 4;
  for (std::uint32_t g = first; g < groups; g += stride) {
    std::uint32_t in[TS];
#pragma unroll
    for (std::uint32_t j = 0; j < TS; ++j) {
      in[j] = reinterpret_cast<const std::uint32_t*>(planes[j])[g];
    }
    std::uint32_t words[TS];
    device_read::interleave_planes<TS>(in, words);
    if constexpr (TS == 2) {
      reinterpret_cast<uint2*>(b.out)[g] = make_uint2(words[0], words[1]);
    } else {
      auto* to = reinterpret_cast<uint4*>(b.out) + static_cast<std::size_t>(g) * (TS / 4);
#pragma unroll
      for (std::uint32_t k = 0; k < TS / 4; ++k) {
        to[k] = make_uint4(words[4 * k], words[4 * k + 1], words[4 * k + 2], words[4 * k + 3]);
      }
    }
  }
  // The last elements (fewer than four) and any bytes past the last whole element.
  gather_bytes(b, sources, groups * 4 * TS + first, stride);
  return true;
}

__global__ void gather_blocks_kernel(const __grid_constant__ GatherLaunch launch) {
  const StreamBlock& b = launch.block[blockIdx.x];
  const unsigned char* const* sources = launch.source + b.first;
  const std::uint32_t first = blockIdx.y * blockDim.x + threadIdx.x;
  const std::uint32_t stride = gridDim.y * blockDim.x;
  // (The same choice in every thread of the block: no divergence.)
  if (device_read::has_planes(b.bytes, b.typesize, b.streams)) {
    switch (b.typesize) {
      case 1:  // one plane: a copy, 16 bytes at a time where both ends are aligned for it
        if (b.streams == 1 && ((reinterpret_cast<std::uintptr_t>(b.out) |
                                reinterpret_cast<std::uintptr_t>(sources[0])) %
                               16) == 0) {
          const std::uint32_t words = b.bytes / 16;
          for (std::uint32_t w = first; w < words; w += stride) {
            reinterpret_cast<uint4*>(b.out)[w] = reinterpret_cast<const uint4*>(sources[0])[w];
          }
          gather_bytes(b, sources, words * 16 + first, stride);
          return;
        }
        break;
      case 2:
        if (gather_planes<2>(b, sources, first, stride)) return;
        break;
      case 4:
        if (gather_planes<4>(b, sources, first, stride)) return;
        break;
      case 8:
        if (gather_planes<8>(b, sources, first, stride)) return;
        break;
      case 16:
        if (gather_planes<16>(b, sources, first, stride)) return;
        break;
      default:
        break;
    }
  }
  gather_bytes(b, sources, first, stride);
}

// CUDA blocks per range or block: enough for the largest to spread over the GPU, 16 KiB each.
unsigned int blocks_across(std::uint64_t largest) {
  constexpr std::uint64_t kBytesPerBlock = 16 << 10;
  return static_cast<unsigned int>(
      std::clamp<std::uint64_t>((largest + kBytesPerBlock - 1) / kBytesPerBlock, 1, 256));
}

}  // namespace

void launch_copy_ranges(std::span<const CopyRange> ranges, cudaStream_t stream) {
  CopyLaunch launch;
  for (std::size_t begin = 0; begin < ranges.size(); begin += kCopiesPerLaunch) {
    launch.count = static_cast<std::uint32_t>(std::min(kCopiesPerLaunch, ranges.size() - begin));
    std::uint64_t largest = 0;
    for (std::uint32_t i = 0; i < launch.count; ++i) {
      launch.range[i] = ranges[begin + i];
      largest = std::max(largest, launch.range[i].bytes);
    }
    const dim3 grid(launch.count, blocks_across(largest));
    copy_ranges_kernel<<<grid, 256, 0, stream>>>(launch);
  }
}

void launch_gather_blocks(std::span<const StreamBlock> blocks,
                          std::span<const std::byte* const> sources, cudaStream_t stream) {
  GatherLaunch launch;
  std::size_t count = 0;
  std::size_t used = 0;  // sources in `launch`
  std::uint64_t largest = 0;
  auto flush = [&] {
    if (count == 0) return;
    const dim3 grid(static_cast<unsigned int>(count), blocks_across(largest));
    gather_blocks_kernel<<<grid, 256, 0, stream>>>(launch);
    count = 0;
    used = 0;
    largest = 0;
  };
  for (const StreamBlock& b : blocks) {
    if (count == kGatherBlocks || used + b.streams > kGatherSources) flush();
    StreamBlock& to = launch.block[count++];
    to = b;
    to.first = static_cast<std::uint32_t>(used);
    for (std::uint32_t s = 0; s < b.streams; ++s) {
      launch.source[used++] = reinterpret_cast<const unsigned char*>(sources[b.first + s]);
    }
    largest = std::max<std::uint64_t>(largest, b.bytes);
  }
  flush();
}

void ChunkUnshuffles::add(const std::byte* shuffled, std::byte* out, std::size_t bytes,
                          std::size_t typesize, cudaStream_t stream) {
  constexpr std::size_t kLargest = std::size_t{1} << 31;  // stream_byte's arithmetic is 32-bit
  if (bytes >= kLargest || typesize >= kLargest) {
    launch_chunk_unshuffle(shuffled, out, bytes, typesize, stream);
    return;
  }
  blocks_.push_back({out, static_cast<std::uint32_t>(bytes),
                     static_cast<std::uint32_t>(sources_.size()), 1,
                     static_cast<std::uint32_t>(typesize)});
  sources_.push_back(shuffled);
}

void ChunkUnshuffles::launch(cudaStream_t stream) {
  if (blocks_.empty()) return;
  launch_gather_blocks(blocks_, sources_, stream);
  blocks_.clear();
  sources_.clear();
}

void launch_byte_unshuffle(const UnshuffleBlock* blocks, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  byte_unshuffle_kernel<<<static_cast<unsigned int>(count), 256, 0, stream>>>(blocks);
}

}  // namespace zarr_device::cuda
