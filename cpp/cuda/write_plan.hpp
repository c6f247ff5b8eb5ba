// The plan of a GPU write (cuda_writer.cpp): its stored values and the chunks each is encoded from,
// and how the chunks of one codec chain are encoded: what the GPU does (the
// stored layout: transposes as a permutation of strides, byte order; a byte shuffle and the
// compressor after it, where nvCOMP encodes what the codec stores) and which codecs the CPU runs
// after them. Asked of the
// chain's capabilities (CodecChain::stored_order, BytesToBytesCodec::device_encoding), never of
// codec names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "nvcomp_api.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {

// How the chunks of one codec chain are encoded: the GPU's part and the CPU's part after it.
struct EncodePlan {
  bool on_gpu = false;             // the GPU can lay out this chain's chunks
  std::vector<std::size_t> order;  // stored dimension i is chunk dimension order[i]
  bool swap = false;               // big-endian elements
  std::size_t swap_unit = 1;
  const BatchedCompressor* compressor = nullptr;  // the compressor, on the GPU
  // The element size of a byte shuffle (numcodecs' shuffle) the GPU does before the compressor;
  // 0: none (1: a shuffle of one-byte elements, which leaves the bytes as they are).
  std::size_t shuffle = 0;
  std::size_t cpu_codecs_from = 0;           // bytes->bytes codecs run on the CPU from here
  std::vector<std::byte> stored_fill;        // the fill value as stored (byte order)
  std::vector<std::int64_t> stored_strides;  // bytes, per chunk dimension, into the layout
};

EncodePlan plan_encoding(const codecs::CodecChain& chain, const Nvcomp& nvcomp, GpuEncode mode);

// Whether `order` keeps every dimension where it is.
[[nodiscard]] bool is_identity(std::span<const std::size_t> order);

// One chunk to encode (an inner chunk of a shard, or a chunk).
struct WriteLeaf {
  bool outside = false;               // wholly outside the array: fill value, nothing to store
  std::vector<std::int64_t> region;   // its elements inside the array (the rest is fill)
  const std::byte* source = nullptr;  // device: the region's first element in `values`
  const std::byte* input = nullptr;   // device: the chunk as stored (in staging, or in `values`)
  std::size_t staging = SIZE_MAX;     // offset in the slot's staging when laid out there
  std::size_t shuffled = 0;           // offset in the slot's staging of its shuffle, if any
  std::size_t output = 0;             // offset of its compressed output
  std::size_t host = 0;               // offset in pinned host memory (uncompressed chains)
  std::size_t index = 0;              // in the batch's arrays
};

// One stored value: a chunk, or a shard of inner chunks.
struct WriteItem {
  std::size_t cell = 0;  // in the selection's chunk grid
  std::string key;
  std::vector<WriteLeaf> leaves;
};

}  // namespace zarr_device::cuda
