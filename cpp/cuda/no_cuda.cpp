// The device entry points of a build without the CUDA toolkit.
#ifndef ZARR_DEVICE_WITH_CUDA

#include "device_read/bench_hooks.hpp"
#include "devices/device.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device {

namespace {
[[noreturn]] void no_cuda() {
  throw DeviceError(
      "this build of zarr-device has no CUDA support (the CUDA toolkit was not found when it "
      "was built); rebuild with nvcc on the PATH");
}
}  // namespace

int cuda_device_count() { return 0; }

nlohmann::json cuda_info() { return {{"compiled", false}, {"devices", 0}}; }

nlohmann::json isolated_decoding_info(int) { no_cuda(); }

void read_to_cuda(const Array&, std::span<const DimSlice>, int, void*, std::size_t,
                  const ReadOptions&) {
  no_cuda();
}

void read_many_to_cuda(std::span<const CudaReadRequest>, int, const ReadOptions&,
                       const std::function<void(std::size_t)>&) {
  no_cuda();
}

void synchronize_cuda_reads(int) { no_cuda(); }
void release_cuda_memory(int) {}  // nothing is held without CUDA

nlohmann::json measure_cuda_decode(const Array&, std::span<const DimSlice>, int, int,
                                   const ReadOptions&) {
  no_cuda();
}

void write_from_cuda(const Array&, std::span<const DimSlice>, int, const void*, std::size_t,
                     const CudaWriteOptions&) {
  no_cuda();
}

std::shared_ptr<Device> make_cuda_device(int /*index*/) { no_cuda(); }

}  // namespace zarr_device

#endif
