// nvCOMP's batched decompressors (and its zstd compressor), loaded at run time (libnvcomp ships as
// an optional wheel, nvidia-libnvcomp-cu13). Without it, compressed chunks are decoded on CPU
// threads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>

#include "zarr_device/codec.hpp"

namespace zarr_device::cuda {

// The kinds of device decoding codecs declare (zarr_device/codec.hpp); nvCOMP has a decoder for
// each compressor among them.
using GpuCodec = DeviceDecoding::Kind;

// One batched decompressor: the same calling convention for every algorithm.
struct BatchedDecompressor {
  // Temporary device memory for `chunks` chunks of at most `max_chunk` decoded bytes.
  std::size_t (*temp_size)(std::size_t chunks, std::size_t max_chunk, std::size_t total) = nullptr;
  // The same for these chunks, sized from their frames (device arrays of their stored bytes on
  // the device and their sizes): far less than temp_size for large chunks (about their decoded
  // size for bf16 weights, against 3.05 times it), at the cost of a kernel and a synchronisation
  // of `stream`. SIZE_MAX when nvCOMP cannot size them (frames it does not take: their decode
  // reports it); null where the library lacks it.
  std::size_t (*temp_size_of)(const void* const* inputs, const std::size_t* input_sizes,
                              std::size_t chunks, std::size_t max_chunk, std::size_t total,
                              cudaStream_t stream) = nullptr;
  // Enqueues the decompression; device arrays of pointers and sizes; statuses per chunk.
  void (*decompress)(const void* const* inputs, const std::size_t* input_sizes,
                     const std::size_t* output_capacities, std::size_t* output_sizes,
                     std::size_t chunks, void* temp, std::size_t temp_bytes, void* const* outputs,
                     int* statuses, cudaStream_t stream) = nullptr;
  std::size_t input_alignment = 8;
  std::size_t output_alignment = 8;
  std::size_t temp_alignment = 8;
};

// One batched compressor; outputs are standard streams of the algorithm (zstd frames).
struct BatchedCompressor {
  std::size_t (*temp_size)(std::size_t chunks, std::size_t max_chunk, std::size_t total) = nullptr;
  // The output capacity each chunk of at most `max_chunk` bytes needs.
  std::size_t (*max_output)(std::size_t max_chunk) = nullptr;
  void (*compress)(const void* const* inputs, const std::size_t* input_sizes, std::size_t max_chunk,
                   std::size_t chunks, void* temp, std::size_t temp_bytes, void* const* outputs,
                   std::size_t* output_sizes, int* statuses, cudaStream_t stream) = nullptr;
  std::size_t max_chunk = 0;  // the largest chunk it takes
  std::size_t input_alignment = 8;
  std::size_t output_alignment = 8;
  std::size_t temp_alignment = 8;
};

class Nvcomp {
 public:
  // The process-wide instance; loads libnvcomp on first use.
  static const Nvcomp& instance();

  [[nodiscard]] bool loaded() const { return loaded_; }
  [[nodiscard]] const std::string& library() const { return library_; }
  [[nodiscard]] const std::string& error() const { return error_; }
  // nullptr when the codec has no GPU decoder here.
  [[nodiscard]] const BatchedDecompressor* decompressor(GpuCodec codec) const;
  // nullptr when the codec has no GPU compressor here (only zstd has one).
  [[nodiscard]] const BatchedCompressor* compressor(GpuCodec codec) const;

 private:
  Nvcomp();
  bool loaded_ = false;
  std::string library_;
  std::string error_;
  BatchedDecompressor zstd_, gzip_, deflate_, lz4_;
  BatchedCompressor zstd_compressor_;
  bool has_zstd_compressor_ = false;
};

}  // namespace zarr_device::cuda
