// The staging ring of GPU reads (cpp/cuda/read_ring.hpp): how its slots are cut. Runs where a CUDA
// device is present (the GPU machine's GoogleTest filter takes CudaDevice*).
#if defined(ZARR_DEVICE_WITH_CUDA)
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <thread>

#include "../cuda/read_ring.hpp"
#include "zarr_device/cuda_io.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A chunk as large as a slot fills it (the batch arrays live apart), a larger one re-cuts the
// staging into fewer slots, and the ring keeps that cut for smaller chunks after it: reads that
// alternate between large and small chunks do not free and pin the ring's memory again each time.
TEST(CudaDevice, ReadRingCutsCoarserOnlyWhenAChunkNeedsIt) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceContext ring(0, device_read::StagingShape::of(256 * kMiB, 4, 64 * kMiB));
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

// Holds a stream until `go` is set: the work queued behind it stays pending meanwhile.
void CUDART_CB wait_for(void* go) {
  while (!static_cast<std::atomic<bool>*>(go)->load()) std::this_thread::yield();
}

// A read starts at a slot the device is done with: it does not wait for the batches other
// threads' reads left on the device (reads that wait for them after giving the ring back).
TEST(CudaDevice, ReadsStartAtASlotTheDeviceIsDoneWith) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceContext ring(0, device_read::StagingShape::of(8 * kMiB, 4, 64 * kMiB));
  ASSERT_EQ(ring.slots_.size(), 4U);
  std::atomic<bool> go{false};
  struct Release {  // let go of the held streams however the test ends (the ring waits for them)
    std::atomic<bool>& go;
    ~Release() { go = true; }
  } release{go};
  auto hold = [&](std::size_t i) {
    Slot& s = ring.slot(i);
    ASSERT_EQ(cudaLaunchHostFunc(s.stream, wait_for, &go), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(s.done, s.stream), cudaSuccess);
    s.busy = true;
  };
  ring.next_batch = 1;
  EXPECT_EQ(ring.start_batch(), 1U);  // free
  hold(1);
  EXPECT_EQ(ring.start_batch(), 0U);  // the first slot the device is done with
  hold(0);
  EXPECT_EQ(ring.start_batch(), 2U);
  hold(2);
  hold(3);
  EXPECT_EQ(ring.start_batch(), 1U);  // every slot in use: past the previous read's batches
  go = true;
  for (auto& s : ring.slots_) ASSERT_EQ(cudaStreamSynchronize(s.stream), cudaSuccess);
  ring.next_batch = 3;
  EXPECT_EQ(ring.start_batch(), 3U);  // done, though not yet settled
  for (auto& s : ring.slots_) EXPECT_EQ(settle(s), "");
}

}  // namespace
}  // namespace zarr_device::cuda
#endif
