// The host side of a device read's run (device_read/target_completion.hpp): outputs handed on in
// the order their last batches finish, and the long stretches of a batch announced to its stores.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "device_read/target_completion.hpp"
#include "test_util.hpp"

namespace zarr_device::device_read {
namespace {

std::vector<Leaf> leaves_of(const std::vector<std::size_t>& targets) {
  std::vector<Leaf> leaves;
  leaves.reserve(targets.size());
  for (const std::size_t target : targets) leaves.emplace_back(PlannedChunk{.target = target});
  return leaves;
}

TEST(TargetCompletion, HandsEachTargetOnOnceItsLastBatchFinishes) {
  // Targets 0..3: 2 spans batches 0 and 1, 0 lies in batch 1, 1 in batch 2, 3 has nothing staged.
  const auto leaves = leaves_of({2, 2, 0, 2, 1});
  const std::vector<Batch> batches = {{0, 2}, {2, 4}, {4, 5}};
  std::vector<std::size_t> handed;
  TargetCompletion completion(leaves, batches, 4, [&](std::size_t t) { handed.push_back(t); });
  completion.batches_finished(0);
  EXPECT_EQ(handed, (std::vector<std::size_t>{3}));
  completion.batches_finished(1);  // target 2 still has a leaf in batch 1
  EXPECT_EQ(handed, (std::vector<std::size_t>{3}));
  completion.batches_finished(2);
  EXPECT_EQ(handed, (std::vector<std::size_t>{3, 0, 2}));
  completion.batches_finished(2);  // nothing twice
  completion.batches_finished(3);
  EXPECT_EQ(handed, (std::vector<std::size_t>{3, 0, 2, 1}));
  completion.batches_finished(3);
  EXPECT_EQ(handed.size(), 4U);
}

TEST(TargetCompletion, WithoutACallbackHandsNothingOn) {
  const auto leaves = leaves_of({0, 1});
  const std::vector<Batch> batches = {{0, 1}, {1, 2}};
  TargetCompletion completion(leaves, batches, 2, {});
  EXPECT_NO_THROW(completion.batches_finished(2));
}

// A store that records what it is told will be read (Store::will_need).
class NeedRecordingStore final : public test::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void will_need(std::string_view key, std::uint64_t offset, std::uint64_t length) const override {
    needed.emplace_back(std::string(key), offset, length);
  }
  mutable std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>> needed;
};

TEST(AnnounceLongRanges, AnnouncesConsecutiveLeavesOfOneValueAsOneStretch) {
  NeedRecordingStore store(make_memory_store());
  constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
  auto leaf = [&](const char* key, std::uint64_t offset, std::uint64_t length, Route route) {
    Leaf l(PlannedChunk{.key = key, .store = &store});
    l.stored.offset = offset;
    l.stored.length = length;
    l.decoding.route = route;
    return l;
  };
  const std::vector<Leaf> batch = {
      leaf("s/0", 0, 4 * kMiB, Route::kCopy),  // three inner chunks back to back: 12 MiB
      leaf("s/0", 4 * kMiB, 4 * kMiB, Route::kDeviceDecode),
      leaf("s/0", 8 * kMiB, 4 * kMiB, Route::kCopy),
      leaf("s/0", 20 * kMiB, 4 * kMiB, Route::kCopy),   // a gap: a stretch of its own, too short
      leaf("c/1", 0, 9 * kMiB, Route::kCpuDecode),      // decoded on the CPU: read as it decodes
      leaf("c/2", 0, 9 * kMiB, Route::kDeviceDecode),   // long enough alone
      leaf("c/3", 0, 1 * kMiB, Route::kDeviceDecode)};  // short
  announce_long_ranges(batch, 8 * kMiB);
  using Need = std::tuple<std::string, std::uint64_t, std::uint64_t>;
  EXPECT_EQ(store.needed, (std::vector<Need>{{"s/0", 0, 12 * kMiB}, {"c/2", 0, 9 * kMiB}}));
}

}  // namespace
}  // namespace zarr_device::device_read
