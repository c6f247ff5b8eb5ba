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
#include "zarr_device/read_options.hpp"

namespace zarr_device {

// Number of CUDA devices; 0 when built without CUDA or when no driver or GPU is present.
int cuda_device_count();

// What the build and the machine offer: {"compiled": bool, "devices": n, "nvcomp": path or null,
// "nvcomp_error": why nvCOMP could not be loaded, ...}.
nlohmann::json cuda_info();

// What reads onto CUDA device `device` did with its decoder process (GpuDecode): {"available":
// whether chunks are planned for it, "program": its path or null, "starts", "calls", "chunks",
// "not_decoded": chunks it did not decode (decoded on the CPU instead), "failures": calls in which
// the process failed, "last_failure": how}.
nlohmann::json isolated_decoding_info(int device);

// Reads `selection` of `array` into device memory: `out` on CUDA device `device`, C-contiguous,
// `out_nbytes` long. Returns once the data is complete, or in stream order on
// `options.consumer_stream` as read_many_to_cuda says. Decodes on the
// GPU what nvCOMP and the engine's kernels can (zstd, gzip, zlib, lz4 after a CPU check of the
// stream's framing; byte order, transpose and placement), everything else on CPU threads; each
// chunk crosses PCIe once.
void read_to_cuda(const Array& array, std::span<const DimSlice> selection, int device, void* out,
                  std::size_t out_nbytes,
                  const ReadOptions& options = ReadOptions::from_settings());

// One array's part of a read of many: a selection of `array` into `out` (device memory on the
// read's device, C-contiguous, `out_nbytes` long), allocated on `consumer_stream` (a cudaStream_t
// the caller uses `out` on, as ReadOptions::consumer_stream; 0 for none).
struct CudaReadRequest {
  const Array* array = nullptr;
  std::vector<DimSlice> selection;
  void* out = nullptr;
  std::size_t out_nbytes = 0;
  std::uintptr_t consumer_stream = 0;
};

// Reads many arrays (or selections of them) onto CUDA device `device` in one pipeline: every chunk
// of every request is one stream through the staging ring, so the disk and the copy engine never
// wait between arrays. Returns once every output is complete, or, when every request names a
// consumer stream and the read needs no device decode (its bytes were all checked on the host),
// once the last copies are queued: work enqueued later on those streams sees the data (other
// streams and the host synchronise with them first, as after any asynchronous copy), and the host
// goes on to the next read while the copy engine finishes this one. `completed(i)`, when given, is
// called on the calling thread as soon as request i's output is complete and visible to every
// stream, while later requests are still being read (a loader can hand it on). An error names
// the array and the chunk; the outputs of requests not yet reported complete then hold nothing to
// rely on.
void read_many_to_cuda(std::span<const CudaReadRequest> requests, int device,
                       const ReadOptions& options = ReadOptions::from_settings(),
                       const std::function<void(std::size_t)>& completed = {});

// Waits for the reads onto CUDA device `device` that returned without waiting
// (ReadOptions::non_blocking) and raises CodecError, naming the array and the chunk, when the
// GPU failed to decode a chunk of any of them (each failure is reported once). Reads running on
// other threads meanwhile are left to finish (their failures are reported by the next call).
// A negative `device`: every device read onto so far.
void synchronize_cuda_reads(int device);

// Frees the staging rings (pinned host memory and its device copies) and the decode memory that
// reads and writes onto CUDA device `device` keep between calls (every device's when negative),
// as torch.cuda.empty_cache does for its cache: the next call allocates them again (pinning
// takes tens of milliseconds). Rings lent to calls running meanwhile on other threads are kept.
// Failures of reads that did not wait stay for synchronize_cuda_reads. Nothing to do without
// CUDA.
void release_cuda_memory(int device);

// How a write from a GPU runs; each setting starts from the setting of its name (settings.hpp).
struct CudaWriteOptions {
  // Its threads, and the memory budget of the chunks the selection covers in part (written
  // through the host: read, updated and written back on the CPU).
  IoOptions io;
  // Pinned host memory for the chunks of two batches, half each: one batch is encoded on the GPU
  // while the other's chunks are written to the store. Each half is also the bound of two device
  // buffers (laid-out and compressed chunks). A chunk (or a whole shard) larger than a half is
  // written through the CPU path instead.
  std::size_t staging_bytes = settings().staging_bytes;
  // A cudaStream_t whose earlier work must finish before `values` is read; 0 for none.
  std::uintptr_t producer_stream = 0;
  GpuEncode gpu_encode = settings().gpu_encode;
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
