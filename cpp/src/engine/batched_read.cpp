// Host reads from stores whose requests wait on a round trip (BatchedGets): windows of chunks,
// and of shards wanted in part, fetched in a few calls each (engine/host_read.hpp).
#include <algorithm>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/host_read.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::engine {
namespace {

// Whether a chunk of such a store is fetched whole with others: a chunk always, a shard when the
// read wants all of it (else its index and the inner chunks wanted are read by range, which
// reads nothing unwanted).
bool fetched_whole(const Array& array, const place::GridIntersection::Item& item) {
  return !array.chain().supports_partial_decode() ||
         place::is_full(item.within, array.metadata().chunk_shape);
}

// What was fetched of a shard a read wants in part: its size (nullopt: not stored) and the ranges
// read of it (its index, then the inner chunks wanted, neighbours merged), by offset.
struct FetchedShard {
  std::optional<std::uint64_t> size;
  std::vector<std::pair<ByteRange, Buffer>> ranges;

  // Bytes [offset, offset + length) when a fetched range holds them all (a slice of it).
  [[nodiscard]] std::optional<Buffer> find(std::int64_t offset, std::int64_t length) const {
    auto it = std::upper_bound(
        ranges.begin(), ranges.end(), offset,
        [](std::int64_t at, const std::pair<ByteRange, Buffer>& r) { return at < r.first.offset; });
    if (it == ranges.begin() || length < 0) return std::nullopt;
    --it;
    const auto start = static_cast<std::size_t>(offset - it->first.offset);
    const auto n = static_cast<std::size_t>(length);
    if (start > it->second.size() || n > it->second.size() - start) return std::nullopt;
    return it->second.slice(start, n);
  }
};

// `ranges` in order of offset, those at most kMergeGap apart merged while the merged range stays
// within kMergedMost: a store that makes each range a request of its own (fsspec's) would
// otherwise make one per inner chunk, and a few ranges of a large shard still go out at once.
std::vector<ByteRange> merged(std::vector<ByteRange> ranges) {
  constexpr std::int64_t kMergeGap = std::int64_t{1} << 20;
  constexpr std::int64_t kMergedMost = std::int64_t{16} << 20;
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> out;
  for (const auto& r : ranges) {
    if (!out.empty()) {
      auto& last = out.back();
      const std::int64_t end = std::max(last.offset + last.length, r.offset + r.length);
      if (r.offset <= last.offset + last.length + kMergeGap && end - last.offset <= kMergedMost) {
        last.length = end - last.offset;
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

// Reads ranges of a fetched shard from what was fetched, and anything else (nothing, unless a
// codec asks for more than its index named) from the store.
// The bytes are in memory already: a range at a time costs nothing more than many at once.
RangeReader reader_of(const FetchedShard& shard, const Store& store, const std::string& key) {
  return [&shard, &store, &key](std::int64_t offset, std::int64_t length) {
    if (auto fetched = shard.find(offset, length)) return fetched;
    return store.get(key, {offset, length});
  };
}

// A shard a read wants in part, as a window fetches it.
struct ShardInPart {
  const Array* array;
  std::string key;
  std::vector<DimSlice> within;
};

// Fetches `shards` (of one store) in three calls, however many: their sizes, their indexes, then
// the inner chunks wanted of all of them. One shard at a time would wait three round trips each.
std::vector<FetchedShard> fetch_shards_in_part(const BatchedGets& gets,
                                               std::span<const ShardInPart> shards) {
  std::vector<std::string> keys;
  keys.reserve(shards.size());
  for (const auto& shard : shards) keys.push_back(shard.key);
  // A call for them all fails naming them all.
  auto for_all = [&](auto call) {
    try {
      return call();
    } catch (Error& e) {
      e.add_context(shards.front().array->describe() + ", shards '" + keys.front() + "' to '" +
                    keys.back() + "'");
      throw;
    }
  };
  const auto sizes = for_all([&] { return gets.sizes_many(keys); });
  if (sizes.size() != keys.size()) {
    throw StoreError("the store returned " + std::to_string(sizes.size()) + " sizes for " +
                     std::to_string(keys.size()) + " keys");
  }
  std::vector<FetchedShard> fetched(shards.size());
  auto in_context = [&](std::size_t i, auto step) {
    try {
      step();
    } catch (Error& e) {
      e.add_context(shards[i].array->describe() + ", chunk '" + keys[i] + "'");
      throw;
    }
  };
  // `asked[j]` of shard `of[j]`, in one call.
  auto get_ranges = [&](const std::vector<KeyRanges>& asked, const std::vector<std::size_t>& of) {
    if (asked.empty()) return;
    auto got = for_all([&] { return gets.get_ranges(asked); });
    if (got.size() != asked.size()) {
      throw StoreError("the store answered " + std::to_string(got.size()) + " keys for " +
                       std::to_string(asked.size()));
    }
    for (std::size_t j = 0; j < asked.size(); ++j) {
      const std::size_t i = of[j];
      in_context(i, [&] {
        if (!got[j]) throw StoreError("'" + keys[i] + "' vanished while it was read");
        for (std::size_t r = 0; r < asked[j].ranges.size(); ++r) {
          fetched[i].ranges.emplace_back(asked[j].ranges[r], std::move((*got[j])[r]));
        }
        std::sort(fetched[i].ranges.begin(), fetched[i].ranges.end(),
                  [](const auto& a, const auto& b) { return a.first.offset < b.first.offset; });
      });
    }
  };
  std::vector<KeyRanges> asked;
  std::vector<std::size_t> of;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    fetched[i].size = sizes[i];
    if (!sizes[i]) continue;
    in_context(i, [&] {
      asked.push_back({keys[i], {shards[i].array->chain().shard_layout()->index_range(*sizes[i])}});
      of.push_back(i);
    });
  }
  get_ranges(asked, of);
  std::vector<KeyRanges> wanted;
  std::vector<std::size_t> wanted_of;
  for (const std::size_t i : of) {
    in_context(i, [&] {
      const auto* layout = shards[i].array->chain().shard_layout();
      const auto index = layout->read_index(
          reader_of(fetched[i], *shards[i].array->store(), keys[i]), *fetched[i].size);
      auto ranges = merged(layout->wanted_ranges(index, shards[i].within));
      if (ranges.empty()) return;
      wanted.push_back({keys[i], std::move(ranges)});
      wanted_of.push_back(i);
    });
  }
  get_ranges(wanted, wanted_of);
  return fetched;
}

// Decodes a shard a read wants in part (item of its array's grid) from what was fetched of it.
void read_shard_in_part(const Array& array, const place::GridIntersection::Item& item,
                        const StridedView& out, engine::ByteBudget& budget,
                        const FetchedShard& fetched) {
  const auto& meta = array.metadata();
  const std::string key = array.chunk_key(item.chunk);
  const StridedView region = place::subview(out, item.out_offset, item.count);
  try {
    if (!fetched.size) {
      place::fill_strided(region, meta.fill_value);
      return;
    }
    const engine::BudgetLease lease(budget, array.chain().spec().nbytes());
    array.chain().decode_partial(reader_of(fetched, *array.store(), key), *fetched.size,
                                 item.within, region);
  } catch (Error& e) {
    e.add_context(array.describe() + ", chunk '" + key + "'");
    throw;
  }
}

}  // namespace

void read_batched(const read::ReadPlan& plan, std::span<const std::size_t> chunks,
                  engine::ByteBudget& budget, std::size_t inflight_bytes, engine::ThreadPool& pool,
                  std::size_t workers) {
  constexpr std::size_t kBatchKeys = 1024;
  constexpr std::size_t kWindowBytes = std::size_t{32} << 20;
  constexpr std::size_t kFewValues = 4;
  struct Window {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::vector<std::optional<Buffer>> values;  // of the chunks fetched whole, by k - begin
    std::vector<FetchedShard> shards;           // of the shards wanted in part, by k - begin
    std::vector<bool> whole;
  };
  place::GridIntersection::Item item;
  auto target_of = [&](std::size_t k) { return plan.locate(chunks[k], item); };
  auto window_from = [&](std::size_t begin) {
    Window w{begin, begin, {}, {}, {}};
    if (begin >= chunks.size()) return w;
    const BatchedGets* store = plan.batched_gets(target_of(begin));
    std::size_t bytes = 0;
    while (w.end < chunks.size() && w.end - begin < kBatchKeys) {
      const std::size_t t = target_of(w.end);
      const std::size_t chunk_bytes = plan.array(t).chain().spec().nbytes();
      const std::size_t after = bytes + chunk_bytes;
      if (w.end > begin && (plan.batched_gets(t) != store || after > inflight_bytes / 2 ||
                            (after > kWindowBytes && w.end - begin >= kFewValues))) {
        break;
      }
      bytes += chunk_bytes;
      ++w.end;
    }
    return w;
  };
  auto fetch = [&](Window& w) {
    const std::size_t n = w.end - w.begin;
    std::vector<std::string> keys;
    std::vector<std::size_t> whole;  // positions in the window
    std::vector<std::size_t> in_part;
    std::vector<ShardInPart> shards;
    w.whole.assign(n, true);
    place::GridIntersection::Item at;
    std::size_t t = 0;
    for (std::size_t k = 0; k < n; ++k) {
      t = plan.locate(chunks[w.begin + k], at);
      std::string key = plan.chunk_key(t, at.chunk);
      if (fetched_whole(plan.array(t), at)) {
        whole.push_back(k);
        keys.push_back(std::move(key));
      } else {
        w.whole[k] = false;
        in_part.push_back(k);
        shards.push_back({&plan.array(t), std::move(key), at.within});
      }
    }
    const BatchedGets& gets = *plan.batched_gets(t);
    w.values.assign(n, std::nullopt);
    w.shards.assign(n, {});
    if (!keys.empty()) {
      std::vector<std::optional<Buffer>> values;
      try {
        values = gets.get_many(keys);
      } catch (Error& e) {
        e.add_context(plan.array(t).describe() + ", chunks '" + keys.front() + "' to '" +
                      keys.back() + "'");
        throw;
      }
      if (values.size() != keys.size()) {
        throw StoreError(plan.array(t).describe() + ": the store returned " +
                         std::to_string(values.size()) + " values for " +
                         std::to_string(keys.size()) + " keys");
      }
      for (std::size_t j = 0; j < whole.size(); ++j) w.values[whole[j]] = std::move(values[j]);
    }
    if (!shards.empty()) {
      auto fetched = fetch_shards_in_part(gets, shards);
      for (std::size_t j = 0; j < in_part.size(); ++j) w.shards[in_part[j]] = std::move(fetched[j]);
    }
  };
  if (chunks.empty()) return;
  Window current = window_from(0);
  fetch(current);
  while (current.begin < chunks.size()) {
    Window next = window_from(current.end);
    // The next window's requests go out while this one decodes (on a thread of its own: the
    // pool's are decoding, and the requests mostly wait on the network).
    std::future<void> fetching;
    if (next.begin < chunks.size()) fetching = std::async(std::launch::async, [&] { fetch(next); });
    try {
      pool.parallel_for(current.end - current.begin, workers, [&](std::size_t k) {
        place::GridIntersection::Item chunk;
        const std::size_t t = plan.locate(chunks[current.begin + k], chunk);
        if (current.whole[k]) {
          read_chunk(plan, t, chunk, budget, pool, workers, &current.values[k]);
        } else {
          read_shard_in_part(plan.array(t), chunk, plan.target(t).out, budget, current.shards[k]);
        }
      });
    } catch (...) {
      if (fetching.valid()) fetching.wait();  // it writes into `next`
      throw;
    }
    if (fetching.valid()) fetching.get();
    current = std::move(next);
  }
}

}  // namespace zarr_device::engine
