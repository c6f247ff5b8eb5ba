// Offsets in a ring of device memory that batches take in order and give back oldest first: the
// decode memory of reads whose chunks are so large that a staging slot holds only a few of them.
// Such a batch's stored bytes, decoder's temporary memory and scratch live here from its copy to
// the end of its decode, so its slot is filled again as soon as it is copied, and how many chunks
// decode at once is bounded by this memory alone. Pure host logic: the device side (events that
// say when a range is free) is the caller's, handed the ranges to wait for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

namespace zarr_device::device_read {

class FifoRing {
 public:
  explicit FifoRing(std::size_t capacity) : capacity_(capacity) {}

  // A range taken: its offset, and its number (for its caller's bookkeeping: the event that
  // frees it).
  struct Taken {
    std::size_t offset = 0;
    std::uint64_t id = 0;
  };

  // `bytes` (at most the capacity; OutOfMemoryError naming `where` otherwise) at the next place
  // after the last range taken, or at the start when they do not fit before the end. Ranges taken
  // earlier that overlap it are retired first (`retire(id, gone)`: the caller makes the new
  // range's work wait for theirs; `gone`: none of the range is left live, so its event may be
  // reused; otherwise its uncovered rest stays live, to be waited for by whoever reuses it). A
  // range not yet
  // closed (close()) is its caller's own, still being built: overlapping it throws
  // OutOfMemoryError (the ring is too small for what one batch needs at once).
  Taken take(std::size_t bytes, const std::function<void(std::uint64_t, bool)>& retire,
             const std::string& where);
  // Marks `id` (and every range taken before it) as finished with by its batch's work once that
  // work is queued: later ranges may then retire it.
  void close(std::uint64_t id);
  // Forgets every range (their work is known to be done).
  void reset();

  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  [[nodiscard]] std::size_t live() const { return ranges_.size(); }

 private:
  struct Range {
    std::size_t offset;
    std::size_t bytes;
    std::uint64_t id;
    bool closed;
  };
  std::size_t capacity_;
  std::size_t head_ = 0;  // where the next range starts, unless it wraps
  std::uint64_t next_id_ = 1;
  std::deque<Range> ranges_;  // live, oldest first
};

}  // namespace zarr_device::device_read
