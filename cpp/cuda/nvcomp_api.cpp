#include "nvcomp_api.hpp"

#include <dlfcn.h>

#include <cstdint>

#if __has_include(<nvcomp/zstd.h>)
#define ZARR_DEVICE_WITH_NVCOMP 1
#include <nvcomp/deflate.h>
#include <nvcomp/gzip.h>
#include <nvcomp/lz4.h>
#include <nvcomp/zstd.h>
#endif

#include "shared_library.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {

#ifdef ZARR_DEVICE_WITH_NVCOMP
namespace {

// Resolved entry points of one algorithm; the adapters below give them one shape.
template <typename Opts>
struct Symbols {
  nvcompStatus_t (*alignments)(Opts, nvcompAlignmentRequirements_t*) = nullptr;
  nvcompStatus_t (*temp)(std::size_t, std::size_t, Opts, std::size_t*, std::size_t,
                         cudaStream_t) = nullptr;
  nvcompStatus_t (*run)(const void* const*, const std::size_t*, const std::size_t*, std::size_t*,
                        std::size_t, void* const, std::size_t, void* const*, Opts, nvcompStatus_t*,
                        cudaStream_t) = nullptr;
  nvcompStatus_t (*temp_sync)(const void* const*, const std::size_t*, std::size_t, std::size_t,
                              std::size_t*, std::size_t, Opts, nvcompStatus_t*,
                              cudaStream_t) = nullptr;  // optional
  Opts opts{};
};

Symbols<nvcompBatchedZstdDecompressOpts_t> g_zstd;
Symbols<nvcompBatchedGzipDecompressOpts_t> g_gzip;
Symbols<nvcompBatchedDeflateDecompressOpts_t> g_deflate;
Symbols<nvcompBatchedLZ4DecompressOpts_t> g_lz4;

template <typename Opts>
bool resolve(void* lib, const char* name, Symbols<Opts>& s, Opts opts) {
  const std::string base = std::string("nvcompBatched") + name + "Decompress";
  s.alignments = reinterpret_cast<decltype(s.alignments)>(
      dlsym(lib, (base + "GetRequiredAlignments").c_str()));
  s.temp = reinterpret_cast<decltype(s.temp)>(dlsym(lib, (base + "GetTempSize").c_str()));
  s.run = reinterpret_cast<decltype(s.run)>(dlsym(lib, (base + "Async").c_str()));
  s.temp_sync =
      reinterpret_cast<decltype(s.temp_sync)>(dlsym(lib, (base + "GetTempSizeSync").c_str()));
  s.opts = opts;
  return s.alignments && s.temp && s.run;
}

template <typename Opts, Symbols<Opts>& S>
BatchedDecompressor make() {
  BatchedDecompressor d;
  d.temp_size = [](std::size_t chunks, std::size_t max_chunk, std::size_t total) -> std::size_t {
    std::size_t bytes = 0;
    if (S.temp(chunks, max_chunk, S.opts, &bytes, total, nullptr) != nvcompSuccess) {
      throw DeviceError("nvCOMP could not size its temporary memory");
    }
    return bytes;
  };
  if (S.temp_sync) {
    d.temp_size_of = [](const void* const* inputs, const std::size_t* input_sizes,
                        std::size_t chunks, std::size_t max_chunk, std::size_t total,
                        cudaStream_t stream) -> std::size_t {
      std::size_t bytes = 0;
      if (S.temp_sync(inputs, input_sizes, chunks, max_chunk, &bytes, total, S.opts, nullptr,
                      stream) != nvcompSuccess) {
        return SIZE_MAX;  // the caller plans as before the data are seen
      }
      return bytes;
    };
  }
  d.decompress = [](const void* const* inputs, const std::size_t* input_sizes,
                    const std::size_t* capacities, std::size_t* sizes, std::size_t chunks,
                    void* temp, std::size_t temp_bytes, void* const* outputs, int* statuses,
                    cudaStream_t stream) {
    const nvcompStatus_t status =
        S.run(inputs, input_sizes, capacities, sizes, chunks, temp, temp_bytes, outputs, S.opts,
              reinterpret_cast<nvcompStatus_t*>(statuses), stream);
    if (status != nvcompSuccess) {
      throw DeviceError("nvCOMP could not start decompression (status " +
                        std::to_string(static_cast<int>(status)) + ")");
    }
  };
  nvcompAlignmentRequirements_t a{};
  if (S.alignments(S.opts, &a) == nvcompSuccess) {
    d.input_alignment = a.input;
    d.output_alignment = a.output;
    d.temp_alignment = a.temp;
  }
  return d;
}

struct ZstdCompressSymbols {
  nvcompStatus_t (*alignments)(nvcompBatchedZstdCompressOpts_t,
                               nvcompAlignmentRequirements_t*) = nullptr;
  nvcompStatus_t (*temp)(std::size_t, std::size_t, nvcompBatchedZstdCompressOpts_t, std::size_t*,
                         std::size_t, cudaStream_t) = nullptr;
  nvcompStatus_t (*max_output)(std::size_t, nvcompBatchedZstdCompressOpts_t,
                               std::size_t*) = nullptr;
  nvcompStatus_t (*run)(const void* const*, const std::size_t*, std::size_t, std::size_t, void*,
                        std::size_t, void* const*, std::size_t*, nvcompBatchedZstdCompressOpts_t,
                        nvcompStatus_t*, cudaStream_t) = nullptr;
} g_zstd_compress;

bool resolve_zstd_compressor(void* lib, BatchedCompressor& c) {
  auto& s = g_zstd_compress;
  s.alignments = reinterpret_cast<decltype(s.alignments)>(
      dlsym(lib, "nvcompBatchedZstdCompressGetRequiredAlignments"));
  s.temp = reinterpret_cast<decltype(s.temp)>(dlsym(lib, "nvcompBatchedZstdCompressGetTempSize"));
  s.max_output = reinterpret_cast<decltype(s.max_output)>(
      dlsym(lib, "nvcompBatchedZstdCompressGetMaxOutputChunkSize"));
  s.run = reinterpret_cast<decltype(s.run)>(dlsym(lib, "nvcompBatchedZstdCompressAsync"));
  if (!s.alignments || !s.temp || !s.max_output || !s.run) return false;
  c.temp_size = [](std::size_t chunks, std::size_t max_chunk, std::size_t total) -> std::size_t {
    std::size_t bytes = 0;
    if (g_zstd_compress.temp(chunks, max_chunk, nvcompBatchedZstdCompressDefaultOpts, &bytes, total,
                             nullptr) != nvcompSuccess) {
      throw DeviceError("nvCOMP could not size its temporary memory for compression");
    }
    return bytes;
  };
  c.max_output = [](std::size_t max_chunk) -> std::size_t {
    std::size_t bytes = 0;
    if (g_zstd_compress.max_output(max_chunk, nvcompBatchedZstdCompressDefaultOpts, &bytes) !=
        nvcompSuccess) {
      throw DeviceError("nvCOMP could not bound the compressed size of a chunk");
    }
    return bytes;
  };
  c.compress = [](const void* const* inputs, const std::size_t* input_sizes, std::size_t max_chunk,
                  std::size_t chunks, void* temp, std::size_t temp_bytes, void* const* outputs,
                  std::size_t* output_sizes, int* statuses, cudaStream_t stream) {
    const nvcompStatus_t status = g_zstd_compress.run(
        inputs, input_sizes, max_chunk, chunks, temp, temp_bytes, outputs, output_sizes,
        nvcompBatchedZstdCompressDefaultOpts, reinterpret_cast<nvcompStatus_t*>(statuses), stream);
    if (status != nvcompSuccess) {
      throw DeviceError("nvCOMP could not start compression (status " +
                        std::to_string(static_cast<int>(status)) + ")");
    }
  };
  // The documented limit of the batched zstd compressor's chunks.
  c.max_chunk = std::size_t{16} << 20;
  nvcompAlignmentRequirements_t a{};
  if (s.alignments(nvcompBatchedZstdCompressDefaultOpts, &a) == nvcompSuccess) {
    c.input_alignment = a.input;
    c.output_alignment = a.output;
    c.temp_alignment = a.temp;
  }
  return true;
}

}  // namespace
#endif

