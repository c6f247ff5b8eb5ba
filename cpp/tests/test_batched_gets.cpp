// Stores that fetch many values in one call (BatchedGets, as the stores written in Python are):
// the host read path hands them windows of whole chunks instead of one request per chunk, and the
// GPU path's CPU stage hands them a batch's chunks; shards keep their ranged reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>

#include "device_read/leaf_parts.hpp"
#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "device_read/read_staging.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

using test::array_doc;
using test::json;

// A memory store that also fetches in batches, counting both kinds of request.
class BatchingStore final : public test::ForwardingStore, public BatchedGets {
 public:
  BatchingStore() : ForwardingStore(make_memory_store()) {}
  // Values are opened as a store of keys does (ranges read by key, through get), not as the
  // memory store beneath does.
  std::shared_ptr<const ValueReader> open(std::string_view key) const override {
    return Store::open(key);  // NOLINT(bugprone-parent-virtual-call)
  }
  std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
    ++gets;
    return inner_->get(key, range);
  }
  std::vector<std::optional<Buffer>> get_many(std::span<const std::string> keys) const override {
    if (fail) throw StoreError("the server went away");
    const std::lock_guard lock(mutex_);
    windows.push_back(keys.size());
    std::vector<std::optional<Buffer>> out;
    for (const auto& key : keys) out.push_back(inner_->get(key));
    return out;
  }
  std::vector<std::optional<std::uint64_t>> sizes_many(
      std::span<const std::string> keys) const override {
    if (fail) throw StoreError("the server went away");
    const std::lock_guard lock(mutex_);
    size_calls.push_back(keys.size());
    std::vector<std::optional<std::uint64_t>> out;
    for (const auto& key : keys) out.push_back(inner_->size(key));
    return out;
  }
  std::vector<std::optional<std::vector<Buffer>>> get_ranges(
      std::span<const KeyRanges> asked) const override {
    if (fail) throw StoreError("the server went away");
    const std::lock_guard lock(mutex_);
    std::size_t count = 0;
    std::vector<std::optional<std::vector<Buffer>>> out;
    for (const auto& [key, ranges] : asked) {
      count += ranges.size();
      const auto value = inner_->get(key);
      if (!value) {
        out.emplace_back();
        continue;
      }
      auto& got = out.emplace_back(std::vector<Buffer>{});
      for (const auto& r : ranges) {
        const auto offset =
            std::min<std::size_t>(static_cast<std::size_t>(r.offset), value->size());
        got->push_back(value->slice(
            offset,
            std::min<std::size_t>(static_cast<std::size_t>(r.length), value->size() - offset)));
      }
    }
    range_calls.push_back(count);
    return out;
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    ++sizes;
    return inner_->size(key);
  }
  std::string describe() const override { return "batching://"; }

  mutable std::atomic<int> gets{0};
  mutable std::atomic<int> sizes{0};
  mutable std::vector<std::size_t> size_calls;   // keys per sizes_many call
  mutable std::vector<std::size_t> windows;      // keys per get_many call
  mutable std::vector<std::size_t> range_calls;  // ranges (of every key) per get_ranges call
  bool fail = false;

 private:
  mutable std::mutex mutex_;
};

const json kZstd = json::array({{{"name", "bytes"}}, {{"name", "zstd"}}});

std::vector<std::int32_t> counting(std::size_t n) {
  std::vector<std::int32_t> values(n);
  std::iota(values.begin(), values.end(), 1);
  return values;
}

// Elements [start, start + count) of a 1-d array.
std::vector<DimSlice> along(std::int64_t start, std::int64_t count) { return {{start, 1, count}}; }

std::span<const std::byte> bytes(const std::vector<std::int32_t>& values) {
  return {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4};
}

// 1024 int32 (1, 2, ...) in shards of 256 of inner chunks of 64, zstd, in `store` at "s".
std::shared_ptr<const Array> sharded_array(const std::shared_ptr<BatchingStore>& store) {
  const json codecs =
      json::array({{{"name", "sharding_indexed"},
                    {"configuration", {{"chunk_shape", {64}}, {"codecs", kZstd}}}}});
  auto array = Array::create(store, "s", array_doc({1024}, {256}, "int32", 0, codecs), false);
  array->write(along(0, 1024), bytes(counting(1024)));
  return array;
}

