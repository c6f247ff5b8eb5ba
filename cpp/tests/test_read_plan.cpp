// The plan both the host and the device read execute (read/read_plan.hpp): one index space over
// the chunks of many targets, each chunk's key and store, and what the targets' stores and codecs
// let a reader do.
#include <gtest/gtest.h>

#include <vector>

#include "gpu_read_test_util.hpp"
#include "read/read_plan.hpp"
#include "test_util.hpp"

namespace zarr_device::read {
namespace {

using device_read::test_support::make_array;
using device_read::test_support::sharded;
using device_read::test_support::whole;
using test::json;

TEST(ReadPlan, OneIndexSpaceOverTheChunksOfEveryTarget) {
  auto store = make_memory_store();
  const auto plain = make_array(store, "p", {10}, {4}, json::array({{{"name", "bytes"}}}));
  const auto shards =
      make_array(store, "s", {4, 8}, {2, 4}, sharded({1, 2}, json::array({"bytes"})));
  std::vector<std::byte> a;
  std::vector<std::byte> b;
  // A selection of elements 5..9 of the first touches its chunks 1 and 2; the second, whole,
  // its four shards.
  ReadTarget part = whole(plain, a);
  part.selection = {{5, 1, 5}};
  part.out = StridedView{a.data(), {5}, {4}};
  const ReadTarget targets[] = {part, whole(shards, b)};
  const ReadPlan plan(targets);
  ASSERT_EQ(plan.targets(), 2U);
  EXPECT_EQ(plan.chunks(), 6U);
  EXPECT_EQ(plan.first_chunk(0), 0U);
  EXPECT_EQ(plan.first_chunk(1), 2U);
  EXPECT_EQ(plan.first_chunk(2), 6U);
  place::GridIntersection::Item item;
  EXPECT_EQ(plan.locate(0, item), 0U);
  EXPECT_EQ(plan.chunk_key(0, item.chunk), "p/c/1");
  EXPECT_EQ(item.within[0].start, 1);  // element 5 is the second of chunk 1
  EXPECT_EQ(plan.locate(1, item), 0U);
  EXPECT_EQ(plan.chunk_key(0, item.chunk), "p/c/2");
  EXPECT_EQ(plan.locate(5, item), 1U);
  EXPECT_EQ(plan.chunk_key(1, item.chunk), "s/c/1/1");
  EXPECT_EQ(plan.where(1, "s/c/1/1"), shards->describe() + ", chunk 's/c/1/1'");
  // A memory store fetches one value a request; the shards have nothing around them.
  EXPECT_EQ(plan.batched_gets(0), nullptr);
  EXPECT_EQ(plan.shards(0), nullptr);
  ASSERT_NE(plan.shards(1), nullptr);
  EXPECT_EQ(plan.shards(1)->num_inner(), 4U);
  // Without a view of its own, a target reads from its array's store.
  EXPECT_EQ(&plan.store(0), store.get());
  auto view = make_memory_store();
  ReadTarget viewed = whole(plain, a);
  viewed.store = view.get();
  const ReadPlan through_view({&viewed, 1});
  EXPECT_EQ(&through_view.store(0), view.get());
}

TEST(ReadPlan, AnEmptySelectionHasNoChunks) {
  auto store = make_memory_store();
  const auto plain = make_array(store, "p", {10}, {4}, json::array({{{"name", "bytes"}}}));
  std::vector<std::byte> a;
  ReadTarget none = whole(plain, a);
  none.selection = {{3, 1, 0}};
  const ReadPlan plan({&none, 1});
  EXPECT_EQ(plan.chunks(), 0U);
  EXPECT_EQ(plan.first_chunk(1), 0U);
}

}  // namespace
}  // namespace zarr_device::read
