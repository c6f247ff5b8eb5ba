// How the checksums are spread over the GPU. A buffer is cut into segments of kSegment bytes, one
// thread block at a time on each (blocks of one buffer take every gridDim.y-th segment, so that a
// batch of few large buffers still fills the GPU), and a segment into kThreads slices of kSlice
// bytes, one a thread. Each thread checksums its slice alone; the pieces are then put together
// with checksum_combine.hpp's arithmetic, which needs no order among them:
//   CRC-32: crc(A B) = crc(A) * x^(8|B|) + crc(B) over GF(2), so a buffer's CRC is the XOR over
//     its pieces of crc(piece) * x^(8 * the bytes after the piece). A thread multiplies its slice's
//     CRC by the power for the slices after it in the segment (the same for every full segment, so
//     computed once on the host), the block XORs those and multiplies by the power for the bytes
//     after the segment, and the blocks of a buffer XOR theirs into its sum (atomicXor).
//   Adler-32: a = 1 + the sum of the bytes, b = n + the sum of byte * (bytes from it to the end),
//     modulo 65521: sums again, which each thread adds up for its slices and the blocks add into
//     two 64-bit sums of the buffer's (atomicAdd, in 16 bytes a buffer from the stream-ordered
//     allocator), reduced modulo 65521 by a last kernel. Adding into the 32-bit checksum itself
//     would take a compare-and-swap loop (its halves wrap at 65521), where the hundreds of blocks
//     on a large buffer take turns, each a round trip to L2: that is the fallback where the
//     allocator has no memory pool.
// Slices are read 16 bytes at a time through L1 (a thread reads its slice front to back, so each
// 32-byte sector serves two loads); the CRC is slice-by-8 over tables in shared memory, and the
// Adler-32 sums take 16 bytes in eight dp4a steps.
#include <algorithm>
#include <cstdint>

#include "checksum_kernels.hpp"
#include "codecs/checksum_combine.hpp"

