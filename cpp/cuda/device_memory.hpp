// Scratch memory of the GPU paths, through the engine's Device interface.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "zarr_device/device.hpp"

namespace zarr_device::cuda {

// Device memory that grows on demand. Growing frees the old block, so it happens only while no
// enqueued work uses it (between batches).
class DeviceScratch {
 public:
  DeviceScratch() = default;
  explicit DeviceScratch(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  ~DeviceScratch() {
    if (data_) device_->deallocate(data_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  DeviceScratch(DeviceScratch&& other) noexcept { *this = std::move(other); }
  DeviceScratch& operator=(DeviceScratch&& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }

  std::byte* reserve(std::size_t bytes) {
    if (bytes > size_) {
      if (data_) device_->deallocate(data_);
      data_ = nullptr;
      size_ = 0;
      data_ = device_->allocate(bytes);
      size_ = bytes;
    }
    return static_cast<std::byte*>(data_);
  }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  std::shared_ptr<Device> device_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// nvCOMP's temporary memory, shared by the streams of a ring: one batched (de)compression fills
// the GPU on its own, so running them one after another costs nothing, and one buffer instead of
// one per stream keeps device memory within its bound.
class SharedTemp {
 public:
  explicit SharedTemp(std::shared_ptr<Device> device)
      : device_(device), memory_(device), free_(device->create_event()) {}
  ~SharedTemp() { device_->destroy_event(free_); }
  SharedTemp(const SharedTemp&) = delete;
  SharedTemp& operator=(const SharedTemp&) = delete;

  // The buffer, at least `bytes` long, with `stream`'s later work ordered after the previous
  // user's. Growing it first waits for every stream in `users`.
  std::byte* acquire(std::size_t bytes, StreamHandle stream, std::span<const StreamHandle> users) {
    if (bytes > memory_.size()) {
      for (auto* s : users) device_->synchronize_stream(s);
      used_ = false;
    }
    std::byte* memory = memory_.reserve(bytes);
    if (used_) device_->wait(stream, free_);
    return memory;
  }
  // Marks the point in `stream` after which the buffer is free again.
  void release(StreamHandle stream) {
    device_->record(free_, stream);
    used_ = true;
  }

 private:
  std::shared_ptr<Device> device_;
  DeviceScratch memory_;
  EventHandle free_;
  bool used_ = false;
};

// Per-device state kept between calls (pinned memory is slow to allocate and synchronises the
// device), made again when the settings it was made with change. A call holds the shared_ptr
// while it runs, so a replaced context is freed when the last call using it ends.
template <typename Context, typename Settings>
class ContextCache {
 public:
  template <typename Make>
  std::shared_ptr<Context> get(int device, const Settings& settings, Make make) {
    std::lock_guard lock(mutex_);
    auto& entry = entries_[device];
    if (!entry.context || !(entry.settings == settings)) {
      entry.context.reset();  // frees the old one first where no call holds it
      entry.context = make();
      entry.settings = settings;
    }
    return entry.context;
  }

 private:
  struct Entry {
    Settings settings{};
    std::shared_ptr<Context> context;
  };
  std::mutex mutex_;
  std::map<int, Entry> entries_;
};

}  // namespace zarr_device::cuda
