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

// A whole chunk's unshuffle over the grid (numcodecs' shuffle), and its shuffle for writes,
// against the CPU's, for element sizes with kernels of their own and without, and sizes with bytes
// past the last element.
void check_whole_chunks(bool shuffle) {
  std::mt19937 rng(shuffle ? 15 : 5);
  std::byte* device = nullptr;
  constexpr std::size_t kMost = (std::size_t{8} << 20) + 7;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), 2 * kMost), cudaSuccess);
  for (std::size_t typesize : {1UL, 2UL, 3UL, 4UL, 8UL, 16UL}) {
    for (std::size_t bytes : {0UL, 5UL, 4096UL, 1000003UL, kMost}) {
      std::vector<std::byte> in(bytes);
      for (auto& b : in) b = static_cast<std::byte>(rng());
      ASSERT_EQ(cudaMemcpy(device, in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
      std::vector<std::byte> expected(bytes);
      if (shuffle) {
        launch_chunk_shuffle(device, device + kMost, bytes, typesize, nullptr);
        codecs::byte_shuffle(in.data(), expected.data(), bytes, typesize);
      } else {
        launch_chunk_unshuffle(device, device + kMost, bytes, typesize, nullptr);
        codecs::byte_unshuffle(in.data(), expected.data(), bytes, typesize);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> got(bytes);
      ASSERT_EQ(cudaMemcpy(got.data(), device + kMost, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got, expected) << "typesize " << typesize << ", " << bytes << " bytes";
    }
  }
  cudaFree(device);
}

TEST(CudaDeviceUnshuffle, WholeChunksMatchTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_whole_chunks(false);
}

TEST(CudaDeviceUnshuffle, WholeChunksMatchTheCpusShuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_whole_chunks(true);
}

// Many whole chunks unshuffled into their places by ChunkUnshuffles (a few gather launches, as a
// read places a call's chunks), more than one launch takes, at 256-byte-aligned places as the
// read path lays them out and packed at any address, against the CPU's unshuffle of each.
TEST(CudaDeviceUnshuffle, ManyWholeChunksInFewLaunchesMatchTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const bool aligned : {true, false}) {
    std::mt19937 rng(aligned ? 17 : 7);
    const auto place = [&](std::size_t at) { return aligned ? (at + 255) / 256 * 256 : at; };
    struct Chunk {
      std::size_t typesize, bytes, in_at, out_at;
    };
    std::vector<Chunk> chunks;
    std::size_t end = 0;
    for (int i = 0; i < 600; ++i) {
      const std::size_t typesize = std::vector<std::size_t>{2, 4, 8, 16, 3, 2}[i % 6];
      const std::size_t bytes = typesize * (1 + rng() % (i % 50 == 0 ? 300000 : 4000));
      end = place(end);
      chunks.push_back({typesize, bytes, end, 0});
      end += bytes;
    }
    for (auto& c : chunks) {
      end = place(end);
      c.out_at = end;
      end += c.bytes;
    }
    std::vector<std::byte> image(end);
    for (auto& b : image) b = static_cast<std::byte>(rng());
    std::byte* device = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), end), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device, image.data(), end, cudaMemcpyHostToDevice), cudaSuccess);
    ChunkUnshuffles unshuffles;
    for (const auto& c : chunks) {
      unshuffles.add(device + c.in_at, device + c.out_at, c.bytes, c.typesize, nullptr);
    }
    unshuffles.launch(nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::byte> got(end);
    ASSERT_EQ(cudaMemcpy(got.data(), device, end, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(device);
    for (const auto& c : chunks) {
      std::vector<std::byte> expected(c.bytes);
      codecs::byte_unshuffle(image.data() + c.in_at, expected.data(), c.bytes, c.typesize);
      ASSERT_TRUE(std::equal(expected.begin(), expected.end(), got.begin() + c.out_at))
          << "typesize " << c.typesize << ", " << c.bytes << " bytes, aligned " << aligned;
    }
    // Nothing else changed: the inputs are where they were.
    for (const auto& c : chunks) {
      ASSERT_TRUE(std::equal(image.begin() + c.in_at, image.begin() + c.in_at + c.bytes,
                             got.begin() + c.in_at));
    }
  }
}

// Streams of many blocks gathered and unshuffled into place (a chunk decoded stream by stream),
// against the CPU's unshuffle of the blocks; more blocks and sources than one launch takes. Laid
// out as the read path lays them out (every stream and output 256-byte aligned: the fast way,
// four elements a thread, where the block is byte planes), or packed at any address (byte by byte).
void check_gathered_blocks(bool aligned) {
  std::mt19937 rng(aligned ? 16 : 6);
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
  const auto place = [&](std::size_t at) { return aligned ? (at + 255) / 256 * 256 : at; };
  // Where each case's streams and output are on the device.
  std::vector<std::vector<std::size_t>> stream_at(cases.size());
  std::vector<std::size_t> out_at(cases.size());
  std::size_t end = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    for (std::uint32_t s = 0; s < cases[k].streams; ++s) {
      end = place(end);
      stream_at[k].push_back(end);
      end += cases[k].bytes / cases[k].streams;
    }
    end += cases[k].bytes % cases[k].streams;
  }
  for (std::size_t k = 0; k < cases.size(); ++k) {
    end = place(end);
    out_at[k] = end;
    end += cases[k].bytes;
  }
  std::vector<std::vector<std::byte>> shuffled(cases.size());
  std::vector<std::byte> image(end);
  for (std::size_t k = 0; k < cases.size(); ++k) {
    shuffled[k].resize(cases[k].bytes);
    for (auto& b : shuffled[k]) b = static_cast<std::byte>(rng());
    const std::uint32_t part = cases[k].bytes / cases[k].streams;
    for (std::uint32_t s = 0; s < cases[k].streams; ++s) {
      // The last stream holds the bytes past the equal parts (none in a split block).
      const std::uint32_t bytes = s + 1 == cases[k].streams ? cases[k].bytes - s * part : part;
      std::copy_n(shuffled[k].begin() + s * part, bytes, image.begin() + stream_at[k][s]);
    }
  }
  std::byte* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), end), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, image.data(), end, cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<StreamBlock> blocks;
  std::vector<const std::byte*> sources;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    blocks.push_back({device + out_at[k], cases[k].bytes,
                      static_cast<std::uint32_t>(sources.size()), cases[k].streams,
                      cases[k].typesize});
    for (const std::size_t at : stream_at[k]) sources.push_back(device + at);
  }
  launch_gather_blocks(blocks, sources, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> got(end);
  ASSERT_EQ(cudaMemcpy(got.data(), device, end, cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    std::vector<std::byte> expected(c.bytes);
    codecs::byte_unshuffle(shuffled[k].data(), expected.data(), c.bytes, c.typesize);
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(),
                           got.begin() + static_cast<std::ptrdiff_t>(out_at[k])))
        << c.bytes << " bytes, " << c.streams << " streams, typesize " << c.typesize
        << (aligned ? ", aligned" : ", packed");
  }
  cudaFree(device);
}

