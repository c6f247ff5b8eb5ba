// The staging ring of GPU reads (cpp/cuda/read_ring.hpp): how its slots are cut. Runs where a CUDA
// device is present (the GPU machine's GoogleTest filter takes CudaDevice*).
#if defined(ZARR_DEVICE_WITH_CUDA)
#include <gtest/gtest.h>

#include <cstddef>

#include "../cuda/read_ring.hpp"
#include "zarr_device/cuda.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A chunk as large as a slot fills it (the batch arrays live apart), a larger one re-cuts the
// staging into fewer slots, and the ring keeps that cut for smaller chunks after it: reads that
// alternate between large and small chunks do not free and pin the ring's memory again each time.
TEST(CudaDevice, ReadRingCutsCoarserOnlyWhenAChunkNeedsIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceContext ring(0, 256 * kMiB, 4, 64 * kMiB);
  ASSERT_EQ(ring.slots_.size(), 4U);
  EXPECT_EQ(ring.slots_.front().capacity, 64 * kMiB);
  Slot& first = ring.slot(0);
  ASSERT_NE(first.host, nullptr);
  ASSERT_NE(first.host_arrays.statuses, nullptr);

  ring.fit(64 * kMiB, "a/c/0");  // fits as cut
  EXPECT_EQ(ring.slots_.size(), 4U);
  EXPECT_EQ(ring.slot(0).host, first.host);  // not reallocated

  ring.fit(64 * kMiB + 4, "a/c/1");  // a 64 MiB chunk and its checksum
  ASSERT_EQ(ring.slots_.size(), 3U);
  EXPECT_EQ(ring.slots_.front().capacity, 84 * kMiB);  // 256/3 MiB, in whole 2 MiB pages
  Slot& coarse = ring.slot(2);
  ASSERT_NE(coarse.host, nullptr);
  ASSERT_NE(coarse.device_arrays.statuses, nullptr);

  ring.fit(1 * kMiB, "b/c/0");  // smaller chunks keep the coarser cut
  EXPECT_EQ(ring.slots_.size(), 3U);
  EXPECT_EQ(ring.slot(2).host, coarse.host);

  try {
    ring.fit(300 * kMiB, "big/c/0");
    ADD_FAILURE() << "a chunk larger than the staging was accepted";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("big/c/0"), std::string::npos) << error.what();
  }
  EXPECT_EQ(ring.slots_.size(), 3U);  // a refused chunk leaves the ring as it was
}

}  // namespace
}  // namespace zarr_device::cuda
#endif
