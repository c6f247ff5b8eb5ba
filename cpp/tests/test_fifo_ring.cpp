// The decode arena's bookkeeping, without a device: ranges taken in order, retired oldest first
// when a later range needs their place, never while their batch is still being built.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu/fifo_ring.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::gpu {
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

}  // namespace
}  // namespace zarr_device::gpu
