// Small CUDA kernels of the GPU read path: placing decoded elements into the output (strided,
// with byte order changes, which also covers transposes) and filling regions with a fill value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "zarr_device/codec.hpp"

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

// Sets flags[i] to 1 when chunk i (inputs[i], sizes[i] bytes; device arrays of `count`) holds any
// element other than `fill` (host memory, `element_size` bytes, at most 16; passed to the kernel
// by value). flags must be zeroed beforehand.
void launch_mark_non_fill(const void* const* inputs, const std::size_t* sizes, std::size_t count,
                          const std::byte* fill, int element_size, int* flags, cudaStream_t stream);

// Sets every byte of ranges[i] (sizes[i] bytes; device arrays of `count`) to `value`: many small
// ranges in one launch instead of a memset each.
void launch_fill(void* const* ranges, const std::size_t* sizes, std::size_t count, std::byte value,
                 cudaStream_t stream);

// Copies chunk i (inputs[i], sizes[i] bytes) to packed + offsets[i], where offsets[i] is the sum of
// the earlier sizes each rounded up to 16, and writes offsets (device arrays of `count`). Lets
// compressed chunks of unknown size cross to the host in one copy.
void launch_pack(const void* const* inputs, const std::size_t* sizes, std::size_t count,
                 std::byte* packed, std::size_t* offsets, cudaStream_t stream);

// One block of a byte-shuffled stream (Blosc's shuffle, numcodecs' Shuffle): `bytes` bytes of
// `typesize`-byte elements at `shuffled`, byte j of element i at j * (bytes / typesize) + i, the
// bytes past the last whole element as they are. Unshuffled into `out` (device memory).
struct UnshuffleBlock {
  const std::byte* shuffled = nullptr;
  std::byte* out = nullptr;
  std::uint64_t bytes = 0;
  std::uint32_t typesize = 1;
};

// Undoes the shuffle of `count` blocks (a device array); codecs/blosc_frames.hpp's
// byte_unshuffle is the CPU's version, which the GPU tests compare with.
void launch_byte_unshuffle(const UnshuffleBlock* blocks, std::size_t count, cudaStream_t stream);

// Undoes the byte shuffle of one whole chunk (numcodecs' shuffle) over the whole GPU: `bytes` bytes
// of `typesize`-byte elements from `shuffled` into `out` (device memory, not overlapping).
void launch_chunk_unshuffle(const std::byte* shuffled, std::byte* out, std::size_t bytes,
                            std::size_t typesize, cudaStream_t stream);
// Its inverse, for writes: `bytes` bytes of `typesize`-byte elements from `in` byte-shuffled into
// `shuffled` (device memory, not overlapping), as numcodecs' shuffle encodes.
void launch_chunk_shuffle(const std::byte* in, std::byte* shuffled, std::size_t bytes,
                          std::size_t typesize, cudaStream_t stream);

// Copies between places in device memory, any number, passed to the kernels by value (a launch
// takes kCopiesPerLaunch): for the stored streams of a call, each moved to an address its decoder
// takes, with no table in memory another process could write.
struct CopyRange {
  const std::byte* src = nullptr;
  std::byte* dst = nullptr;
  std::uint64_t bytes = 0;
};
inline constexpr std::size_t kCopiesPerLaunch = 1024;
void launch_copy_ranges(std::span<const CopyRange> ranges, cudaStream_t stream);

// A block of a chunk decoded stream by stream (DeviceStreams): its streams' decoded bytes, at
// sources[first] ... sources[first + streams - 1], gathered and unshuffled into `out`, `bytes`
// long (device_read/stream_gather.hpp's stream_byte says from where).
struct StreamBlock {
  std::byte* out = nullptr;
  std::uint32_t bytes = 0;
  std::uint32_t first = 0;
  std::uint32_t streams = 1;
  std::uint32_t typesize = 1;
};
// Gathers every block (any number; the blocks and their sources are passed to the kernels by
// value, kGatherBlocks and kGatherSources a launch).
inline constexpr std::size_t kGatherBlocks = 256;
inline constexpr std::size_t kGatherSources = 2048;
void launch_gather_blocks(std::span<const StreamBlock> blocks,
                          std::span<const std::byte* const> sources, cudaStream_t stream);

// Whole chunks unshuffled (numcodecs' shuffle) straight into their places by a few gather
// launches for a call's chunks, not one launch each: gathered as the chunks are placed, launched
// once they all are. A chunk of 2 GiB or more (past the gather's 32-bit sizes) is unshuffled on
// its own as it is added.
class ChunkUnshuffles {
 public:
  void add(const std::byte* shuffled, std::byte* out, std::size_t bytes, std::size_t typesize,
           cudaStream_t stream);
  // Launches those added since the last launch, on `stream`.
  void launch(cudaStream_t stream);

 private:
  std::vector<StreamBlock> blocks_;
  std::vector<const std::byte*> sources_;
};

// The kernel's arguments for copying elements laid out by `src_strides` (bytes) from `src` into
// `dst`, swapping the bytes of each `swap_unit` when `swap`. Dimensions that are contiguous in
// both are merged; UsageError when more than kMaxKernelRank remain.
StridedCopy plan_strided_copy(const std::byte* src, std::span<const std::int64_t> src_strides,
                              const StridedView& dst, std::size_t element_size, bool swap,
                              std::size_t swap_unit);

}  // namespace zarr_device::cuda