Nvcomp::Nvcomp() {
#ifdef ZARR_DEVICE_WITH_NVCOMP
  const auto opened = open_shared_library(EnvironmentVariable::kNvcompLibrary,
                                          {"libnvcomp.so.6", "libnvcomp.so.5", "libnvcomp.so"});
  void* lib = opened.handle;
  if (!lib) {
    error_ = "nvCOMP not found (pip install nvidia-libnvcomp-cu13): " + opened.errors;
    return;
  }
  library_ = opened.name;
  const bool ok = resolve(lib, "Zstd", g_zstd, nvcompBatchedZstdDecompressDefaultOpts) &&
                  resolve(lib, "Gzip", g_gzip, nvcompBatchedGzipDecompressDefaultOpts) &&
                  resolve(lib, "Deflate", g_deflate, nvcompBatchedDeflateDecompressDefaultOpts) &&
                  resolve(lib, "LZ4", g_lz4, nvcompBatchedLZ4DecompressDefaultOpts);
  if (!ok) {
    error_ = library_ + " lacks the batched decompression API this build expects";
    return;
  }
  zstd_ = make<nvcompBatchedZstdDecompressOpts_t, g_zstd>();
  gzip_ = make<nvcompBatchedGzipDecompressOpts_t, g_gzip>();
  deflate_ = make<nvcompBatchedDeflateDecompressOpts_t, g_deflate>();
  lz4_ = make<nvcompBatchedLZ4DecompressOpts_t, g_lz4>();
  has_zstd_compressor_ = resolve_zstd_compressor(lib, zstd_compressor_);
  loaded_ = true;
  error_.clear();
#else
  error_ = "this build has no nvCOMP support (its headers were not found when it was built)";
#endif
}

const Nvcomp& Nvcomp::instance() {
  static const Nvcomp nvcomp;
  return nvcomp;
}

const BatchedDecompressor* Nvcomp::decompressor(GpuCodec codec) const {
  if (!loaded_) return nullptr;
  switch (codec) {
    case GpuCodec::kZstd:
      return &zstd_;
    case GpuCodec::kGzip:
      return &gzip_;
    case GpuCodec::kDeflate:
      return &deflate_;
    case GpuCodec::kLz4:
      return &lz4_;
    case GpuCodec::kChecksum:  // verified on the CPU
      return nullptr;
  }
  return nullptr;
}

const BatchedCompressor* Nvcomp::compressor(GpuCodec codec) const {
  if (!loaded_ || codec != GpuCodec::kZstd || !has_zstd_compressor_) return nullptr;
  return &zstd_compressor_;
}

}  // namespace zarr_device::cuda
