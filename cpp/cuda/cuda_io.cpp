// The entry points of reads and writes onto CUDA devices (zarr_device/cuda_io.hpp): a read of one
// or many arrays started again when its chunks are replaced while it reads them, what the build
// and the machine offer, and the memory kept between calls.
#include "zarr_device/cuda_io.hpp"

#include <cuda_runtime_api.h>

#include <numeric>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "cufile_api.hpp"
#include "nvcomp_api.hpp"
#include "place/strided_copy.hpp"
#include "shared_decoder.hpp"
#include "write_ring.hpp"

namespace zarr_device {

void synchronize_cuda_reads(int device) { cuda::synchronize_reads(device); }

void release_cuda_memory(int device) {
  if (device >= 0) cuda::check_device(device);
  // Contexts free their memory as they go: each first settles what a read that did not wait
  // left on its slots, keeping any failure for synchronize_cuda_reads.
  for (auto* rings : cuda::read_rings()) rings->release_idle(device);
  cuda::write_contexts().release_idle(device);
  // The decoder processes end and their arenas are freed; the next read starts another.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    devices = 0;
  }
  for (int d = 0; d < devices; ++d) {
    if (device < 0 || d == device) cuda::SharedDecoder::of(d).release();
  }
}

nlohmann::json isolated_decoding_info(int device) {
  cuda::check_device(device);
  return cuda::SharedDecoder::of(device).info();
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

nlohmann::json cuda_info() {
  nlohmann::json info = {{"compiled", true}, {"devices", cuda_device_count()}};
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  info["runtime_version"] = runtime;
  info["driver_version"] = driver;
  const auto& nvcomp = cuda::Nvcomp::instance();
  info["nvcomp"] = nvcomp.loaded() ? nlohmann::json(nvcomp.library()) : nlohmann::json(nullptr);
  if (!nvcomp.loaded()) info["nvcomp_error"] = nvcomp.error();
  info["nvcomp_zstd_compression"] = nvcomp.compressor(cuda::GpuCodec::kZstd) != nullptr;
  const std::string decoder = cuda::decoder_program();
  info["decoder_program"] = decoder.empty() ? nlohmann::json(nullptr) : nlohmann::json(decoder);
  const auto& cufile = cuda::CuFile::instance();
  info["cufile"] = cufile.available() ? nlohmann::json(cufile.library()) : nlohmann::json(nullptr);
  if (!cufile.available()) info["cufile_error"] = cufile.error();
  return info;
}

void read_many_to_cuda(std::span<const CudaReadRequest> requests, int device,
                       const ReadOptions& options,
                       const std::function<void(std::size_t)>& completed) {
  // A read that did not wait may have failed since: the caller hears of it before reading on.
  cuda::raise_deferred_failures(device);
  std::vector<device_read::ReadTarget> planned;
  planned.reserve(requests.size());
  std::vector<std::uintptr_t> streams;
  if (options.consumer_stream != 0) streams.push_back(options.consumer_stream);
  bool complete_on_host = false;
  for (const auto& t : requests) {
    complete_on_host = complete_on_host || (t.consumer_stream == 0 && options.consumer_stream == 0);
    if (t.consumer_stream != 0 &&
        std::find(streams.begin(), streams.end(), t.consumer_stream) == streams.end()) {
      streams.push_back(t.consumer_stream);
    }
    const std::size_t es = t.array->metadata().dtype->size;
    const auto shape = check_selection_and_buffer(t.selection, t.array->metadata().shape, es,
                                                  t.out_nbytes, "output buffer holds");
    planned.push_back(
        {t.array, t.selection,
         StridedView{static_cast<std::byte*>(t.out), shape, place::c_strides(shape, es)}});
  }
  // A read started again (a chunk was replaced while it was read) reads the outputs not yet
  // handed on, from a new plan; those handed on are complete and left alone.
  std::vector<std::size_t> pending(planned.size());
  std::iota(pending.begin(), pending.end(), std::size_t{0});
  for (int attempt = 1;; ++attempt) {
    std::vector<device_read::ReadTarget> now;
    now.reserve(pending.size());
    for (const std::size_t t : pending) now.push_back(planned[t]);
    // Each attempt finds its chunks from a view of the stores taken as it starts (a local
    // store's root opened once for the read, not per chunk).
    StoreViews stores;
    for (auto& target : now) target.store = &stores.of(target.array->store());
    std::vector<bool> handed_on(pending.size(), false);
    std::function<void(std::size_t)> report;
    if (completed) {
      report = [&](std::size_t i) {
        handed_on[i] = true;
        completed(pending[i]);
      };
    }
    try {
      cuda::Reader(device, options).read(now, streams, report, complete_on_host);
      return;
    } catch (const device_read::ValueChanged& e) {
      if (attempt == cuda::kReadAttempts) {
        throw StoreError(std::string(e.what()) + " (" + std::to_string(attempt) +
                         " times: the data are being rewritten faster than they can be read)");
      }
      std::vector<std::size_t> left;
      for (std::size_t i = 0; i < pending.size(); ++i) {
        if (!handed_on[i]) left.push_back(pending[i]);
      }
      pending = std::move(left);
    }
  }
}

void read_to_cuda(const Array& array, std::span<const DimSlice> selection, int device, void* out,
                  std::size_t out_nbytes, const ReadOptions& options) {
  const CudaReadRequest request{&array, {selection.begin(), selection.end()}, out, out_nbytes, 0};
  read_many_to_cuda({&request, 1}, device, options, {});
}

}  // namespace zarr_device
