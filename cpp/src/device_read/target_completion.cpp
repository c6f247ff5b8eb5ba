#include "device_read/target_completion.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

namespace zarr_device::device_read {

TargetCompletion::TargetCompletion(std::span<const Leaf> leaves, std::span<const Batch> batches,
                                   std::size_t targets, std::function<void(std::size_t)> completed)
    : last_batch_(targets, 0), by_completion_(targets), completed_(std::move(completed)) {
  for (std::size_t b = 0; b < batches.size(); ++b) {
    for (std::size_t i = batches[b].begin; i < batches[b].end; ++i) {
      last_batch_[leaves[i].planned().target] = b + 1;
    }
  }
  std::iota(by_completion_.begin(), by_completion_.end(), std::size_t{0});
  std::stable_sort(by_completion_.begin(), by_completion_.end(),
                   [&](std::size_t a, std::size_t b) { return last_batch_[a] < last_batch_[b]; });
}

void TargetCompletion::batches_finished(std::size_t finished) {
  if (!completed_) return;
  while (handed_on_ < by_completion_.size() &&
         last_batch_[by_completion_[handed_on_]] <= finished) {
    completed_(by_completion_[handed_on_++]);
  }
}

void announce_long_ranges(std::span<const Leaf> batch, std::uint64_t min_bytes) {
  for (std::size_t i = 0; i < batch.size();) {
    const auto& leaf = batch[i];
    std::size_t j = i + 1;
    std::uint64_t end = leaf.stored.offset + leaf.stored.length;
    while (j < batch.size() && batch[j].planned().array == leaf.planned().array &&
           batch[j].planned().key == leaf.planned().key && batch[j].stored.offset == end) {
      end += batch[j].stored.length;
      ++j;
    }
    if ((leaf.decoding.route == Route::kCopy || decodes_on_device(leaf.decoding.route)) &&
        end - leaf.stored.offset >= min_bytes) {
      leaf.planned().source().will_need(leaf.planned().key, leaf.stored.offset,
                                        end - leaf.stored.offset);
    }
    i = j;
  }
}

}  // namespace zarr_device::device_read