namespace zarr_device::cuda {
namespace {

using codecs::crc32_multiply;
using codecs::crc32_shift_of;
using codecs::kAdlerModulus;
using codecs::kCrc32One;

constexpr int kThreads = 256;
constexpr std::uint64_t kSlice = 256;
constexpr std::uint64_t kSegment = kThreads * kSlice;  // 64 KiB
constexpr int kWarps = kThreads / 32;
static_assert(kThreads == 256, "the CRC table is built one entry a thread");
static_assert(kSlice % 16 == 0 && kSlice <= 4096, "whole 16-byte words; Adler-32 sums fit 32 bits");

__device__ std::uint64_t smaller(std::uint64_t a, std::uint64_t b) { return a < b ? a : b; }
__device__ std::uint64_t larger(std::uint64_t a, std::uint64_t b) { return a > b ? a : b; }

// Where a buffer lies: its bytes are [begin, end) of `base`, the 16-byte boundary at or before its
// first byte, so that every slice (begin rounded down, plus multiples of kSlice) starts on one.
struct Span {
  const unsigned char* base;
  std::uint64_t begin;
  std::uint64_t end;
};

__device__ Span span_of(const void* data, std::uint64_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  const std::uint64_t begin = address % 16;
  return {reinterpret_cast<const unsigned char*>(address - begin), begin, begin + bytes};
}

struct CrcLaunch {
  const void* const* inputs = nullptr;
  const std::size_t* sizes = nullptr;
  unsigned int* sums = nullptr;
  std::uint64_t first = 0;        // the launch's first buffer
  std::uint32_t stride = 0;       // x^(8 kSegment gridDim.y): from one of a block's segments to the
                                  // one before
  std::uint32_t after[kThreads];  // x^(8 kSlice (kThreads - 1 - t)): the slices after slice t
  std::uint32_t bytes[kSlice];    // x^(8 r)
  std::uint32_t power[64];        // x^(8 2^k)
};

// The tables of slice-by-8, table[k][i] = i's remainder after k more bytes.
using CrcTables = std::uint32_t[8][256];

__device__ std::uint32_t crc_eight(const CrcTables& table, std::uint32_t r, std::uint32_t low,
                                   std::uint32_t high) {
  r ^= low;
  return table[7][r & 0xFFU] ^ table[6][(r >> 8) & 0xFFU] ^ table[5][(r >> 16) & 0xFFU] ^
         table[4][r >> 24] ^ table[3][high & 0xFFU] ^ table[2][(high >> 8) & 0xFFU] ^
         table[1][(high >> 16) & 0xFFU] ^ table[0][high >> 24];
}

// The CRC-32 of the buffer's bytes in [from, to) (from a multiple of 16, to <= s.end).
__device__ std::uint32_t crc_slice(const CrcTables& table, const Span& s, std::uint64_t from,
                                   std::uint64_t to) {
  std::uint32_t r = 0xFFFFFFFFU;
  if (from >= s.begin && to - from == kSlice) {
    const auto* words = reinterpret_cast<const uint4*>(s.base + from);
#pragma unroll
    for (int k = 0; k < static_cast<int>(kSlice / 16); ++k) {
      const uint4 w = __ldg(words + k);
      r = crc_eight(table, r, w.x, w.y);
      r = crc_eight(table, r, w.z, w.w);
    }
    return ~r;
  }
  // The buffer's first or last slice: whole words where they lie inside it, its first and last
  // bytes one at a time (nothing outside the buffer is read).
  for (std::uint64_t at = from; at < to; at += 16) {
    if (at >= s.begin && at + 16 <= to) {
      const uint4 w = __ldg(reinterpret_cast<const uint4*>(s.base + at));
      r = crc_eight(table, r, w.x, w.y);
      r = crc_eight(table, r, w.z, w.w);
      continue;
    }
    const std::uint64_t last = smaller(at + 16, to);
    for (std::uint64_t i = larger(at, s.begin); i < last; ++i) {
      r = table[0][(r ^ s.base[i]) & 0xFFU] ^ (r >> 8);
    }
  }
  return ~r;
}

// x^(8 bytes), by all 32 threads of a warp: each multiplies the powers of two of its two bits of
// `bytes`, then the warp multiplies those together (the product is the same in any order).
__device__ std::uint32_t warp_shift_of(std::uint64_t bytes, const std::uint32_t* power) {
  const unsigned int lane = threadIdx.x % 32;
  const std::uint32_t low = (bytes >> lane) & 1U ? power[lane] : kCrc32One;
  const std::uint32_t high = (bytes >> (lane + 32)) & 1U ? power[lane + 32] : kCrc32One;
  std::uint32_t v = crc32_multiply(low, high);
  for (int d = 16; d > 0; d /= 2) v = crc32_multiply(v, __shfl_xor_sync(0xFFFFFFFFU, v, d));
  return v;
}

__device__ std::uint32_t warp_xor(std::uint32_t v) {
  for (int d = 16; d > 0; d /= 2) v ^= __shfl_xor_sync(0xFFFFFFFFU, v, d);
  return v;
}

__global__ void __launch_bounds__(kThreads) crc32_kernel(const __grid_constant__ CrcLaunch p) {
  __shared__ CrcTables table;
  __shared__ uint2 partial[2][kWarps];  // by iteration parity: one barrier an iteration
  const std::uint64_t buffer = p.first + blockIdx.x;
  const std::uint64_t n = p.sizes[buffer];
  if (n == 0) return;  // its sum is already the CRC of no bytes
  const Span s = span_of(p.inputs[buffer], n);
  const std::uint64_t segments = (s.end + kSegment - 1) / kSegment;
  const std::uint64_t y = blockIdx.y;
  const std::uint64_t stride = gridDim.y;
  if (y >= segments) return;
  const unsigned int t = threadIdx.x;

  std::uint32_t entry = codecs::crc32_table_entry(t);
  table[0][t] = entry;
  __syncthreads();
  for (int k = 1; k < 8; ++k) {
    entry = (entry >> 8) ^ table[0][entry & 0xFFU];
    table[k][t] = entry;
  }

  // The block's segments, last first: `shift` follows the bytes after each but the buffer's last
  // segment (after which nothing comes), starting at the first such segment below the top.
  const std::uint64_t last = segments - 1;
  const std::uint64_t top = y + (last - y) / stride * stride;
  std::uint64_t below_top = top;
  if (top == last) below_top = top >= y + stride ? top - stride : segments;
  std::uint32_t shift = kCrc32One;
  if (t < 32 && below_top < segments) {
    shift = warp_shift_of(s.end - (below_top + 1) * kSegment, p.power);
  }
  const std::uint32_t after_mine = p.after[t];
  std::uint32_t sum = 0;  // thread 0's
  __syncthreads();        // the tables
  for (std::uint64_t segment = top, i = 0;; segment -= stride, ++i) {
    const std::uint64_t start = segment * kSegment;
    const std::uint64_t length = smaller(kSegment, s.end - start);
    const std::uint64_t full = length / kSlice;  // whole slices; the rest is slice `full`'s
    std::uint32_t crc = 0;
    if (t * kSlice < length) {
      const std::uint64_t from = start + t * kSlice;
      crc = crc_slice(table, s, from, smaller(from + kSlice, start + length));
    }
    std::uint32_t whole = 0;
    if (t < full) {
      whole = crc32_multiply(crc, full == kThreads ? after_mine : p.after[kThreads - full + t]);
    }
    const std::uint32_t rest = t == full ? crc : 0;
    const std::uint32_t whole_xor = warp_xor(whole);
    const std::uint32_t rest_xor = warp_xor(rest);
    if (t % 32 == 0) partial[i % 2][t / 32] = make_uint2(whole_xor, rest_xor);
    __syncthreads();
    if (t == 0) {
      std::uint32_t w = 0;
      std::uint32_t r = 0;
      for (int k = 0; k < kWarps; ++k) {
        w ^= partial[i % 2][k].x;
        r ^= partial[i % 2][k].y;
      }
      const std::uint64_t tail = length % kSlice;
      std::uint32_t crc_segment = (tail != 0 ? crc32_multiply(w, p.bytes[tail]) : w) ^ r;
      if (segment != last) {
        crc_segment = crc32_multiply(crc_segment, shift);
        shift = crc32_multiply(shift, p.stride);
      }
      sum ^= crc_segment;
    }
    if (segment < y + stride) break;
  }
  if (t == 0 && sum != 0) atomicXor(p.sums + buffer, sum);
}

struct AdlerLaunch {
  const void* const* inputs = nullptr;
  const std::size_t* sizes = nullptr;
  unsigned int* sums = nullptr;        // without `wide`: the checksums, added to in place
  unsigned long long* wide = nullptr;  // a and b of buffer i at 2i and 2i + 1, or none
  std::uint64_t first = 0;
};

// The sums of the buffer's bytes in [from, to): a = the bytes, b = each byte times the bytes from
// it to `to`, both modulo 65521.
__device__ uint2 adler_slice(const Span& s, std::uint64_t from, std::uint64_t to) {
  std::uint32_t a = 0;
  std::uint32_t b = 0;
  // 16 bytes x: b += 16 a + sum (16 - j) x_j, a += sum x_j, with the weights a byte each.
  auto add16 = [&](const uint4& w) {
    b += a << 4;
    b = __dp4a(w.x, 0x0D0E0F10U, b);
    b = __dp4a(w.y, 0x090A0B0CU, b);
    b = __dp4a(w.z, 0x05060708U, b);
    b = __dp4a(w.w, 0x01020304U, b);
    a = __dp4a(w.x, 0x01010101U, a);
    a = __dp4a(w.y, 0x01010101U, a);
    a = __dp4a(w.z, 0x01010101U, a);
    a = __dp4a(w.w, 0x01010101U, a);
  };
  if (from >= s.begin && to - from == kSlice) {
    const auto* words = reinterpret_cast<const uint4*>(s.base + from);
#pragma unroll
    for (int k = 0; k < static_cast<int>(kSlice / 16); ++k) add16(__ldg(words + k));
  } else {
    for (std::uint64_t at = from; at < to; at += 16) {
      if (at >= s.begin && at + 16 <= to) {
        add16(__ldg(reinterpret_cast<const uint4*>(s.base + at)));
        continue;
      }
      const std::uint64_t last = smaller(at + 16, to);
      for (std::uint64_t i = larger(at, s.begin); i < last; ++i) {
        a += s.base[i];
        b += a;
      }
    }
  }
  return make_uint2(a % kAdlerModulus, b % kAdlerModulus);
}

__global__ void __launch_bounds__(kThreads) adler32_kernel(const __grid_constant__ AdlerLaunch p) {
  __shared__ uint2 partial[kWarps];
  const std::uint64_t buffer = p.first + blockIdx.x;
  const std::uint64_t n = p.sizes[buffer];
  if (n == 0) return;
  const Span s = span_of(p.inputs[buffer], n);
  const std::uint64_t segments = (s.end + kSegment - 1) / kSegment;
  const unsigned int t = threadIdx.x;
  if (blockIdx.y >= segments) return;
  // Each slice adds its bytes to a and, to b, its own b plus its a times the bytes after it.
  std::uint32_t a = 0;
  std::uint32_t b = 0;
  for (std::uint64_t segment = blockIdx.y; segment < segments; segment += gridDim.y) {
    const std::uint64_t from = segment * kSegment + t * kSlice;
    if (from >= s.end) continue;
    const std::uint64_t to = smaller(from + kSlice, s.end);
    const uint2 slice = adler_slice(s, from, to);
    const auto after = static_cast<std::uint32_t>((s.end - to) % kAdlerModulus);
    a = (a + slice.x) % kAdlerModulus;
    b = (b + slice.y + after * slice.x % kAdlerModulus) % kAdlerModulus;
  }
  // Below 65521 * kThreads: no wrap.
  for (int d = 16; d > 0; d /= 2) {
    a += __shfl_xor_sync(0xFFFFFFFFU, a, d);
    b += __shfl_xor_sync(0xFFFFFFFFU, b, d);
  }
  if (t % 32 == 0) partial[t / 32] = make_uint2(a, b);
  __syncthreads();
  if (t != 0) return;
  a = 0;
  b = 0;
  for (int k = 0; k < kWarps; ++k) {
    a += partial[k].x;
    b += partial[k].y;
  }
  if (p.wide != nullptr) {
    // Below 2^26 a block: no wrap in 2^38 blocks.
    atomicAdd(p.wide + 2 * buffer, a);
    atomicAdd(p.wide + 2 * buffer + 1, b);
    return;
  }
  // The checksum itself (see the top of this file).
  a %= kAdlerModulus;
  b %= kAdlerModulus;
  unsigned int* sum = p.sums + buffer;
  unsigned int seen = *sum;
  unsigned int expected = 0;
  do {
    expected = seen;
    const unsigned int low = ((expected & 0xFFFFU) + a) % kAdlerModulus;
    const unsigned int high = ((expected >> 16) + b) % kAdlerModulus;
    seen = atomicCAS(sum, expected, high << 16 | low);
  } while (seen != expected);
}

// The Adler-32 of no bytes, which the blocks add to: a = 1, b = n (each of the n steps adds a's
// starting 1 to b).
__device__ unsigned int adler_start(std::uint64_t n) {
  return static_cast<unsigned int>(n % kAdlerModulus) << 16 | 1U;
}

__global__ void start_adler_kernel(const std::size_t* sizes, unsigned int* sums, std::uint64_t n) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    sums[i] = adler_start(sizes[i]);
  }
}

