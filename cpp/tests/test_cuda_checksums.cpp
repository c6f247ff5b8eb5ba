// The GPU's CRC-32 and Adler-32 of decoded buffers (cuda/checksum_kernels.hpp) against zlib's
// crc32() and adler32(): sizes around the 16-byte words, the slices and the segments the kernels
// cut buffers into, buffers at every offset from a 16-byte boundary, one buffer alone over many
// blocks and many buffers in one launch (GoogleTest filter CudaDevice*).
#include <gtest/gtest.h>

#ifdef ZARR_DEVICE_WITH_CUDA
#include <cuda_runtime_api.h>
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "../cuda/checksum_kernels.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device::cuda {
namespace {

std::uint32_t zlib_checksum(ChecksumKind kind, const std::uint8_t* data, std::size_t n) {
  uLong sum = kind == ChecksumKind::kCrc32 ? crc32(0L, Z_NULL, 0) : adler32(0L, Z_NULL, 0);
  // zlib takes at most uInt bytes a call.
  constexpr std::size_t kStep = std::size_t{1} << 30;
  for (std::size_t at = 0; at < n; at += kStep) {
    const auto len = static_cast<uInt>(n - at < kStep ? n - at : kStep);
    sum = kind == ChecksumKind::kCrc32 ? crc32(sum, data + at, len) : adler32(sum, data + at, len);
  }
  return static_cast<std::uint32_t>(sum);
}

const char* name_of(ChecksumKind kind) {
  return kind == ChecksumKind::kCrc32 ? "CRC-32" : "Adler-32";
}

// Buffers of the given sizes, each at the given offset from a 16-byte boundary, in one device
// allocation, with the device arrays of their pointers and sizes.
class DeviceBuffers {
 public:
  DeviceBuffers(const std::vector<std::size_t>& sizes, const std::vector<std::size_t>& offsets,
                std::uint32_t seed)
      : sizes_(sizes) {
    std::mt19937 rng(seed);
    std::size_t total = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      starts_.push_back(total + offsets[i]);
      total += (offsets[i] + sizes[i] + 15) / 16 * 16 + 16;
    }
    host_.resize(total);
    for (std::size_t i = 0; i < total; i += 4) {
      const std::uint32_t word = rng();
      for (std::size_t k = 0; k < 4 && i + k < total; ++k) {
        host_[i + k] = static_cast<std::uint8_t>(word >> (8 * k));
      }
    }
    // Runs of one byte value too, where a table-driven CRC's indices repeat.
    for (std::size_t i = 0; i < host_.size() / 4096; i += 7) {
      std::fill_n(host_.begin() + static_cast<std::ptrdiff_t>(i * 4096), 4096, std::uint8_t{0});
    }
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), total), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host_.data(), total, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<const void*> pointers;
    for (std::size_t start : starts_) pointers.push_back(data_ + start);
    const std::size_t n = sizes.size();
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&pointers_), n * sizeof(void*)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&sizes_device_), n * sizeof(std::size_t)),
              cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&words_), n * sizeof(std::uint32_t)),
              cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&flags_), n * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(pointers_, pointers.data(), n * sizeof(void*), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(sizes_device_, sizes.data(), n * sizeof(std::size_t), cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  ~DeviceBuffers() {
    cudaFree(flags_);
    cudaFree(words_);
    cudaFree(sizes_device_);
    cudaFree(pointers_);
    cudaFree(data_);
  }
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  std::size_t count() const { return sizes_.size(); }
  std::uint32_t expected(ChecksumKind kind, std::size_t i) const {
    return zlib_checksum(kind, host_.data() + starts_[i], sizes_[i]);
  }

  // The GPU's checksums (launch_checksums), over a first fill of the output with junk.
  std::vector<std::uint32_t> checksums(ChecksumKind kind) {
    const std::size_t n = count();
    EXPECT_EQ(cudaMemset(words_, 0xA5, n * sizeof(std::uint32_t)), cudaSuccess);
    launch_checksums(kind, pointers_, sizes_device_, words_, n, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::uint32_t> got(n);
    EXPECT_EQ(cudaMemcpy(got.data(), words_, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return got;
  }

  // The flags of launch_check_checksums against `expected`, over a first fill with junk.
  std::vector<int> flags(ChecksumKind kind, const std::vector<std::uint32_t>& expected) {
    const std::size_t n = count();
    EXPECT_EQ(
        cudaMemcpy(words_, expected.data(), n * sizeof(std::uint32_t), cudaMemcpyHostToDevice),
        cudaSuccess);
    EXPECT_EQ(cudaMemset(flags_, 0x5A, n * sizeof(int)), cudaSuccess);
    launch_check_checksums(kind, pointers_, sizes_device_, words_, flags_, n, nullptr);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int> got(n);
    EXPECT_EQ(cudaMemcpy(got.data(), flags_, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    return got;
  }

 private:
  std::vector<std::size_t> sizes_;
  std::vector<std::size_t> starts_;
  std::vector<std::uint8_t> host_;
  std::uint8_t* data_ = nullptr;
  const void** pointers_ = nullptr;
  std::size_t* sizes_device_ = nullptr;
  std::uint32_t* words_ = nullptr;
  int* flags_ = nullptr;
};

constexpr ChecksumKind kKinds[] = {ChecksumKind::kCrc32, ChecksumKind::kAdler32};

void expect_zlibs(DeviceBuffers& buffers, const std::vector<std::size_t>& sizes) {
  for (const ChecksumKind kind : kKinds) {
    const std::vector<std::uint32_t> got = buffers.checksums(kind);
    for (std::size_t i = 0; i < buffers.count(); ++i) {
      EXPECT_EQ(got[i], buffers.expected(kind, i))
          << name_of(kind) << " of buffer " << i << ", " << sizes[i] << " bytes";
    }
  }
}

TEST(CudaDeviceChecksums, MatchZlibAtEverySizeAndOffset) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // Around the 16-byte words, the 256-byte slices and the 64 KiB segments; the largest spread
  // over many blocks. Each size at an aligned address and at an odd one.
  const std::vector<std::size_t> lengths = {0,         1,     3,     15,          16,
                                            17,        255,   256,   257,         4103,
                                            65535,     65536, 65537, (1UL << 20), (16UL << 20) + 5,
                                            64UL << 20};
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    sizes.push_back(lengths[i]);
    offsets.push_back(0);
    sizes.push_back(lengths[i]);
    offsets.push_back(1 + i % 15);
  }
  DeviceBuffers buffers(sizes, offsets, 1);
  expect_zlibs(buffers, sizes);
}

TEST(CudaDeviceChecksums, OneBufferAloneAtEachOffset) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // One buffer a launch: as many blocks on it as the GPU holds.
  for (const std::size_t size : {5UL, 70000UL, (3UL << 20) + 11, 64UL << 20}) {
    for (const std::size_t offset : {0UL, 1UL, 8UL, 15UL}) {
      DeviceBuffers buffers({size}, {offset}, static_cast<std::uint32_t>(size + offset));
      expect_zlibs(buffers, {size});
    }
  }
}

TEST(CudaDeviceChecksums, ThousandsOfBuffersInOneLaunch) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // Mostly small, some of many segments, which a block of each buffer takes several of.
  std::mt19937 rng(2);
  // (5000 buffers: one block a buffer on GPUs of up to 150 multiprocessors.)
  for (const std::size_t n : {1000UL, 5000UL}) {
    std::vector<std::size_t> sizes;
    std::vector<std::size_t> offsets;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t roll = rng() % 100;
      std::size_t size = rng() % 300;
      if (roll >= 40) size = rng() % (70 << 10);
      if (roll >= 97) size = rng() % (1 << 20);
      if (roll == 0) size = 0;
      sizes.push_back(size);
      offsets.push_back(rng() % 16);
    }
    DeviceBuffers buffers(sizes, offsets, static_cast<std::uint32_t>(n));
    expect_zlibs(buffers, sizes);
  }
}

TEST(CudaDeviceChecksums, FlagsExactlyTheBuffersThatDiffer) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(3);
  std::vector<std::size_t> sizes;
  std::vector<std::size_t> offsets;
  for (int i = 0; i < 500; ++i) {
    sizes.push_back(i % 50 == 0 ? 0 : rng() % (i % 10 == 0 ? (1 << 20) : (100 << 10)));
    offsets.push_back(rng() % 16);
  }
  DeviceBuffers buffers(sizes, offsets, 4);
  for (const ChecksumKind kind : kKinds) {
    std::vector<std::uint32_t> expected;
    std::vector<int> want;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      expected.push_back(buffers.expected(kind, i));
      const bool altered = rng() % 3 == 0;
      // A change of one bit, or of any bits.
      if (altered) expected.back() ^= rng() % 2 == 0 ? 1U << (rng() % 32) : (rng() | 1U);
      want.push_back(altered ? 1 : 0);
    }
    EXPECT_EQ(buffers.flags(kind, expected), want) << name_of(kind);
  }
}

TEST(CudaDeviceChecksums, NoBuffersLaunchNothing) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  launch_checksums(ChecksumKind::kCrc32, nullptr, nullptr, nullptr, 0, nullptr);
  launch_check_checksums(ChecksumKind::kAdler32, nullptr, nullptr, nullptr, nullptr, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace zarr_device::cuda
#endif
