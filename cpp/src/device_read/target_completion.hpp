// When each output of a device read is complete: the targets are handed on as the batch holding
// their last leaf finishes, in that order, while later batches are still on their way (a loader
// hands each tensor on as it lands). Host C++, so GoogleTest checks the order without a GPU.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "device_read/read_batches.hpp"
#include "device_read/read_leaf.hpp"

namespace zarr_device::device_read {

class TargetCompletion {
 public:
  // `targets` outputs, whose `leaves` are packed into `batches`; `completed(t)` hands target t on
  // (nothing is handed on without it).
  TargetCompletion(std::span<const Leaf> leaves, std::span<const Batch> batches,
                   std::size_t targets, std::function<void(std::size_t)> completed);

  // Batches [0, finished) are complete: hands on every target whose leaves all lie in them, once
  // each, in the order they became complete (targets with nothing staged first).
  void batches_finished(std::size_t finished);

 private:
  std::vector<std::size_t> last_batch_;     // per target: its last batch + 1; 0: none staged
  std::vector<std::size_t> by_completion_;  // the targets in the order they complete
  std::size_t handed_on_ = 0;               // of by_completion_
  std::function<void(std::size_t)> completed_;
};

// Tells each store which long stretches of stored bytes a batch reads (consecutive leaves of one
// value, at least `min_bytes` in all, that are copied or decoded on the device), as the batch's CPU
// stage starts, so that cold data is read from the disk in large requests while that stage reads it
// in pieces (Store::will_need).
void announce_long_ranges(std::span<const Leaf> batch, std::uint64_t min_bytes);

}  // namespace zarr_device::device_read
