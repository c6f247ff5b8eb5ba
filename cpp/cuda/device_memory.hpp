// Scratch memory of the GPU paths, through the engine's Device interface.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "devices/device.hpp"

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
  // user's. Growing it first waits for every stream in `users` (and freeing the old block
  // synchronises the device), so it grows at once to what later calls are likely to need:
  // kGrowth times `bytes`, within `room` (its share of the memory), never less than `bytes`.
  // (One-by-one reads of a state dict whose calls grew the regions a little at a time spent much
  // of the loop's time with the host held by growths: BENCHMARKS.md, Appendix: decisions, and
  // what was measured and not kept.)
  static constexpr std::size_t kGrowth = 4;
  std::byte* acquire(std::size_t bytes, std::size_t room, StreamHandle stream,
                     std::span<const StreamHandle> users) {
    if (bytes > memory_.size()) {
      for (auto* s : users) device_->synchronize_stream(s);
      used_ = false;
      memory_.reserve(std::max(bytes, std::min(room, bytes * kGrowth)));
    }
    std::byte* memory = memory_.data();
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
// device), lent to one call at a time: concurrent calls each get their own, up to `limit` per
// device (later callers wait for one to come back), so they overlap instead of queueing behind
// one lock while memory stays bounded by the settings. Contexts made with other settings are
// freed when they come back; idle ones are kept for later calls.
// Calls per device that run at once, each with its own staging (pinned and device memory: up to
// this many times the configured staging when as many threads read or write one device at once).
inline constexpr std::size_t kContextsPerDevice = 4;

template <typename Context, typename Settings>
class ContextPool {
  struct Entry {
    Settings settings{};
    std::vector<std::unique_ptr<Context>> idle;
    std::size_t lent = 0;          // of every generation
    std::uint64_t generation = 0;  // bumped when the settings change
  };

 public:
  explicit ContextPool(std::size_t limit) : limit_(std::max<std::size_t>(limit, 1)) {}

  // A context lent to one call: returned to the pool when the lease ends.
  class Lease {
   public:
    Lease(ContextPool* pool, int device, std::uint64_t generation, std::unique_ptr<Context> context)
        : pool_(pool), device_(device), generation_(generation), context_(std::move(context)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() { release(); }
    // Gives the context back now (the lease holds nothing afterwards).
    void release() noexcept {
      if (context_) pool_->give_back(device_, generation_, std::move(context_));
    }
    Context& operator*() const { return *context_; }
    Context* operator->() const { return context_.get(); }

   private:
    ContextPool* pool_;
    int device_;
    std::uint64_t generation_;
    std::unique_ptr<Context> context_;
  };

  // The devices that have had contexts.
  std::vector<int> devices() {
    std::lock_guard lock(mutex_);
    std::vector<int> out;
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }

  // Calls `visit(context)` on each idle context of `device`, none lent meanwhile.
  template <typename Visit>
  void for_each_idle(int device, Visit visit) {
    std::lock_guard lock(mutex_);
    const auto it = entries_.find(device);
    if (it == entries_.end()) return;
    for (auto& context : it->second.idle) visit(*context);
  }

  // Frees the idle contexts of `device` (every device's when negative); contexts lent meanwhile
  // are kept and come back idle as usual. How many were freed.
  std::size_t release_idle(int device) {
    std::vector<std::unique_ptr<Context>> freed;
    {
      std::lock_guard lock(mutex_);
      for (auto& [d, entry] : entries_) {
        if (device >= 0 && d != device) continue;
        for (auto& context : entry.idle) freed.push_back(std::move(context));
        entry.idle.clear();
      }
    }
    return freed.size();  // freed here, outside the lock: freeing pinned memory is slow
  }

  // A context for `settings`, waiting while `limit` of the device's are lent and none is idle.
  template <typename Make>
  Lease acquire(int device, const Settings& settings, Make make) {
    std::unique_lock lock(mutex_);
    auto& entry = entry_for(device, settings);
    returned_.wait(lock, [&] { return !entry.idle.empty() || entry.lent < limit_; });
    return lend(lock, device, entry, make);
  }

  // The same without waiting: nothing when `limit` are lent and none is idle.
  template <typename Make>
  std::optional<Lease> try_acquire(int device, const Settings& settings, Make make) {
    std::unique_lock lock(mutex_);
    auto& entry = entry_for(device, settings);
    if (entry.idle.empty() && entry.lent >= limit_) return std::nullopt;
    return lend(lock, device, entry, make);
  }

 private:
  // The device's entry, its idle contexts freed when they were made with other settings.
  Entry& entry_for(int device, const Settings& settings) {
    auto& entry = entries_[device];
    if (!(entry.settings == settings)) {
      entry.idle.clear();  // frees them; lent ones are freed when they come back
      entry.settings = settings;
      ++entry.generation;
    }
    return entry;
  }

  // Lends an idle context, or one made by `make` (outside the lock: pinned allocations are slow).
  template <typename Make>
  Lease lend(std::unique_lock<std::mutex>& lock, int device, Entry& entry, Make& make) {
    ++entry.lent;
    const std::uint64_t generation = entry.generation;
    if (!entry.idle.empty()) {
      auto context = std::move(entry.idle.back());
      entry.idle.pop_back();
      return Lease(this, device, generation, std::move(context));
    }
    lock.unlock();
    try {
      return Lease(this, device, generation, make());
    } catch (...) {
      lock.lock();
      --entry.lent;
      returned_.notify_one();
      throw;
    }
  }

  void give_back(int device, std::uint64_t generation, std::unique_ptr<Context> context) noexcept {
    std::unique_ptr<Context> stale;
    {
      std::lock_guard lock(mutex_);
      auto& entry = entries_[device];
      --entry.lent;
      if (generation == entry.generation) {
        entry.idle.push_back(std::move(context));
      } else {
        stale = std::move(context);  // freed outside the lock: freeing pinned memory is slow
      }
    }
    returned_.notify_one();
  }

  std::size_t limit_;
  std::mutex mutex_;
  std::condition_variable returned_;
  std::map<int, Entry> entries_;
};

}  // namespace zarr_device::cuda
