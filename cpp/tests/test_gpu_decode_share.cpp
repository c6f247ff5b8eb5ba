// Decode sharing, without a device: which chunks of a read decode on CPU threads instead of the
// GPU, from the rates of each and the read's chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "device_read/decode_share.hpp"
#include "device_read/read_plan.hpp"
#include "gpu_read_test_util.hpp"
#include "test_util.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::device_read {
namespace {

using namespace test_support;  // the helpers these files share

// Rates scaled to small test chunks (4 KiB): a device chunk takes 4 ms, a CPU thread 1 ms.
DecodeRates scaled_rates(std::size_t threads, std::size_t lanes) {
  DecodeRates rates;
  rates.device_chunk = 1e6;
  rates.cpu_thread = 4e6;
  rates.cpu_fetch = 64e6;
  rates.cpu_threads = threads;
  rates.device_lanes = lanes;
  rates.staging.bytes = std::size_t{64} << 20;
  rates.staging.slots = 12;
  return rates;
}

std::size_t on_cpu(std::span<const Leaf> leaves) {
  return static_cast<std::size_t>(std::count_if(leaves.begin(), leaves.end(), [](const Leaf& l) {
    return l.decoding.route == Route::kCpuDecode;
  }));
}

TEST(GpuDecodeShare, AFewChunksDecodeOnTheCpu) {
  // Eight chunks: the device takes one chunk's time for all of them, eight threads a quarter.
  auto store = make_memory_store();
  auto array = make_array(store, "few", {8 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 8U);
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, scaled_rates(8, 132)), 8U);
  EXPECT_EQ(on_cpu(leaves), 8U);
  // Other kinds of decode are left alone.
  auto again = plan({&target, 1});
  EXPECT_EQ(share_decodes(again, DecodeKind::kLz4, scaled_rates(8, 132)), 0U);
  EXPECT_EQ(on_cpu(again), 0U);
}

