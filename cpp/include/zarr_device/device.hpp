// Reading into accelerator memory. CUDA support is compiled in where the toolkit is found at build
// time; the CUDA runtime is linked statically and loads the driver lazily, so one build runs on
// machines with and without GPUs (asking for a GPU where there is none raises DeviceError).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

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
  // that are filled, copied and decoded in turn (so reads overlap copies and decoding). Allocated
  // once per device and reused.
  std::size_t staging_bytes = std::size_t{256} << 20;
  int slots = 4;
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

// Times the GPU decode stage alone over the chunks of `selection` that a read would decode with
// nvCOMP (their compressed bytes staged in device memory beforehand): {"seconds",
// "compressed_bytes", "decoded_bytes", "chunks", ...}. For benchmarks.
nlohmann::json measure_cuda_decode(const Array& array, std::span<const DimSlice> selection,
                                   int device, int repeats, const CudaReadOptions& options = {});

// Device memory owned by the engine (for results handed over through DLPack).
class DeviceAllocation {
 public:
  DeviceAllocation(int device, std::size_t nbytes);
  ~DeviceAllocation();
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] int device() const { return device_; }

 private:
  int device_;
  std::size_t size_;
  void* data_ = nullptr;
};

}  // namespace zarr_device
