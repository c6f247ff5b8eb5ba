#include "read/read_plan.hpp"

#include <algorithm>

namespace zarr_device::read {

ReadPlan::ReadPlan(std::span<const ReadTarget> targets) : targets_(targets.begin(), targets.end()) {
  grids_.reserve(targets_.size());
  first_.reserve(targets_.size() + 1);
  for (const auto& t : targets_) {
    grids_.emplace_back(t.selection, t.array->metadata().chunk_shape);
    first_.push_back(first_.back() + grids_.back().size());
  }
}

std::size_t ReadPlan::locate(std::size_t i, place::GridIntersection::Item& item) const {
  const auto t =
      static_cast<std::size_t>(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) -
      1;
  grids_[t].at(i - first_[t], item);
  return t;
}

std::string ReadPlan::chunk_key(std::size_t t, std::span<const std::int64_t> chunk) const {
  return array(t).chunk_key(chunk);
}

const Store& ReadPlan::store(std::size_t t) const {
  return targets_[t].store ? *targets_[t].store : *targets_[t].array->store();
}

const BatchedGets* ReadPlan::batched_gets(std::size_t t) const {
  return dynamic_cast<const BatchedGets*>(targets_[t].array->store().get());
}

const codecs::ShardLayout* ReadPlan::shards(std::size_t t) const {
  return targets_[t].array->chain().shard_layout();
}

std::string ReadPlan::where(std::size_t t, const std::string& key) const {
  return array(t).describe() + ", chunk '" + key + "'";
}

}  // namespace zarr_device::read
