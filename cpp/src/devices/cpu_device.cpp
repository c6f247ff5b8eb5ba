// The host as a device: memory is ordinary (cache-line aligned) memory and every operation
// completes when it is enqueued, so code written against streams and events runs unchanged on the
// CPU.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "devices/device.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

constexpr std::size_t kAlignment = 64;

void* aligned_allocate(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p)
    throw OutOfMemoryError("could not allocate " + std::to_string(bytes) + " bytes of host memory");
  return p;
}

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  int index() const override { return 0; }
  std::string name() const override { return "cpu"; }
  std::size_t memory_bytes() const override {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                                 : 0;
  }

  void* allocate(std::size_t bytes) override { return aligned_allocate(bytes); }
  void deallocate(void* pointer) noexcept override { std::free(pointer); }
  void* allocate_host(std::size_t bytes) override { return aligned_allocate(bytes); }
  void deallocate_host(void* pointer) noexcept override { std::free(pointer); }

  StreamHandle create_stream() override { return nullptr; }
  void destroy_stream(StreamHandle /*stream*/) noexcept override {}
  EventHandle create_event() override { return nullptr; }
  void destroy_event(EventHandle /*event*/) noexcept override {}
  void record(EventHandle /*event*/, StreamHandle /*stream*/) override {}
  void wait(StreamHandle /*stream*/, EventHandle /*event*/) override {}
  void synchronize(EventHandle /*event*/) override {}
  void synchronize_stream(StreamHandle /*stream*/) override {}

  void copy_async(void* destination, const void* source, std::size_t bytes, CopyKind /*kind*/,
                  StreamHandle /*stream*/) override {
    if (bytes) std::memmove(destination, source, bytes);
  }
  void fill_async(void* destination, unsigned char value, std::size_t bytes,
                  StreamHandle /*stream*/) override {
    if (bytes) std::memset(destination, value, bytes);
  }
};

}  // namespace

std::shared_ptr<Device> make_cpu_device() { return std::make_shared<CpuDevice>(); }

}  // namespace zarr_device
