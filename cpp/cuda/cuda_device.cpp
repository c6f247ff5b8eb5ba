// CUDA devices behind the engine's Device interface. Every call first makes the device current on
// the calling thread: the engine's worker threads serve several GPUs.
#include <cuda_runtime_api.h>

#include "cuda_check.hpp"
#include "devices/device.hpp"
#include "pinned_memory.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device {
namespace cuda {

void check_device(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    throw DeviceError(std::string("no CUDA device is usable: ") + cudaGetErrorString(status));
  }
  if (device < 0 || device >= count) {
    throw DeviceError("CUDA device " + std::to_string(device) +
                      " does not exist (this machine has " + std::to_string(count) + ")");
  }
}

namespace {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) { check_device(index); }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int index() const override { return index_; }
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  std::size_t memory_bytes() const override {
    current();
    std::size_t free = 0;
    std::size_t total = 0;
    ZD_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return total;
  }

  void* allocate(std::size_t bytes) override {
    current();
    void* p = nullptr;
    ZD_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
    return p;
  }
  void deallocate(void* pointer) noexcept override {
    if (!pointer) return;
    cudaSetDevice(index_);
    cudaFree(pointer);
  }
  void* allocate_host(std::size_t bytes) override {
    current();
    return allocate_pinned(bytes);
  }
  void deallocate_host(void* pointer) noexcept override { free_pinned(pointer); }

  StreamHandle create_stream() override {
    current();
    cudaStream_t s = nullptr;
    ZD_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  void destroy_stream(StreamHandle stream) noexcept override {
    if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  EventHandle create_event() override {
    current();
    cudaEvent_t e = nullptr;
    ZD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void destroy_event(EventHandle event) noexcept override {
    if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  void record(EventHandle event, StreamHandle stream) override {
    current();
    ZD_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), as_stream(stream)));
  }
  void wait(StreamHandle stream, EventHandle event) override {
    current();
    ZD_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event), 0));
  }
  void synchronize(EventHandle event) override {
    ZD_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  void synchronize_stream(StreamHandle stream) override {
    current();
    ZD_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  }

  void copy_async(void* destination, const void* source, std::size_t bytes, CopyKind kind,
                  StreamHandle stream) override {
    if (bytes == 0) return;
    current();
    const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                             : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                               : cudaMemcpyDeviceToDevice;
    ZD_CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, k, as_stream(stream)));
  }
  void fill_async(void* destination, unsigned char value, std::size_t bytes,
                  StreamHandle stream) override {
    if (bytes == 0) return;
    current();
    ZD_CUDA_CHECK(cudaMemsetAsync(destination, value, bytes, as_stream(stream)));
  }

 private:
  void current() const { ZD_CUDA_CHECK(cudaSetDevice(index_)); }
  static cudaStream_t as_stream(StreamHandle stream) { return static_cast<cudaStream_t>(stream); }
  int index_;
};

}  // namespace
}  // namespace cuda

std::shared_ptr<Device> make_cuda_device(int index) {
  return std::make_shared<cuda::CudaDevice>(index);
}

}  // namespace zarr_device
