// The GPU's byte unshuffle (Blosc's and numcodecs' shuffle) against the CPU's, on blocks of every
// element size Blosc splits and sizes with a partial element at the end (GoogleTest filter
// CudaDevice*).
#include <gtest/gtest.h>

#ifdef ZARR_DEVICE_WITH_CUDA
#include <cuda_runtime_api.h>

#include <random>
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

}  // namespace
}  // namespace zarr_device::cuda
#endif
