// The decoder process on a GPU (GoogleTest filter CudaDevice*): valid zstd frames decode as
// libzstd decodes them, and damaged frames (which fault or hang nvCOMP: docs/architecture.md,
// "nvCOMP on malformed frames") end at most the decoder process, never the caller's context.
#include <gtest/gtest.h>

#ifdef ZARR_DEVICE_DECODER_PROGRAM
#include <cuda_runtime_api.h>
#include <zstd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "../cuda/isolated_decoder.hpp"
#include "../cuda/nvcomp_api.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device::cuda {
namespace {

using Bytes = std::vector<unsigned char>;

Bytes data_of(std::size_t bytes, unsigned seed) {
  Bytes v(bytes);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < bytes; ++i)
    v[i] = static_cast<unsigned char>((i / 7) % 50 + rng() % 3);
  return v;
}

Bytes zstd_of(const Bytes& in) {
  Bytes out(ZSTD_compressBound(in.size()));
  out.resize(ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3));
  return out;
}

// Puts `frames` into the input arena and decodes them as chunks of `capacity` bytes each.
// A hang waits out `seconds`.
IsolatedDecoder::Outcome decode(IsolatedDecoder& decoder, const std::vector<Bytes>& frames,
                                std::size_t capacity, std::vector<std::size_t>& outputs,
                                int seconds = 20) {
  std::vector<std::size_t> capacities(frames.size(), capacity);
  outputs = *decoder.lay_out(capacities);
  std::vector<isolated_decode::ChunkJob> jobs;
  std::size_t at = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(cudaMemcpy(decoder.input() + at, frames[i].data(), frames[i].size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    jobs.push_back({at, frames[i].size(), outputs[i], capacity});
    at = (at + frames[i].size() + 255) / 256 * 256;
  }
  return decoder.decode(DeviceDecoding::Kind::kZstd, jobs, nullptr,
                        std::chrono::steady_clock::now() + std::chrono::seconds(seconds));
}

TEST(CudaDeviceIsolatedDecode, DecodesValidFramesAsLibzstdDoes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // The decoder process finds nvCOMP as the caller does (it inherits the environment).
  if (!Nvcomp::instance().loaded()) GTEST_SKIP() << Nvcomp::instance().error();
  IsolatedDecoder decoder(0, 16 << 20, 32 << 20, ZARR_DEVICE_DECODER_PROGRAM);
  const std::size_t capacity = 64 << 10;
  std::vector<Bytes> originals, frames;
  for (unsigned i = 0; i < 16; ++i) {
    originals.push_back(data_of(capacity, i));
    frames.push_back(zstd_of(originals.back()));
  }
  std::vector<std::size_t> outputs;
  const auto outcome = decode(decoder, frames, capacity, outputs);
  ASSERT_TRUE(outcome.why.empty()) << outcome.why;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    ASSERT_TRUE(outcome.decoded[i]) << i;
    Bytes back(capacity);
    ASSERT_EQ(
        cudaMemcpy(back.data(), decoder.output() + outputs[i], capacity, cudaMemcpyDeviceToHost),
        cudaSuccess);
    EXPECT_EQ(back, originals[i]) << i;
  }
  std::printf("decoder: %s\n", decoder.description().c_str());
}

TEST(CudaDeviceIsolatedDecode, DamagedFramesLeaveTheCallersContextWhole) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // The decoder process finds nvCOMP as the caller does (it inherits the environment).
  if (!Nvcomp::instance().loaded()) GTEST_SKIP() << Nvcomp::instance().error();
  IsolatedDecoder decoder(0, 16 << 20, 32 << 20, ZARR_DEVICE_DECODER_PROGRAM);
  const std::size_t capacity = 64 << 10;
  std::mt19937_64 rng(11);
  std::size_t lost = 0;
  std::size_t batches = 0;
  // Some damaged batches hang nvCOMP: each of those waits out a short deadline (a few seconds,
  // where a read's is sized from its bytes), so that the test stays well under a minute.
  for (int batch = 0; batch < 16; ++batch, ++batches) {
    std::vector<Bytes> frames;
    for (unsigned i = 0; i < 8; ++i) {
      Bytes f = zstd_of(data_of(capacity, static_cast<unsigned>(rng())));
      switch (rng() % 4) {  // the damage the campaign found faulting most often
        case 0:
          f.resize(1 + rng() % f.size());
          break;
        case 1:
          for (int k = 0; k < 8; ++k)
            f[rng() % f.size()] ^= static_cast<unsigned char>(1u << (rng() % 8));
          break;
        case 2:
          for (std::size_t k = rng() % f.size(), e = std::min(f.size(), k + 200); k < e; ++k)
            f[k] = static_cast<unsigned char>(rng());
          break;
        default:
          for (auto& b : f) b = static_cast<unsigned char>(rng());
          break;
      }
      frames.push_back(std::move(f));
    }
    std::vector<std::size_t> outputs;
    const auto outcome = decode(decoder, frames, capacity, outputs, 3);
    if (!outcome.why.empty()) ++lost;
  }
  // The caller's context works: memory, copies and a valid batch through a fresh process.
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaMemset(p, 1, 1 << 20), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(p);
  const Bytes original = data_of(capacity, 99);
  std::vector<std::size_t> outputs;
  const auto outcome = decode(decoder, {zstd_of(original)}, capacity, outputs);
  ASSERT_TRUE(outcome.why.empty()) << outcome.why;
  ASSERT_TRUE(outcome.decoded[0]);
  Bytes back(capacity);
  ASSERT_EQ(
      cudaMemcpy(back.data(), decoder.output() + outputs[0], capacity, cudaMemcpyDeviceToHost),
      cudaSuccess);
  EXPECT_EQ(back, original);
  std::printf("%zu of %zu damaged batches ended their decoder process; %zu processes started\n",
              lost, batches, decoder.starts());
}

}  // namespace
}  // namespace zarr_device::cuda
#endif
