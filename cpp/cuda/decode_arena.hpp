// The decode memory of reads whose chunks are so large that a staging slot holds only a few of
// them (device_read/fifo_ring.hpp says why): one block of device memory, taken in ranges batch
// after batch and freed in stream order, each range's later user waiting on the device for its last
// one. Internal to cpp/cuda.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device_memory.hpp"
#include "device_read/fifo_ring.hpp"
#include "device_read/staging_alignment.hpp"
#include "devices/device.hpp"

namespace zarr_device::cuda {

class DecodeArena {
 public:
  DecodeArena(std::shared_ptr<Device> device, std::size_t capacity)
      : device_(device),
        memory_(device),
        ring_(capacity / device_read::kStagingAlignment * device_read::kStagingAlignment) {}
  ~DecodeArena() {
    for (auto& [id, event] : events_) device_->destroy_event(event);
    for (auto* event : spare_) device_->destroy_event(event);
  }
  DecodeArena(const DecodeArena&) = delete;
  DecodeArena& operator=(const DecodeArena&) = delete;

  // `bytes` of the memory (allocated whole on first use) for work queued on `stream` from now
  // on, which waits on the device for the work that last used them. OutOfMemoryError naming
  // `where` when the memory cannot hold them beside what the caller took since its last release.
  std::byte* take(std::size_t bytes, StreamHandle stream, const std::string& where) {
    if (memory_.size() < ring_.capacity()) memory_.reserve(ring_.capacity());
    const auto taken = ring_.take(
        device_read::align_up(std::max<std::size_t>(bytes, 1), device_read::kStagingAlignment),
        [&](std::uint64_t id, bool gone) {
          const auto it = events_.find(id);
          if (it == events_.end()) return;
          device_->wait(stream, it->second);
          if (!gone) return;
          spare_.push_back(it->second);
          events_.erase(it);
        },
        where);
    open_.push_back(taken.id);
    return memory_.data() + taken.offset;
  }

  // The ranges taken since the last release are free once the work queued on `stream` so far is
  // done (the caller queued all of their work there).
  void release(StreamHandle stream) {
    for (const std::uint64_t id : open_) {
      EventHandle event = nullptr;
      if (spare_.empty()) {
        event = device_->create_event();
      } else {
        event = spare_.back();
        spare_.pop_back();
      }
      device_->record(event, stream);
      events_.emplace(id, event);
    }
    if (!open_.empty()) ring_.close(open_.back());
    open_.clear();
  }

  // Forgets every range: the caller knows their work is done (it synchronised the streams).
  void reset() {
    for (auto& [id, event] : events_) spare_.push_back(event);
    events_.clear();
    open_.clear();
    ring_.reset();
  }
  // reset(), and the memory freed.
  void clear() {
    reset();
    memory_ = DeviceScratch(device_);
  }

  [[nodiscard]] std::size_t capacity() const { return ring_.capacity(); }
  [[nodiscard]] bool holds_memory() const { return memory_.size() > 0; }

 private:
  std::shared_ptr<Device> device_;
  DeviceScratch memory_;
  device_read::FifoRing ring_;
  std::map<std::uint64_t, EventHandle> events_;  // of the closed ranges still live
  std::vector<EventHandle> spare_;
  std::vector<std::uint64_t> open_;  // taken since the last release
};

}  // namespace zarr_device::cuda