TEST(GpuDecodeShare, ReadsAtOnceWeighTheirShareOfEach) {
  // Thirty-two chunks: alone, sixteen threads decode them in two rounds (2 ms), sooner than the
  // device's one chunk time (4 ms). Four reads at once each have four threads (8 ms) and a quarter
  // of the device's lanes, still more than the chunks: the device is sooner.
  auto store = make_memory_store();
  auto array = make_array(store, "at-once", {32 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto alone = plan({&target, 1});
  EXPECT_EQ(share_decodes(alone, DecodeKind::kZstd, scaled_rates(16, 132)), 32U);
  auto four = plan({&target, 1});
  EXPECT_EQ(share_decodes(four, DecodeKind::kZstd, scaled_rates(16 / 4, 132 / 4)), 0U);
}

TEST(GpuDecodeShare, ManyChunksStayOnTheDeviceUnlessTheCpuIsFaster) {
  auto store = make_memory_store();
  auto array = make_array(store, "many", {2048 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 2048U);
  // 64 lanes at 1 MB/s against 8 threads at 4 MB/s: the device.
  auto rates = scaled_rates(8, 64);
  const double bytes = 2048.0 * 4096;
  EXPECT_LT(decode_seconds(bytes, 0, 4096, bytes, rates),
            decode_seconds(0, bytes, 4096, bytes, rates));
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  EXPECT_EQ(on_cpu(leaves), 0U);
  // 64 threads: the CPU, for every chunk.
  rates = scaled_rates(64, 64);
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 2048U);
  EXPECT_EQ(on_cpu(leaves), 2048U);
}

TEST(GpuDecodeShare, NothingMovesWhereTheCpuIsSlower) {
  auto store = make_memory_store();
  auto array = make_array(store, "busy", {2048 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  // One thread, busy fetching: the device decodes everything.
  auto rates = scaled_rates(1, 512);
  rates.cpu_fetch = 8e6;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  // Chunks larger than the staging's slots: one CPU decode at a time at most.
  const double big = 16.0 * 4096;
  rates = scaled_rates(16, 132);
  rates.staging.bytes = 2 * 16 * 4096;
  EXPECT_GT(decode_seconds(0, 64 * big, big, 64 * big, rates), 64 * big / rates.cpu_thread / 3);
}

TEST(GpuDecodeShare, HardwareQueuesComeFromCudaDeviceMaxConnections) {
  EXPECT_EQ(hardware_queues(nullptr), 8U);  // CUDA's default
  EXPECT_EQ(hardware_queues("1"), 1U);
  EXPECT_EQ(hardware_queues("4"), 4U);
  EXPECT_EQ(hardware_queues("32"), 32U);
  // What the driver would not take leaves its default.
  for (const char* ignored : {"", "0", "33", "-1", "2x", " 2", "abc", "99999999999999999999"}) {
    EXPECT_EQ(hardware_queues(ignored), 8U) << "'" << ignored << "'";
  }
}

TEST(GpuDecodeShare, ChunksThatFillASlotDecodeOnFewThreads) {
  // Chunks as large as a slot: each CPU batch holds one, and only the batches being filled (every
  // slot but the one crossing) decode at once, however many threads. Sixteen such chunks, 16
  // threads, 12 slots: 11 at a time on the CPU.
  auto store = make_memory_store();
  auto array = make_array(store, "large", {16 * 32 * 1024}, {32 * 1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 16U);
  auto rates = scaled_rates(16, 132);
  const double chunk = 32.0 * 1024 * 4;
  rates.staging.bytes = static_cast<std::size_t>(12 * chunk);
  const double total = 16 * chunk;
  EXPECT_DOUBLE_EQ(decode_seconds(0, total, chunk, 0, rates), total / (11 * rates.cpu_thread));
  // The device decodes all 16 at once: it wins at 3/4 of a thread's rate per chunk (16 chunks in
  // one chunk's time against 11), not at half.
  rates.device_chunk = rates.cpu_thread * 3 / 4;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  rates.device_chunk = rates.cpu_thread / 2;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 16U);
}

TEST(GpuDecodeShare, LargeChunksStayOnTheDevice) {
  // Where the rates favour the CPU, chunks larger than `largest_shared` are not moved: a large
  // chunk decodes faster on the device than on a CPU thread.
  auto store = make_memory_store();
  auto array = make_array(store, "few-large", {8 * 4096}, {4096}, kZstdCrc);  // 16 KiB chunks
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  auto rates = scaled_rates(8, 132);
  rates.largest_shared = 8 * 1024;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  EXPECT_EQ(on_cpu(leaves), 0U);
  rates.largest_shared = 16 * 1024;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 8U);
}

// Frames of small blocks (zarr-device's writes of chunks up to 2 MiB) are judged to decode sooner
// on the device, whether the chunks are sized when planned or by their fetch; libzstd's blocks,
// data that compresses far, and chunks not decoded on the device keep the rate given.
TEST(GpuDecodeShare, FramesOfSmallBlocksDecodeSoonerOnTheDevice) {
  auto store = make_memory_store();
  const std::vector<std::int64_t> shape = {4 * 65536};  // four chunks of 256 KiB
  std::vector<float> weights(static_cast<std::size_t>(shape[0]));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0F, 0.02F);
  for (auto& w : weights) w = normal(rng);
  const std::vector<float> constant(weights.size(), 0.5F);
  const json kZstd = json::array({{{"name", "bytes"}}, {{"name", "zstd"}}});
  const Settings before = settings();
  std::size_t n = 0;
  auto rate_of = [&](std::size_t block_bytes, const std::vector<float>& values, const json& codecs,
                     PlanSizes sizes) {
    Settings changed = before;
    changed.zstd_block_bytes = block_bytes;
    set_settings(changed);
    auto array = make_array(store, "a" + std::to_string(n++), shape, {65536}, codecs, false);
    array->write(test::full_selection(shape),
                 {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4});
    set_settings(before);
    std::vector<std::byte> out;
    const ReadTarget target = whole(array, out);
    auto leaves = plan_reads({&target, 1}, all_decoders(), GpuDecode::kChecked,
                             engine::ThreadPool::shared(2), 2, sizes);
    DecodeRates rates;
    rates.device_chunk = 1e8;
    return device_chunk_rate(leaves, DecodeKind::kZstd, rates);
  };
  for (const PlanSizes sizes : {PlanSizes::kNow, PlanSizes::kAtFetch}) {
    EXPECT_DOUBLE_EQ(rate_of(16384, weights, kZstdCrc, sizes), 1e8 * kSmallBlockSpeedup);
    EXPECT_DOUBLE_EQ(rate_of(0, weights, kZstdCrc, sizes), 1e8);       // libzstd's blocks
    EXPECT_DOUBLE_EQ(rate_of(16384, constant, kZstdCrc, sizes), 1e8);  // compresses far
    EXPECT_DOUBLE_EQ(rate_of(16384, weights, kZstd, sizes), 1e8);      // decoded on the CPU
  }
}

TEST(GpuDecodeShare, DeflateDecodesOnTheGpuOnlyWhenManyAndSmall) {
  // An H100's reads of 512 MiB of gzip (BENCHMARKS.md, One GPU): 512 chunks of 1 MiB inflated
  // sooner in the decoder process (4.2 GB/s) than on 16 threads (1.8); 128 chunks of 4 MiB
  // sooner on the threads (1.8 against 1.4). Eight chunks of 1 MiB are a thread's each.
  DecodeRates base;
  base.cpu_threads = 16;
  base.device_lanes = 132;
  base.staging.bytes = std::size_t{768} << 20;
  base.staging.slots = 12;
  const auto rates = deflate_rates(base);
  const auto mib = test::make_spec({1 << 20}, "uint8");
  const auto four_mib = test::make_spec({4 << 20}, "uint8");
  auto moved = [&](const ChunkSpec& spec, std::size_t chunks, Route route, DecodeKind kind) {
    Leaf leaf = sized_leaf(route, spec.nbytes() * 4 / 5, spec);
    leaf.decoding.codec = DecodeKind::kGzip;
    std::vector<Leaf> leaves(chunks, leaf);
    return share_decodes(leaves, kind, rates, route);
  };
  EXPECT_EQ(moved(mib, 512, Route::kIsolatedDecode, DecodeKind::kGzip), 0U);
  EXPECT_EQ(moved(four_mib, 128, Route::kIsolatedDecode, DecodeKind::kGzip), 128U);
  EXPECT_EQ(moved(mib, 8, Route::kIsolatedDecode, DecodeKind::kGzip), 8U);
  EXPECT_EQ(moved(four_mib, 128, Route::kDeviceDecode, DecodeKind::kGzip), 128U);
  // Only the route and the kind asked for.
  EXPECT_EQ(moved(four_mib, 128, Route::kDeviceDecode, DecodeKind::kDeflate), 0U);
  Leaf other = sized_leaf(Route::kDeviceDecode, 1000, four_mib);
  other.decoding.codec = DecodeKind::kGzip;
  std::vector<Leaf> mixed(128, other);
  EXPECT_EQ(share_decodes(mixed, DecodeKind::kGzip, rates, Route::kIsolatedDecode), 0U);
}

}  // namespace
}  // namespace zarr_device::device_read
