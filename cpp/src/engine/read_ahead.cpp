#include "engine/read_ahead.hpp"

#include <algorithm>
#include <system_error>
#include <utility>

namespace zarr_device::engine {

ReadAhead::ReadAhead(std::size_t count, std::uint64_t item_bytes,
                     std::function<void(std::size_t)> announce, std::uint64_t window_bytes,
                     std::function<std::uint64_t()> disk_reads)
    : count_(count),
      window_(static_cast<std::size_t>(
          std::max<std::uint64_t>(window_bytes / std::max<std::uint64_t>(item_bytes, 1), 1))),
      announce_(std::move(announce)),
      disk_reads_(std::move(disk_reads)),
      disk_reads_at_start_(disk_reads_()) {}

ReadAhead::~ReadAhead() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  more_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReadAhead::read(std::size_t i) {
  // Warm reads take no lock: one look at the count of reads that waited.
  if (!cold_seen_.load(std::memory_order_relaxed)) {
    if (disk_reads_() == disk_reads_at_start_) return;
    cold_seen_.store(true, std::memory_order_relaxed);
  }
  std::unique_lock lock(mutex_);
  furthest_ = std::max(furthest_, i + 1);
  if (!cold_) {
    cold_ = true;
    try {
      thread_ = std::thread([this] { announce_ahead(); });
    } catch (const std::system_error&) {  // NOLINT(bugprone-empty-catch): no thread, no hints
      return;
    }
  }
  lock.unlock();
  more_.notify_one();
}

void ReadAhead::announce_ahead() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Items already read need no announcing.
    next_ = std::max(next_, furthest_);
    const std::size_t until = std::min(count_, furthest_ + window_);
    if (stopping_ || next_ >= count_) return;
    if (next_ >= until) {
      more_.wait(lock);
      continue;
    }
    const std::size_t item = next_++;
    lock.unlock();
    announce_(item);
    lock.lock();
  }
}

std::size_t ReadAhead::announced() {
  const std::lock_guard lock(mutex_);
  return next_;
}

}  // namespace zarr_device::engine
