// Internal: memory, streams and events of a device behind one interface. The host ("cpu") and
// CUDA ("cuda:N") implement it. What uses it: the CUDA read and write paths allocate their pinned
// staging, device scratch and nvCOMP's temporary memory and make their streams and events through
// it (their copies, kernels and nvCOMP calls are CUDA's own, not this interface's), and the Python
// bindings allocate the device memory of results (DeviceBuffer). copy_async and fill_async serve
// the interface's tests; another accelerator would need its own read and write paths besides an
// implementation of this.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace zarr_device {

enum class DeviceKind { kCpu, kCuda };

// Opaque handles: cudaStream_t / cudaEvent_t for CUDA. On the host, work runs when it is
// enqueued, so streams and events are placeholders that are always complete.
using StreamHandle = void*;
using EventHandle = void*;

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  [[nodiscard]] virtual DeviceKind kind() const = 0;
  [[nodiscard]] virtual int index() const = 0;
  // "cpu", "cuda:0": the name get_device() takes.
  [[nodiscard]] virtual std::string name() const = 0;
  // The memory the device has in all, free or not (what defaults sized by the device follow).
  [[nodiscard]] virtual std::size_t memory_bytes() const = 0;

  // Memory on the device; OutOfMemoryError when there is not enough. Zero bytes gives a valid,
  // unique pointer.
  [[nodiscard]] virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer) noexcept = 0;
  // Host memory the device copies to and from asynchronously (page-locked for CUDA). Slow to
  // allocate: made once and reused (the staging ring).
  [[nodiscard]] virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* pointer) noexcept = 0;

  // Streams run their work in order; work on different streams may overlap.
  [[nodiscard]] virtual StreamHandle create_stream() = 0;
  virtual void destroy_stream(StreamHandle stream) noexcept = 0;
  [[nodiscard]] virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;
  // Marks the point in `stream` that `event` stands for from now on.
  virtual void record(EventHandle event, StreamHandle stream) = 0;
  // Later work on `stream` waits for the work before `event`.
  virtual void wait(StreamHandle stream, EventHandle event) = 0;
  // Blocks the calling thread until the work before `event` (or all work of `stream`) is done.
  virtual void synchronize(EventHandle event) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;

  // Enqueues a copy of `bytes` bytes; host pointers must come from allocate_host() for the copy to
  // be asynchronous.
  virtual void copy_async(void* destination, const void* source, std::size_t bytes, CopyKind kind,
                          StreamHandle stream) = 0;
  // Enqueues setting `bytes` bytes of device memory to `value`.
  virtual void fill_async(void* destination, unsigned char value, std::size_t bytes,
                          StreamHandle stream) = 0;
};

// The one registry of device kinds, keyed by the name's prefix ("cpu", "cuda"). A device is made
// on first use and shared.
class DeviceRegistry {
 public:
  using Factory = std::function<std::shared_ptr<Device>(int index)>;
  static DeviceRegistry& instance();  // holds "cpu" and "cuda"
  void add(std::string kind, Factory factory);
  // "cpu", "cuda" (device 0), "cuda:N". UsageError for an unknown kind or a malformed name;
  // DeviceError when the device does not exist or the build lacks its support.
  [[nodiscard]] std::shared_ptr<Device> get(std::string_view name);
  // Device `index` of `kind` ("cuda", 0): how the engine asks, with an index it holds as one.
  // UsageError for an unknown kind or a negative index; DeviceError as above.
  [[nodiscard]] std::shared_ptr<Device> get(std::string_view kind, int index);

 private:
  DeviceRegistry();
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

inline std::shared_ptr<Device> get_device(std::string_view name) {
  return DeviceRegistry::instance().get(name);
}
inline std::shared_ptr<Device> get_device(std::string_view kind, int index) {
  return DeviceRegistry::instance().get(kind, index);
}

// Device memory owned by one object (results handed over through DLPack, scratch space).
class DeviceBuffer {
 public:
  DeviceBuffer(std::shared_ptr<Device> device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] const Device& device() const { return *device_; }

 private:
  std::shared_ptr<Device> device_;
  std::size_t size_;
  void* data_;
};

// The devices' built-in implementations (registered in DeviceRegistry; also for tests).
std::shared_ptr<Device> make_cpu_device();
// DeviceError when `index` names no CUDA device or the build has no CUDA support.
std::shared_ptr<Device> make_cuda_device(int index);

}  // namespace zarr_device
