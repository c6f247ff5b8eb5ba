// The decode arena's bookkeeping, without a device: ranges taken in order, retired oldest first
// when a later range needs their place, never while their batch is still being built.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "device_read/fifo_ring.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::device_read {
namespace {

TEST(GpuDecodeArena, RangesFollowEachOtherAndRetireOldestFirst) {
  FifoRing ring(100);
  std::vector<std::uint64_t> retired;
  auto retire = [&](std::uint64_t id, bool gone) { retired.push_back(gone ? id : 1000 + id); };
  const auto a = ring.take(40, retire, "a");
  const auto b = ring.take(40, retire, "b");
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(b.offset, 40u);
  ring.close(b.id);  // a and b queued their work
  EXPECT_TRUE(retired.empty());
  // 40 more do not fit before the end: the range starts over at 0, where a was.
  const auto c = ring.take(40, retire, "c");
  EXPECT_EQ(c.offset, 0u);
  EXPECT_EQ(retired, std::vector<std::uint64_t>{a.id});
  ring.close(c.id);
  // Next after c, over most of b's place: b is waited for, and its last 10 bytes stay live.
  const auto d = ring.take(30, retire, "d");
  EXPECT_EQ(d.offset, 40u);
  EXPECT_EQ(retired, (std::vector<std::uint64_t>{a.id, 1000 + b.id}));
  ring.close(d.id);
  // Whoever reuses those 10 bytes waits for b too (its work may still write them); b is gone.
  const auto e = ring.take(30, retire, "e");
  EXPECT_EQ(e.offset, 70u);
  EXPECT_EQ(retired, (std::vector<std::uint64_t>{a.id, 1000 + b.id, b.id}));
  EXPECT_EQ(ring.live(), 3u);
}

TEST(GpuDecodeArena, OnlyOverlappedRangesAreWaitedForAndTheirRestStaysLive) {
  FifoRing ring(100);
  std::vector<std::uint64_t> retired;
  auto retire = [&](std::uint64_t id, bool gone) { retired.push_back(gone ? id : 1000 + id); };
  const auto a = ring.take(10, retire, "a");
  const auto b = ring.take(60, retire, "b");
  const auto c = ring.take(20, retire, "c");
  ring.close(c.id);
  // 50 bytes wrap to 0 and overlap a and the start of b: both are waited for, a is gone, the
  // rest of b stays live; c, which it does not touch, is not waited for.
  const auto d = ring.take(50, retire, "d");
  EXPECT_EQ(d.offset, 0u);
  EXPECT_EQ(retired, (std::vector<std::uint64_t>{a.id, 1000 + b.id}));
  EXPECT_EQ(ring.live(), 3u);
}

TEST(GpuDecodeArena, ABatchLargerThanTheArenaOrOverItsOwnRangesIsRefused) {
  FifoRing ring(100);
  auto retire = [](std::uint64_t, bool) {};
  try {
    ring.take(101, retire, "array 'w', chunk 'c/0'");
    FAIL() << "took more than the arena";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 'c/0'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("decode_bytes"), std::string::npos);
  }
  // A batch's own ranges are not closed until its work is queued: a second range that would
  // land on its first is refused, not handed out over it.
  ring.take(30, retire, "first");
  ring.take(50, retire, "second");
  EXPECT_THROW(ring.take(40, retire, "third"), OutOfMemoryError);
  // Once reset (the streams synchronised), the whole arena is free again.
  ring.reset();
  EXPECT_EQ(ring.take(100, retire, "all").offset, 0u);
}

// Random batches of ranges against a model of the memory: each byte remembers the range that last
// held it. Whatever the order, a new range is handed out only after every range that last held
// one of its bytes was retired to it (its work waited for: the device never writes memory that a
// queued decode still reads), a range reported gone holds no byte any more (its event is reused),
// and a range is never retired after it was reported gone.
TEST(GpuDecodeArena, EveryRangeWaitsForTheLastUsersOfItsBytes) {
  constexpr std::size_t kCapacity = 64;
  std::mt19937 random(20261204);
  FifoRing ring(kCapacity);
  std::vector<std::optional<std::uint64_t>> last(kCapacity);  // the range that last held a byte
  std::set<std::uint64_t> gone_ids;
  std::size_t taken = 0;
  std::size_t refused = 0;
  std::size_t wrapped = 0;
  for (int batch = 0; batch < 4000; ++batch) {
    if (random() % 97 == 0) {  // a read that failed: its streams drained, the arena forgotten
      ring.reset();
      std::fill(last.begin(), last.end(), std::nullopt);
      continue;
    }
    const std::size_t ranges = 1 + random() % 3;
    std::optional<std::uint64_t> newest;
    bool refused_batch = false;
    for (std::size_t r = 0; r < ranges; ++r) {
      const std::size_t bytes = 1 + random() % (kCapacity / 2);
      std::vector<std::pair<std::uint64_t, bool>> retired;
      FifoRing::Taken got;
      try {
        got = ring.take(
            bytes, [&](std::uint64_t id, bool gone) { retired.emplace_back(id, gone); }, "b");
      } catch (const OutOfMemoryError&) {
        refused_batch = true;  // the batch's own ranges do not fit together: the read fails
        break;
      }
      ++taken;
      ASSERT_LE(got.offset + bytes, kCapacity);
      if (got.offset == 0 && taken > 1) ++wrapped;
      std::set<std::uint64_t> retired_ids;
      for (const auto& [id, gone] : retired) {
        EXPECT_FALSE(gone_ids.count(id)) << "range " << id << " retired after it was gone";
        retired_ids.insert(id);
      }
      for (std::size_t b = got.offset; b < got.offset + bytes; ++b) {
        if (last[b]) {
          ASSERT_TRUE(retired_ids.count(*last[b])) << "byte " << b << " handed to range " << got.id
                                                   << " without waiting for range " << *last[b];
        }
        last[b] = got.id;
      }
      for (const auto& [id, gone] : retired) {
        const bool holds = std::find(last.begin(), last.end(), id) != last.end();
        EXPECT_EQ(gone, !holds) << "range " << id
                                << (gone ? " reported gone but holds bytes"
                                         : " kept live but holds none");
        if (gone) gone_ids.insert(id);
      }
      newest = got.id;
    }
    if (refused_batch) {
      ++refused;
      ring.reset();
      std::fill(last.begin(), last.end(), std::nullopt);
      continue;
    }
    ring.close(*newest);
  }
  // The draw covered what matters: many ranges, wraps to the start, and refusals.
  EXPECT_GT(taken, 5000u);
  EXPECT_GT(wrapped, 500u);
  EXPECT_GT(refused, 10u);
}

}  // namespace
}  // namespace zarr_device::device_read