// Each buffer's checksum (from `wide`'s sums where given, else `sums`) into sums, or, with
// `expected`, whether it differs into flags (which may be `sums` itself).
__global__ void finish_kernel(const std::size_t* sizes, const unsigned long long* wide,
                              unsigned int* sums, const std::uint32_t* expected, int* flags,
                              std::uint64_t n) {
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    unsigned int value = 0;
    if (wide != nullptr) {
      const unsigned int start = adler_start(sizes[i]);
      const auto a = static_cast<unsigned int>(((start & 0xFFFFU) + wide[2 * i]) % kAdlerModulus);
      const auto b = static_cast<unsigned int>(((start >> 16) + wide[2 * i + 1]) % kAdlerModulus);
      value = b << 16 | a;
    } else {
      value = sums[i];
    }
    if (expected != nullptr) {
      flags[i] = value != expected[i] ? 1 : 0;
    } else {
      sums[i] = value;
    }
  }
}

unsigned int per_buffer_blocks(std::uint64_t n) {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    sms = 1;
  }
  // Four rounds of the blocks the GPU holds at once (eight of kThreads a multiprocessor), so that
  // uneven segment counts leave little of the last round idle; blocks past a buffer's segments
  // return at once.
  const std::uint64_t wanted = static_cast<std::uint64_t>(std::max(sms, 1)) * 8 * 4;
  return static_cast<unsigned int>(std::clamp<std::uint64_t>((wanted + n - 1) / n, 1, 65535));
}

