// Reading into and writing from CUDA device memory. CUDA support is compiled in where the toolkit
// is found at build time; the CUDA runtime is linked statically and loads the driver lazily, so one
// build runs on machines with and without GPUs (asking for a GPU where there is none raises
// DeviceError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "zarr_device/array.hpp"

namespace zarr_device {

// Which compressed chunks the GPU decodes. nvCOMP's decoders trust their input: a corrupt stream
// can fault the GPU context (not just fail the read), and framing checks on the CPU cannot catch
// damage inside a compressed block.
enum class GpuDecode {
  kChecked,  // only chunks whose bytes a checksum (crc32c) verified on the CPU vouches for
  kTrusted,  // every chunk nvCOMP can decode, after the CPU's framing checks
  kOff,      // none: decode on CPU threads, copy the result once
};

struct CudaReadOptions {
  IoOptions io;
  // Pinned host memory that chunk bytes pass through on their way to the GPU, split into slots
  // that are filled, copied and decoded in turn (so reads overlap copies and decoding). A slot is
  // allocated on its first use and kept for later reads to the device (made again when these
  // settings change). Device memory: the output, a copy of each slot, and as much again for
  // GPU decoding (nvCOMP's decode speed grows with the memory it is given).
  std::size_t staging_bytes = std::size_t{768} << 20;
  int slots = 12;
  // A cudaStream_t whose earlier work must finish before the output is written (the stream the
  // caller allocated `out` on); 0 for none.
  std::uintptr_t consumer_stream = 0;
  GpuDecode gpu_decode = GpuDecode::kChecked;
};

// Number of CUDA devices; 0 when built without CUDA or when no driver or GPU is present.
int cuda_device_count();

// What the build and the machine offer: {"compiled": bool, "devices": n, "nvcomp": path or null,
// "nvcomp_error": why nvCOMP could not be loaded, ...}.
nlohmann::json cuda_info();

// Reads `selection` of `array` into device memory: `out` on CUDA device `device`, C-contiguous,
// `out_nbytes` long. Returns once the data is complete and visible to every stream. Decodes on the
// GPU what nvCOMP and the engine's kernels can (zstd, gzip, zlib, lz4 after a CPU check of the
// stream's framing; byte order, transpose and placement), everything else on CPU threads; each
// chunk crosses PCIe once.
void read_to_cuda(const Array& array, std::span<const DimSlice> selection, int device, void* out,
                  std::size_t out_nbytes, const CudaReadOptions& options = {});

// One array's part of a read of many: a selection of `array` into `out` (device memory on the
// read's device, C-contiguous, `out_nbytes` long), allocated on `consumer_stream` (a cudaStream_t
// whose earlier work must finish before `out` is written; 0 for none).
struct CudaReadRequest {
  const Array* array = nullptr;
  std::vector<DimSlice> selection;
  void* out = nullptr;
  std::size_t out_nbytes = 0;
  std::uintptr_t consumer_stream = 0;
};

// Reads many arrays (or selections of them) onto CUDA device `device` in one pipeline: every chunk
// of every request is one stream through the staging ring, so the disk and the copy engine never
// wait between arrays. Returns once every output is complete. `completed(i)`, when given, is
// called on the calling thread as soon as request i's output is complete and visible to every
// stream, while later requests are still being read (a loader can hand it on). An error names
// the array and the chunk; the outputs of requests not yet reported complete then hold nothing to
// rely on.
void read_many_to_cuda(std::span<const CudaReadRequest> requests, int device,
                       const CudaReadOptions& options = {},
                       const std::function<void(std::size_t)>& completed = {});

// Times the GPU decode stage alone over the chunks of `selection` that a read would decode with
// nvCOMP (their compressed bytes staged in device memory beforehand): {"seconds",
// "compressed_bytes", "decoded_bytes", "chunks", ...}. For benchmarks.
nlohmann::json measure_cuda_decode(const Array& array, std::span<const DimSlice> selection,
                                   int device, int repeats, const CudaReadOptions& options = {});

// Which chunks the GPU compresses when writing from device memory.
enum class GpuEncode {
  kOn,   // zstd chunks with nvCOMP (standard zstd frames; the codec's level is not applied)
  kOff,  // every chunk on CPU threads, after the GPU has laid out its elements
};

struct CudaWriteOptions {
  IoOptions io;
  // The chunks of one batch: two slots (one is encoded on the GPU while the other's chunks are
  // written to the store), each holding this much pinned host memory and up to twice as much
  // device memory (laid-out and compressed chunks). A chunk (or a whole shard) larger than a slot
  // is written through the CPU path instead.
  std::size_t staging_bytes = std::size_t{256} << 20;
  // A cudaStream_t whose earlier work must finish before `values` is read; 0 for none.
  std::uintptr_t producer_stream = 0;
  GpuEncode gpu_encode = GpuEncode::kOn;
};

// Writes `values` (device memory on CUDA device `device`, C-contiguous, the selection's shape)
// into `selection` of `array`. Chunks (and shards) the selection covers whole are laid out by the
// GPU (transposes, byte order), checked for being all fill value there (such chunks are removed,
// as on the CPU path), compressed there when the codec is zstd, and cross PCIe once, compressed;
// the CPU adds checksums, assembles shards and stores them, overlapped with the GPU's next batch.
// Chunks covered in part are read, updated and written back on the CPU. Each stored value is
// replaced atomically.
void write_from_cuda(const Array& array, std::span<const DimSlice> selection, int device,
                     const void* values, std::size_t nbytes, const CudaWriteOptions& options = {});

}  // namespace zarr_device