TEST(BatchedGets, HostReadsFetchWindowsOfChunksInOneCallEach) {
  auto store = std::make_shared<BatchingStore>();
  // 64 chunks of 256 int32 (1 KiB each), every other one never written (read as fill value 7).
  auto array = Array::create(store, "a", array_doc({64 * 256}, {256}, "int32", 7, kZstd), false);
  const auto values = counting(64 * 256);
  for (std::int64_t c = 0; c < 64; c += 2) {
    array->write(along(c * 256, 256),
                 bytes(values).subspan(static_cast<std::size_t>(c) * 1024, 1024));
  }
  store->gets = 0;
  store->windows.clear();
  std::vector<std::int32_t> got(values.size());
  IoOptions options;
  options.max_inflight_bytes = 16 * 1024;  // windows of 8 chunks: half of it decoded at once
  array->read(along(0, 64 * 256), {reinterpret_cast<std::byte*>(got.data()), got.size() * 4},
              options);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool written = (i / 256) % 2 == 0;
    ASSERT_EQ(got[i], written ? values[i] : 7) << i;
  }
  EXPECT_EQ(store->gets.load(), 0);  // no request of its own for any chunk
  EXPECT_EQ(store->windows, std::vector<std::size_t>(8, 8));
}

TEST(BatchedGets, ManyArraysOfSeveralStoresInOneRead) {
  auto first = std::make_shared<BatchingStore>();
  auto second = std::make_shared<BatchingStore>();
  std::shared_ptr<Store> plain = make_memory_store();
  const auto values = counting(1024);
  std::vector<std::shared_ptr<const Array>> arrays;
  for (const auto& store : {std::shared_ptr<Store>(first), std::shared_ptr<Store>(second), plain}) {
    arrays.push_back(Array::create(store, "x", array_doc({1024}, {128}, "int32", 0, kZstd), false));
    arrays.back()->write(along(0, 1024), bytes(values));
  }
  first->windows.clear();
  second->windows.clear();
  std::vector<std::vector<std::int32_t>> got(3, std::vector<std::int32_t>(1024));
  std::vector<ReadRequest> requests;
  for (std::size_t i = 0; i < 3; ++i) {
    requests.push_back({arrays[i].get(),
                        along(0, 1024),
                        {reinterpret_cast<std::byte*>(got[i].data()), got[i].size() * 4}});
  }
  read_many(requests);
  for (const auto& g : got) EXPECT_EQ(g, values);
  // Each batching store got its own window of its 8 chunks: a window holds one store's.
  EXPECT_EQ(first->windows, std::vector<std::size_t>{8});
  EXPECT_EQ(second->windows, std::vector<std::size_t>{8});
}

