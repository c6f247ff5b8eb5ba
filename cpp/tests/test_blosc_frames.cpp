// The layout of Blosc 1 chunks read without decoding them (codecs/blosc_frames.hpp): for chunks
// c-blosc writes with every compressor, shuffle, element size and block size, the splits cover the
// decoded chunk exactly once and decoding them one by one (the device decoder's plan, done on the
// CPU) gives c-blosc's result; damaged chunks give no layout, or one that stays inside the chunk.
#include <blosc.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codecs/blosc_frames.hpp"

namespace zarr_device::codecs {
namespace {

using Bytes = std::vector<std::byte>;

Bytes sample(std::size_t bytes, std::uint32_t seed) {
  Bytes v(bytes);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < bytes; ++i) {
    // Slowly varying values with some noise: every compressor finds something, not everything.
    v[i] = static_cast<std::byte>((i / 64) % 200 + (rng() % 8 == 0 ? rng() % 50 : 0));
  }
  return v;
}

Bytes blosc_of(const Bytes& data, const char* cname, int shuffle, std::size_t typesize,
               std::size_t blocksize) {
  Bytes out(data.size() + BLOSC_MAX_OVERHEAD);
  const int n = blosc_compress_ctx(5, shuffle, typesize, data.size(), data.data(), out.data(),
                                   out.size(), cname, blocksize, 1);
  EXPECT_GT(n, 0) << cname;
  out.resize(static_cast<std::size_t>(std::max(n, 0)));
  return out;
}

bool covers_once(const BloscLayout& layout) {
  std::vector<BloscSplit> splits = layout.splits;
  std::sort(splits.begin(), splits.end(),
            [](const auto& a, const auto& b) { return a.output_offset < b.output_offset; });
  std::uint64_t next = 0;
  for (const auto& s : splits) {
    if (s.output_offset != next) return false;
    next += s.output_bytes;
  }
  return next == layout.decoded_bytes;
}

TEST(BloscFrames, SplitsDecodeToWhatCbloscDecodes) {
  std::size_t checked = 0;
  for (const char* cname : {"lz4", "lz4hc", "zstd", "zlib", "blosclz"}) {
    for (int shuffle : {BLOSC_NOSHUFFLE, BLOSC_SHUFFLE, BLOSC_BITSHUFFLE}) {
      for (std::size_t typesize : {1, 2, 3, 4, 8, 16, 17}) {
        for (std::size_t bytes : {1UL, 100UL, 4096UL, 65573UL, 150000UL}) {
          for (std::size_t blocksize : {0UL, 256UL, 1000UL, 16384UL}) {
            const Bytes data = sample(bytes, static_cast<std::uint32_t>(bytes + typesize));
            const Bytes chunk = blosc_of(data, cname, shuffle, typesize, blocksize);
            std::string why;
            const auto layout = blosc_layout(chunk, bytes, why);
            ASSERT_TRUE(layout) << cname << " " << shuffle << " " << typesize << " " << bytes << " "
                                << blocksize << ": " << why;
            if (!layout->stored) {
              ASSERT_TRUE(covers_once(*layout)) << cname << " " << typesize << " " << bytes;
            }
            for (const auto& s : layout->splits) {
              ASSERT_LE(s.input_offset + s.input_bytes, chunk.size());
            }
            Bytes out(bytes);
            if (decode_blosc_with(*layout, chunk, out, why)) {
              ASSERT_EQ(out, data) << cname << " shuffle " << shuffle << " typesize " << typesize
                                   << " bytes " << bytes << " blocksize " << blocksize;
              ++checked;
            } else {
              // Only what is left to c-blosc may be declined.
              EXPECT_TRUE(layout->shuffle == BloscShuffle::kBit ||
                          layout->compressor == BloscCompressor::kBloscLz)
                  << why;
            }
          }
        }
      }
    }
  }
  std::printf("%zu chunks decoded through their splits\n", checked);
  EXPECT_GT(checked, 500U);
}

TEST(BloscFrames, ByteShuffleHasSplitsPerByteOfTheElement) {
  const Bytes data = sample(1 << 16, 3);
  const Bytes chunk = blosc_of(data, "zstd", BLOSC_SHUFFLE, 4, 8192);
  std::string why;
  const auto layout = blosc_layout(chunk, data.size(), why);
  ASSERT_TRUE(layout) << why;
  EXPECT_EQ(layout->compressor, BloscCompressor::kZstd);
  EXPECT_EQ(layout->shuffle, BloscShuffle::kByte);
  EXPECT_EQ(layout->typesize, 4U);
  EXPECT_EQ(layout->blocks.size(), 8U);
  // zstd is not split by Blosc 1 (its no-split flag), so one stream per block.
  EXPECT_EQ(layout->splits.size(), 8U);
}

TEST(BloscFrames, TheMetadataSizeMustMatch) {
  const Bytes data = sample(4096, 1);
  const Bytes chunk = blosc_of(data, "lz4", BLOSC_SHUFFLE, 4, 0);
  std::string why;
  EXPECT_FALSE(blosc_layout(chunk, 4097, why));
  EXPECT_NE(why.find("4097"), std::string::npos) << why;
  EXPECT_FALSE(blosc_layout(std::span(chunk).first(10), 4096, why));
  Bytes longer = chunk;
  longer.push_back(std::byte{0});
  EXPECT_FALSE(blosc_layout(longer, 4096, why));
}

TEST(BloscFrames, DamagedChunksStayInsideThemselves) {
  std::mt19937_64 rng(9);
  std::size_t refused = 0;
  for (int round = 0; round < 3000; ++round) {
    const char* cname = round % 3 == 0 ? "lz4" : round % 3 == 1 ? "zstd" : "zlib";
    const std::size_t typesize = 1 + rng() % 8;
    const Bytes data = sample(1000 + rng() % 40000, static_cast<std::uint32_t>(round));
    Bytes chunk = blosc_of(data, cname, static_cast<int>(rng() % 2), typesize, 256 << (rng() % 6));
    switch (rng() % 3) {
      case 0:  // header and block table
        for (int k = 0; k < 3; ++k) {
          chunk[rng() % std::min<std::size_t>(chunk.size(), 64)] = static_cast<std::byte>(rng());
        }
        break;
      case 1:
        chunk.resize(rng() % chunk.size());
        break;
      default:
        for (int k = 0; k < 4; ++k) chunk[rng() % chunk.size()] = static_cast<std::byte>(rng());
        break;
    }
    std::string why;
    const auto layout = blosc_layout(chunk, data.size(), why);
    if (!layout) {
      ++refused;
      continue;
    }
    for (const auto& s : layout->splits) {
      ASSERT_LE(s.input_offset + s.input_bytes, chunk.size());
      ASSERT_LE(s.output_offset + s.output_bytes, layout->decoded_bytes);
    }
    Bytes out(data.size());
    (void)decode_blosc_with(*layout, chunk, out, why);  // may fail; must not read or write outside
  }
  EXPECT_GT(refused, 500U);
}

}  // namespace
}  // namespace zarr_device::codecs
