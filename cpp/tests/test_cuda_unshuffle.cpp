// The GPU's byte unshuffle (Blosc's and numcodecs' shuffle) against the CPU's, on blocks of every
// element size Blosc splits and sizes with a partial element at the end (GoogleTest filter
// CudaDevice*).
#include <gtest/gtest.h>

#ifdef ZARR_DEVICE_WITH_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "../cuda/kernels.hpp"
#include "codecs/byte_shuffle.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device::cuda {
namespace {

TEST(CudaDeviceUnshuffle, MatchesTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(4);
  std::vector<std::vector<std::byte>> inputs;
  std::vector<UnshuffleBlock> blocks;
  std::size_t total = 0;
  for (std::uint32_t typesize : {1U, 2U, 3U, 4U, 8U, 16U, 17U}) {
    for (std::size_t bytes : {1UL, 15UL, 4096UL, 4099UL, 262147UL}) {
      std::vector<std::byte> in(bytes);
      for (auto& b : in) b = static_cast<std::byte>(rng());
      inputs.push_back(std::move(in));
      blocks.push_back({nullptr, nullptr, bytes, typesize});
      total += bytes;
    }
  }
  std::byte* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 2 * total), cudaSuccess);
  std::size_t at = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(cudaMemcpy(device + at, inputs[i].data(), inputs[i].size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    blocks[i].shuffled = device + at;
    blocks[i].out = device + total + at;
    at += inputs[i].size();
  }
  UnshuffleBlock* device_blocks = nullptr;
  ASSERT_EQ(
      cudaMalloc(reinterpret_cast<void**>(&device_blocks), blocks.size() * sizeof(UnshuffleBlock)),
      cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_blocks, blocks.data(), blocks.size() * sizeof(UnshuffleBlock),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  launch_byte_unshuffle(device_blocks, blocks.size(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  at = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    std::vector<std::byte> expected(inputs[i].size());
    codecs::byte_unshuffle(inputs[i].data(), expected.data(), expected.size(), blocks[i].typesize);
    std::vector<std::byte> got(inputs[i].size());
    ASSERT_EQ(cudaMemcpy(got.data(), device + total + at, got.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got, expected) << "typesize " << blocks[i].typesize << ", " << got.size() << " bytes";
    at += inputs[i].size();
  }
  cudaFree(device_blocks);
  cudaFree(device);
}

// A whole chunk's unshuffle over the grid (numcodecs' shuffle), against the CPU's, for element
// sizes with kernels of their own and without, and sizes with bytes past the last element.
TEST(CudaDeviceUnshuffle, WholeChunksMatchTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(5);
  std::byte* device = nullptr;
  constexpr std::size_t kMost = (std::size_t{8} << 20) + 7;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 2 * kMost), cudaSuccess);
  for (std::size_t typesize : {1UL, 2UL, 3UL, 4UL, 8UL, 16UL}) {
    for (std::size_t bytes : {0UL, 5UL, 4096UL, 1000003UL, kMost}) {
      std::vector<std::byte> in(bytes);
      for (auto& b : in) b = static_cast<std::byte>(rng());
      ASSERT_EQ(cudaMemcpy(device, in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      launch_chunk_unshuffle(device, device + kMost, bytes, typesize, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> expected(bytes);
      codecs::byte_unshuffle(in.data(), expected.data(), bytes, typesize);
      std::vector<std::byte> got(bytes);
      ASSERT_EQ(cudaMemcpy(got.data(), device + kMost, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got, expected) << "typesize " << typesize << ", " << bytes << " bytes";
    }
  }
  cudaFree(device);
}

// Streams of many blocks gathered and unshuffled into place (a chunk decoded stream by stream),
// against the CPU's unshuffle of the blocks; more blocks and sources than one launch takes.
TEST(CudaDeviceUnshuffle, GatheredBlocksMatchTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(6);
  struct Case {
    std::uint32_t bytes;
    std::uint32_t streams;
    std::uint32_t typesize;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 700; ++i) {
    const std::uint32_t typesize = std::vector<std::uint32_t>{1, 2, 4, 8, 16, 3}[i % 6];
    const bool split = i % 2 == 0 && typesize > 1;
    const std::uint32_t elements = 1 + rng() % 3000;
    // A split block is whole elements; one of a single stream may have bytes past the last.
    const std::uint32_t bytes = elements * typesize + (split ? 0 : rng() % typesize);
    cases.push_back({bytes, split ? typesize : 1, i % 5 == 0 ? 1 : typesize});
  }
  std::size_t total = 0;
  for (const auto& c : cases) total += c.bytes;
  std::vector<std::byte> shuffled(total);
  for (auto& b : shuffled) b = static_cast<std::byte>(rng());
  std::byte* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 2 * total), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, shuffled.data(), total, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<StreamBlock> blocks;
  std::vector<const std::byte*> sources;
  std::size_t at = 0;
  for (const auto& c : cases) {
    blocks.push_back({device + total + at, c.bytes, static_cast<std::uint32_t>(sources.size()),
                      c.streams, c.typesize});
    for (std::uint32_t s = 0; s < c.streams; ++s) {
      sources.push_back(device + at + s * (c.bytes / c.streams));
    }
    at += c.bytes;
  }
  launch_gather_blocks(blocks, sources, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> got(total);
  ASSERT_EQ(cudaMemcpy(got.data(), device + total, total, cudaMemcpyDeviceToHost), cudaSuccess);
  at = 0;
  for (const auto& c : cases) {
    std::vector<std::byte> expected(c.bytes);
    codecs::byte_unshuffle(shuffled.data() + at, expected.data(), c.bytes, c.typesize);
    ASSERT_TRUE(
        std::equal(expected.begin(), expected.end(), got.begin() + static_cast<std::ptrdiff_t>(at)))
        << c.bytes << " bytes, " << c.streams << " streams, typesize " << c.typesize;
    at += c.bytes;
  }
  cudaFree(device);
}

TEST(CudaDeviceUnshuffle, CopiedRangesArriveWhole) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  constexpr std::size_t kBytes = 8 << 20;
  std::vector<std::byte> in(kBytes);
  for (auto& b : in) b = static_cast<std::byte>(rng());
  std::byte* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 2 * kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, in.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(device + kBytes, 0, kBytes), cudaSuccess);
  // 3000 ranges (three launches), unaligned sources, 16-byte aligned and unaligned destinations.
  std::vector<CopyRange> ranges;
  std::vector<std::pair<std::size_t, std::size_t>> places;  // from, to
  std::size_t to = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::size_t bytes = 1 + rng() % 2000;
    const std::size_t from = rng() % (kBytes - bytes);
    if (i % 2 == 0) to = (to + 15) / 16 * 16;
    ranges.push_back({device + from, device + kBytes + to, bytes});
    places.emplace_back(from, to);
    to += bytes;
  }
  ASSERT_LE(to, kBytes);
  launch_copy_ranges(ranges, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> got(kBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), device + kBytes, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto [from, into] = places[i];
    ASSERT_TRUE(std::equal(in.begin() + static_cast<std::ptrdiff_t>(from),
                           in.begin() + static_cast<std::ptrdiff_t>(from + ranges[i].bytes),
                           got.begin() + static_cast<std::ptrdiff_t>(into)))
        << "range " << i;
  }
  cudaFree(device);
}

}  // namespace
}  // namespace zarr_device::cuda
#endif
