// Announcing a read's chunks to the page cache ahead of its threads, once its data turn out to be
// on the disk. A read gives each thread one chunk file at a time, so a cold read keeps only as
// many requests at the disk as it has threads, each for one small file, while a reader of one
// large file has the kernel's read-ahead working far ahead of it: with every file announced by a
// thread beside the read, a cold read of many chunk files reads about as fast as one large file
// (the benchmark notebook, "Cold reads of many chunk files: the files ahead announced once the
// data turn out cold"). An announcement is an open and a system call that starts the disk's
// reads, so a thread of its own makes them, not the read's,
// and only once a read of this process has waited for the disk (stores::reads_from_disk): warm
// reads pay nothing. Pure host logic: what announcing an item means is given.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "stores/file_io.hpp"

namespace zarr_device::engine {

// Announce a read's items this far ahead of the furthest one read (in the order its threads take
// them): enough requests to keep a disk's queue busy, and bytes that the page cache holds
// without pushing out what the read has yet to copy.
inline constexpr std::uint64_t kReadAheadBytes = std::uint64_t{256} << 20;

class ReadAhead {
 public:
  // Items [0, count) are read in about that order; `announce(i)` tells the store item i will be
  // read (Store::will_need, which must not throw), on the announcing thread; `item_bytes` is about
  // how many bytes each holds (at least 1), from which the window of `window_bytes` is counted in
  // items. `disk_reads`: the count of the process's reads that waited for the disk.
  ReadAhead(std::size_t count, std::uint64_t item_bytes, std::function<void(std::size_t)> announce,
            std::uint64_t window_bytes = kReadAheadBytes,
            std::function<std::uint64_t()> disk_reads = stores::reads_from_disk);
  // Stops announcing (what was announced stays a hint) and joins the thread.
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // Item `i` has been read (from any of the read's threads). Once the process has read from the
  // disk since the read began, a thread announces each item up to the window past the furthest
  // read, once.
  void read(std::size_t i);

  // How many items have been announced or passed over (for tests and traces).
  [[nodiscard]] std::size_t announced();

 private:
  void announce_ahead();

  std::size_t count_;
  std::size_t window_;
  std::function<void(std::size_t)> announce_;
  std::function<std::uint64_t()> disk_reads_;
  std::uint64_t disk_reads_at_start_;
  std::mutex mutex_;
  std::condition_variable more_;
  std::size_t furthest_ = 0;            // one past the furthest item read
  std::size_t next_ = 0;                // items [0, next_) announced or passed over
  std::atomic<bool> cold_seen_{false};  // the count has grown (read without the lock)
  bool cold_ = false;                   // and the thread was made (under the lock)
  bool stopping_ = false;
  std::thread thread_;  // made once the read turns out cold
};

}  // namespace zarr_device::engine
