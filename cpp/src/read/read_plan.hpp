// The plan of a read of one or many arrays, which the host read (cpp/src/engine: array_read.cpp,
// sharded_read.cpp, batched_read.cpp) and the device read (cpp/src/device_read, cpp/cuda) both
// execute: each target's selection as the chunks it touches, one index space over the chunks of
// every target (so one parallel loop serves them all), each chunk's key, and what the targets'
// stores and codecs let a reader do (fetch many values in one call, read a shard by range).
// Shards are expanded into their inner chunks by codecs::InnerChunks, once their indexes are
// read. Immutable once made, and shared by the threads of the read.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "codecs/shard_layout.hpp"
#include "place/chunk_grid.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::read {

// One array's part of a read: a selection of `array`, landing in `out` (host or device memory of
// the selection's shape).
struct ReadTarget {
  const Array* array = nullptr;
  std::vector<DimSlice> selection;
  StridedView out;
  // Where its chunks are read from: a view of the array's store for this one read (StoreViews),
  // or null for the array's store itself.
  const Store* store = nullptr;
};

class ReadPlan {
 public:
  explicit ReadPlan(std::span<const ReadTarget> targets);

  [[nodiscard]] std::size_t targets() const { return targets_.size(); }
  [[nodiscard]] const ReadTarget& target(std::size_t t) const { return targets_[t]; }
  [[nodiscard]] const Array& array(std::size_t t) const { return *targets_[t].array; }
  // The chunks of target t that its selection touches.
  [[nodiscard]] const place::GridIntersection& grid(std::size_t t) const { return grids_[t]; }

  // The chunks of every target, numbered one after another in target order.
  [[nodiscard]] std::size_t chunks() const { return first_.back(); }
  // The number of target t's first chunk (first_chunk(targets()) is chunks()).
  [[nodiscard]] std::size_t first_chunk(std::size_t t) const { return first_[t]; }
  // Chunk i: fills `item` (its place in its array's grid) and returns its target.
  std::size_t locate(std::size_t i, place::GridIntersection::Item& item) const;

  // The key of the chunk of target t at grid position `chunk`.
  [[nodiscard]] std::string chunk_key(std::size_t t, std::span<const std::int64_t> chunk) const;
  // What target t's chunks are read from: the read's view of its array's store, or that store.
  [[nodiscard]] const Store& store(std::size_t t) const;
  // The store of target t when it fetches many values in one call; null otherwise.
  [[nodiscard]] const BatchedGets* batched_gets(std::size_t t) const;
  // The shard format of target t's chunks when they are shards with nothing around them (read
  // by range, inner chunk by inner chunk); null otherwise.
  [[nodiscard]] const codecs::ShardLayout* shards(std::size_t t) const;
  // "array 'x' in file:///..., chunk 'c/0'", for messages.
  [[nodiscard]] std::string where(std::size_t t, const std::string& key) const;

 private:
  std::vector<ReadTarget> targets_;
  std::vector<place::GridIntersection> grids_;
  std::vector<std::size_t> first_{0};
};

}  // namespace zarr_device::read