TEST(BatchedGets, AFailedBatchNamesTheArrayAndItsChunks) {
  auto store = std::make_shared<BatchingStore>();
  auto array = Array::create(store, "a", array_doc({1024}, {256}, "int32", 0, kZstd), false);
  array->write(along(0, 1024), bytes(counting(1024)));
  store->fail = true;
  std::vector<std::int32_t> got(1024);
  try {
    array->read(along(0, 1024), {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
    ADD_FAILURE() << "the read succeeded";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the server went away"), std::string::npos) << what;
    EXPECT_NE(what.find("'a/c/0' to 'a/c/3'"), std::string::npos) << what;
  }
}

TEST(BatchedGets, AChunkOfTheWrongSizeIsACodecError) {
  auto store = std::make_shared<BatchingStore>();
  auto array = Array::create(store, "a", array_doc({512}, {256}, "int32", 0), false);
  array->write(along(0, 512), bytes(counting(512)));
  store->set("a/c/1", test::bytes_of("short"));
  std::vector<std::int32_t> got(512);
  EXPECT_THROW(
      array->read(along(0, 512), {reinterpret_cast<std::byte*>(got.data()), got.size() * 4}),
      CodecError);
}

TEST(BatchedGets, ShardsKeepTheirRangedReads) {
  auto store = std::make_shared<BatchingStore>();
  auto array = sharded_array(store);
  store->windows.clear();
  std::vector<std::int32_t> got(64);
  array->read(along(64, 64), {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
  EXPECT_EQ(got.front(), 65);
  EXPECT_TRUE(store->windows.empty());  // a shard is not fetched whole for one of its chunks
}

// Shards a read wants in part take three calls in all, however many there are: their sizes, their
// indexes, then the inner chunks wanted of them all (three of shard 1's four, two of shard 2's;
// neighbours asked as one range).
TEST(BatchedGets, ShardsWantedInPartTakeThreeCallsInAll) {
  auto store = std::make_shared<BatchingStore>();
  auto array = sharded_array(store);
  const auto values = counting(1024);
  store->windows.clear();
  store->gets = 0;
  store->sizes = 0;
  std::vector<std::int32_t> got(512 + 100 - (256 + 70));  // elements 326 to 611
  array->read(along(256 + 70, static_cast<std::int64_t>(got.size())),
              {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
  EXPECT_EQ(got, std::vector<std::int32_t>(values.begin() + 256 + 70, values.begin() + 512 + 100));
  EXPECT_EQ(store->size_calls, std::vector<std::size_t>{2});
  // Two index ranges, then one range per shard: its wanted inner chunks are neighbours, merged.
  EXPECT_EQ(store->range_calls, (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(store->gets.load(), 0);  // nothing one request each
  EXPECT_EQ(store->sizes.load(), 0);
  EXPECT_TRUE(store->windows.empty());
}

// A shard changed between the calls so that its index names bytes past its end, or gone: a typed
// error naming the chunk, not a wrong value.
TEST(BatchedGets, AShardWantedInPartThatChangesIsAnError) {
  auto store = std::make_shared<BatchingStore>();
  auto array = sharded_array(store);
  store->set("s/c/1", test::bytes_of("not a shard at all, but long enough to hold an index?"));
  std::vector<std::int32_t> got(10);
  try {
    array->read(along(256 + 70, 10), {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
    ADD_FAILURE() << "the read succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s/c/1"), std::string::npos) << e.what();
  }
}

TEST(BatchedGets, ShardsAReadWantsWholeAreFetchedWithOthers) {
  auto store = std::make_shared<BatchingStore>();
  auto array = sharded_array(store);
  const auto values = counting(1024);
  store->windows.clear();
  store->gets = 0;
  // Shards 0-2 whole, shard 3 in part: three in one call, the last by its index and ranges.
  std::vector<std::int32_t> got(3 * 256 + 100);
  array->read(along(0, 3 * 256 + 100), {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
  EXPECT_EQ(got, std::vector<std::int32_t>(values.begin(), values.begin() + 3 * 256 + 100));
  EXPECT_EQ(store->windows, std::vector<std::size_t>{3});
  // Shard 3, in the same window: its index, then its two inner chunks wanted (one merged range).
  EXPECT_EQ(store->range_calls, (std::vector<std::size_t>{1, 1}));
  EXPECT_EQ(store->gets.load(), 0);
}

// The GPU plan of a read of a whole 1-d int32 array, without device decoders, into `out`.
std::vector<device_read::Leaf> plan_whole(const Array& array, std::vector<std::byte>& out) {
  const std::int64_t n = array.metadata().shape.at(0);
  out.assign(static_cast<std::size_t>(n) * 4, std::byte{0});
  const device_read::ReadTarget target{&array, {{0, 1, n}}, StridedView{out.data(), {n}, {4}}};
  return device_read::plan_reads({&target, 1}, device_read::DeviceDecoders{}, GpuDecode::kChecked,
                                 engine::ThreadPool::shared(2), 2);
}

// The CPU stage of `leaves` as one batch, into `host`: the chunks it decoded on the CPU.
std::vector<device_read::CpuDecoded> stage_as_one_batch(std::vector<device_read::Leaf>& leaves,
                                                        std::vector<std::byte>& host) {
  (void)device_read::pack_batches(leaves, 1 << 20, 1 << 20, device_read::DecodeCosts{}, 0);
  host.assign(std::size_t{1} << 20, std::byte{0});
  return device_read::fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2);
}

// Cutting a read's large chunks into parts asks a store of round trips for nothing (the history
// their decoders keep is assumed, not read from each chunk's first bytes), and the parts, fetched
// batch by batch, make the array.
TEST(BatchedGets, ChunksCutIntoPartsAreNotAskedForWhileCut) {
  auto store = std::make_shared<BatchingStore>();
  auto array = Array::create(store, "p", array_doc({900000}, {300000}, "int32", 0, kZstd), false);
  array->write(along(0, 900000), bytes(counting(900000)));
  std::vector<std::byte> out;
  auto leaves = plan_whole(*array, out);  // 1.2 MB chunks, decoded on the CPU
  const int gets = store->gets.load();
  const auto windows = store->windows;
  const auto ranges = store->range_calls;
  constexpr std::size_t kSlot = std::size_t{256} << 10;
  EXPECT_EQ(device_read::cut_into_parts(leaves, {{4 * kSlot, 4, kSlot, 0}, 2}), 3U);
  EXPECT_EQ(store->gets.load(), gets);
  EXPECT_EQ(store->windows, windows);
  EXPECT_EQ(store->range_calls, ranges);
  const auto batches =
      device_read::pack_batches(leaves, kSlot, kSlot, device_read::DecodeCosts{}, 0);
  std::vector<std::vector<std::byte>> slots(batches.size(), std::vector<std::byte>(kSlot));
  auto batch = [&](std::size_t b) {
    return std::span<device_read::Leaf>{leaves.data() + batches[b].begin,
                                        batches[b].end - batches[b].begin};
  };
  for (std::size_t b = 0; b < batches.size(); ++b)
    device_read::lend_part_staging(batch(b), slots[b].data());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    EXPECT_TRUE(
        device_read::fetch_batch(batch(b), slots[b].data(), engine::ThreadPool::shared(2), 2)
            .empty());
    for (const auto& leaf : batch(b)) {
      std::memcpy(leaf.planned().destination.data, slots[b].data() + leaf.staging.offset,
                  leaf.staging.bytes);
    }
  }
  const auto values = counting(900000);
  const auto want = bytes(values);
  EXPECT_TRUE(std::equal(out.begin(), out.end(), want.begin(), want.end()));
}

// The GPU path: its plan asks for the shards' sizes and indexes in a call each, its CPU stage for
// the inner chunks of each shard in a batch in one call of ranges.
TEST(BatchedGets, TheGpuPathAsksForShardsInFewCalls) {
  auto store = std::make_shared<BatchingStore>();
  const json inner = json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}});
  const json codecs =
      json::array({{{"name", "sharding_indexed"},
                    {"configuration", {{"chunk_shape", {64}}, {"codecs", inner}}}}});
  auto array = Array::create(store, "h", array_doc({1024}, {256}, "int32", 0, codecs), false);
  array->write(along(0, 1024), bytes(counting(1024)));
  store->gets = 0;
  store->sizes = 0;
  std::vector<std::byte> out;
  auto leaves = plan_whole(*array, out);
  ASSERT_EQ(leaves.size(), 16U);
  // The plan asked for the 4 shards' sizes in one call and their indexes in another.
  EXPECT_EQ(store->size_calls, std::vector<std::size_t>{4});
  EXPECT_EQ(store->range_calls, std::vector<std::size_t>{4});
  EXPECT_EQ(store->gets.load(), 0);
  EXPECT_EQ(store->sizes.load(), 0);
  store->gets = 0;
  store->range_calls.clear();
  std::vector<std::byte> host;
  EXPECT_TRUE(stage_as_one_batch(leaves, host).empty());
  EXPECT_EQ(store->range_calls, (std::vector<std::size_t>{4, 4, 4, 4}));
  EXPECT_EQ(store->gets.load(), 0);
  for (const std::size_t i : {std::size_t{0}, std::size_t{5}, std::size_t{15}}) {
    std::int32_t first = 0;
    std::memcpy(&first, host.data() + leaves[i].staging.offset, 4);
    EXPECT_EQ(first, static_cast<std::int32_t>(i * 64 + 1)) << "leaf " << i;
  }
}

// A shard too small to hold its index, met by the GPU plan's calls: a typed error naming it.
TEST(BatchedGets, TheGpuPlanNamesAShardTooSmallForItsIndex) {
  auto store = std::make_shared<BatchingStore>();
  auto array = sharded_array(store);
  store->set("s/c/2", test::bytes_of("tiny"));
  std::vector<std::byte> out;
  try {
    (void)plan_whole(*array, out);
    ADD_FAILURE() << "the plan succeeded";
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("s/c/2"), std::string::npos) << e.what();
  }
}

TEST(BatchedGets, TheGpuStageFetchesABatchsChunksInOneCall) {
  auto store = std::make_shared<BatchingStore>();
  const json crc = json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}});
  auto array = Array::create(store, "g", array_doc({64}, {8}, "int32", 0, crc), false);
  array->write(along(0, 64), bytes(counting(64)));
  store->sizes = 0;
  std::vector<std::byte> out;
  auto leaves = plan_whole(*array, out);
  ASSERT_EQ(leaves.size(), 8U);
  // The plan asked for the chunks' sizes in one call, none of them one by one.
  EXPECT_EQ(store->size_calls, std::vector<std::size_t>{8});
  EXPECT_EQ(store->sizes.load(), 0);
  EXPECT_EQ(leaves[1].stored.length, 8U * 4 + 4);  // 8 int32 and a crc32c
  store->windows.clear();
  store->gets = 0;
  std::vector<std::byte> host;
  EXPECT_TRUE(stage_as_one_batch(leaves, host).empty());
  EXPECT_EQ(store->windows, std::vector<std::size_t>{8});
  EXPECT_EQ(store->gets.load(), 0);
  std::int32_t ninth = 0;
  std::memcpy(&ninth, host.data() + leaves[1].staging.offset, 4);
  EXPECT_EQ(ninth, 9);
  // A chunk gone since the plan: the read starts again, as with any store.
  store->erase("g/c/1");
  EXPECT_THROW(
      (void)device_read::fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2),
      device_read::ValueChanged);
}

}  // namespace
}  // namespace zarr_device