TEST(CudaDeviceUnshuffle, GatheredBlocksMatchTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_gathered_blocks(false);
}

TEST(CudaDeviceUnshuffle, GatheredAlignedBlocksMatchTheCpusUnshuffle) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  check_gathered_blocks(true);
}

// Many small ranges filled in one launch, and the bytes between them left as they were.
TEST(CudaDeviceUnshuffle, FilledRangesAndNothingElse) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(8);
  constexpr std::size_t kBytes = 4 << 20;
  std::byte* device = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device), kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(device, 0, kBytes), cudaSuccess);
  std::vector<void*> ranges;
  std::vector<std::size_t> sizes;
  std::vector<std::byte> expected(kBytes);
  for (std::size_t at = 0; at + 5000 < kBytes;) {
    at += 1 + rng() % 300;
    const std::size_t bytes = 1 + rng() % 4096;
    ranges.push_back(device + at);
    sizes.push_back(bytes);
    std::fill_n(expected.begin() + static_cast<std::ptrdiff_t>(at), bytes, std::byte{0xA5});
    at += bytes;
  }
  void** device_ranges = nullptr;
  std::size_t* device_sizes = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_ranges), ranges.size() * sizeof(void*)),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_sizes), sizes.size() * sizeof(std::size_t)),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_ranges, ranges.data(), ranges.size() * sizeof(void*),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device_sizes, sizes.data(), sizes.size() * sizeof(std::size_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  launch_fill(device_ranges, device_sizes, ranges.size(), std::byte{0xA5}, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::byte> got(kBytes);
  ASSERT_EQ(cudaMemcpy(got.data(), device, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(got == expected) << ranges.size() << " ranges";
  cudaFree(device_sizes);
  cudaFree(device_ranges);
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