const CrcLaunch& crc_tables() {
  static const CrcLaunch tables = [] {
    CrcLaunch p;
    for (int t = 0; t < kThreads; ++t) p.after[t] = crc32_shift_of(kSlice * (kThreads - 1 - t));
    for (std::uint64_t r = 0; r < kSlice; ++r) p.bytes[r] = crc32_shift_of(r);
    for (int k = 0; k < 64; ++k) p.power[k] = crc32_shift_of(std::uint64_t{1} << k);
    return p;
  }();
  return tables;
}

constexpr int kListThreads = 256;

unsigned int list_blocks(std::uint64_t n) {
  return static_cast<unsigned int>(
      std::min<std::uint64_t>((n + kListThreads - 1) / kListThreads, 65535));
}

// Checksums into `sums`, or, with `expected`, whether they differ into `flags` (`sums` may be
// `flags` itself: no other memory is needed there).
void launch_sums(ChecksumKind kind, const void* const* inputs, const std::size_t* sizes,
                 unsigned int* sums, const std::uint32_t* expected, int* flags, std::uint64_t n,
                 cudaStream_t stream) {
  const unsigned int blocks = per_buffer_blocks(n);
  constexpr std::uint64_t kMostX = 0x7FFFFFFF;  // gridDim.x's limit
  if (kind == ChecksumKind::kCrc32) {
    cudaMemsetAsync(sums, 0, n * sizeof(unsigned int), stream);  // the CRC-32 of no bytes
    CrcLaunch p = crc_tables();
    p.inputs = inputs;
    p.sizes = sizes;
    p.sums = sums;
    p.stride = crc32_shift_of(kSegment * blocks);
    for (p.first = 0; p.first < n; p.first += kMostX) {
      const dim3 grid(static_cast<unsigned int>(std::min(n - p.first, kMostX)), blocks);
      crc32_kernel<<<grid, kThreads, 0, stream>>>(p);
    }
    if (expected != nullptr) {
      finish_kernel<<<list_blocks(n), kListThreads, 0, stream>>>(sizes, nullptr, sums, expected,
                                                                 flags, n);
    }
    return;
  }
  AdlerLaunch p{inputs, sizes, sums, nullptr, 0};
  // 16 bytes a buffer from the stream's memory pool; where there is none, the compare-and-swap
  // path (and the failed allocation's error is not left for the caller to find).
  const bool clean = cudaPeekAtLastError() == cudaSuccess;
  if (cudaMallocAsync(reinterpret_cast<void**>(&p.wide), 2 * n * sizeof(unsigned long long),
                      stream) == cudaSuccess) {
    cudaMemsetAsync(p.wide, 0, 2 * n * sizeof(unsigned long long), stream);
  } else {
    p.wide = nullptr;
    if (clean) cudaGetLastError();
    start_adler_kernel<<<list_blocks(n), kListThreads, 0, stream>>>(sizes, sums, n);
  }
  for (p.first = 0; p.first < n; p.first += kMostX) {
    const dim3 grid(static_cast<unsigned int>(std::min(n - p.first, kMostX)), blocks);
    adler32_kernel<<<grid, kThreads, 0, stream>>>(p);
  }
  if (p.wide != nullptr || expected != nullptr) {
    finish_kernel<<<list_blocks(n), kListThreads, 0, stream>>>(sizes, p.wide, sums, expected, flags,
                                                               n);
  }
  if (p.wide != nullptr) cudaFreeAsync(p.wide, stream);
}

}  // namespace

void launch_checksums(ChecksumKind kind, const void* const* inputs, const std::size_t* sizes,
                      std::uint32_t* values, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch_sums(kind, inputs, sizes, values, nullptr, nullptr, n, stream);
}

void launch_check_checksums(ChecksumKind kind, const void* const* inputs, const std::size_t* sizes,
                            const std::uint32_t* expected, int* flags, std::size_t n,
                            cudaStream_t stream) {
  if (n == 0) return;
  static_assert(sizeof(int) == sizeof(unsigned int));
  auto* sums = reinterpret_cast<unsigned int*>(flags);
  launch_sums(kind, inputs, sizes, sums, expected, flags, n, stream);
}

}  // namespace zarr_device::cuda
