// The layout of Blosc 1 chunks read without decoding them (codecs/blosc_frames.hpp): for chunks
// c-blosc writes with every compressor, shuffle, element size and block size, the splits cover the
// decoded chunk exactly once and decoding them one by one (the device decoder's plan, done on the
// CPU) gives c-blosc's result; damaged chunks give no layout, or one that stays inside the chunk.
#include <blosc.h>
#include <gtest/gtest.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codecs/blosc_frames.hpp"
#include "device_read/stream_gather.hpp"

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

// What a device does with a chunk's streams, done on the CPU: each compressed stream decoded on
// its own (as nvCOMP decodes it, into a buffer of its own), each stored one taken from the chunk,
// and every byte of every block gathered from them by stream_byte (the GPU kernel's arithmetic).
// False where a stream does not decode to its size.
bool gather_streams(const DeviceStreams& streams, const Bytes& chunk, BloscCompressor compressor,
                    Bytes& out) {
  std::vector<Bytes> decoded;
  for (const auto& s : streams.streams) {
    const std::byte* in = chunk.data() + s.input_offset;
    if (s.stored) {
      decoded.emplace_back(in, in + s.output_bytes);
      continue;
    }
    Bytes d(s.output_bytes);
    const std::size_t n =
        compressor == BloscCompressor::kLz4
            ? static_cast<std::size_t>(std::max(
                  0, LZ4_decompress_safe(
                         reinterpret_cast<const char*>(in), reinterpret_cast<char*>(d.data()),
                         static_cast<int>(s.input_bytes), static_cast<int>(d.size()))))
            : ZSTD_decompress(d.data(), d.size(), in, s.input_bytes);
    if (n != s.output_bytes) return false;
    decoded.push_back(std::move(d));
  }
  for (const auto& b : streams.blocks) {
    for (std::uint64_t at = 0; at < b.bytes; ++at) {
      const auto from = device_read::stream_byte(static_cast<std::uint32_t>(at),
                                                 static_cast<std::uint32_t>(b.bytes),
                                                 streams.unshuffle, b.streams);
      EXPECT_LT(from.stream, b.streams);
      const Bytes& source = decoded.at(b.first_stream + from.stream);
      out.at(b.offset + at) = source.at(from.offset);
    }
  }
  return true;
}

TEST(BloscFrames, DeviceStreamsGatherToWhatCbloscDecodes) {
  std::size_t gathered = 0;
  for (const char* cname : {"lz4", "lz4hc", "zstd"}) {
    const auto compressor =
        std::string(cname) == "zstd" ? BloscCompressor::kZstd : BloscCompressor::kLz4;
    for (int shuffle : {BLOSC_NOSHUFFLE, BLOSC_SHUFFLE}) {
      for (std::size_t typesize : {1, 2, 4, 8, 16, 17}) {
        for (std::size_t bytes : {100UL, 4096UL, 65573UL, 150000UL}) {
          for (std::size_t blocksize : {0UL, 1000UL, 16384UL}) {
            for (const bool noise : {false, true}) {
              Bytes data = sample(bytes, static_cast<std::uint32_t>(bytes + typesize));
              if (noise) {  // incompressible: stored streams, or a stored chunk
                std::mt19937 rng(static_cast<std::uint32_t>(bytes));
                for (auto& b : data) b = static_cast<std::byte>(rng());
              }
              const Bytes chunk = blosc_of(data, cname, shuffle, typesize, blocksize);
              std::string why;
              const auto layout = blosc_layout(chunk, bytes, why);
              ASSERT_TRUE(layout) << why;
              DeviceStreams streams;
              if (!blosc_device_streams(*layout, compressor, streams, why)) {
                // Only streams smaller than the bound on their count may be declined.
                EXPECT_GT(layout->splits.size(), 1 + bytes / 512) << why;
                continue;
              }
              Bytes out(bytes);
              ASSERT_TRUE(gather_streams(streams, chunk, compressor, out));
              ASSERT_EQ(out, data) << cname << " shuffle " << shuffle << " typesize " << typesize
                                   << " bytes " << bytes << " blocksize " << blocksize;
              ++gathered;
            }
          }
        }
      }
    }
  }
  std::printf("%zu chunks gathered from their streams\n", gathered);
  EXPECT_GT(gathered, 300U);
}

TEST(BloscFrames, DeviceStreamsAreRefusedForWhatTheDeviceLeavesToCblosc) {
  const Bytes data = sample(1 << 16, 3);
  std::string why;
  DeviceStreams streams;
  const Bytes lz4 = blosc_of(data, "lz4", BLOSC_SHUFFLE, 4, 0);
  EXPECT_FALSE(blosc_device_streams(*blosc_layout(lz4, data.size(), why), BloscCompressor::kZstd,
                                    streams, why));
  const Bytes bits = blosc_of(data, "lz4", BLOSC_BITSHUFFLE, 4, 0);
  EXPECT_FALSE(blosc_device_streams(*blosc_layout(bits, data.size(), why), BloscCompressor::kLz4,
                                    streams, why));
  const Bytes blosclz = blosc_of(data, "blosclz", BLOSC_SHUFFLE, 4, 0);
  EXPECT_FALSE(blosc_device_streams(*blosc_layout(blosclz, data.size(), why), BloscCompressor::kLz4,
                                    streams, why));
  EXPECT_TRUE(streams.streams.empty() && streams.blocks.empty());
}

TEST(BloscFrames, DamagedChunksGiveStreamsInsideThemselves) {
  std::mt19937_64 rng(11);
  std::size_t taken = 0;
  for (int round = 0; round < 3000; ++round) {
    const bool zstd = round % 2 == 0;
    const std::size_t typesize = 1 + rng() % 8;
    const Bytes data = sample(1000 + rng() % 40000, static_cast<std::uint32_t>(round));
    Bytes chunk = blosc_of(data, zstd ? "zstd" : "lz4", static_cast<int>(rng() % 2), typesize,
                           256 << (rng() % 6));
    for (int k = 0; k < 3; ++k) {
      chunk[rng() % std::min<std::size_t>(chunk.size(), 96)] = static_cast<std::byte>(rng());
    }
    std::string why;
    const auto layout = blosc_layout(chunk, data.size(), why);
    DeviceStreams streams;
    if (!layout ||
        !blosc_device_streams(*layout, zstd ? BloscCompressor::kZstd : BloscCompressor::kLz4,
                              streams, why)) {
      continue;
    }
    ++taken;
    // Every stream inside the chunk, the blocks tiling the decoded bytes, each block's streams
    // tiling it in equal parts: nothing a gather reads or writes lies outside.
    std::uint64_t next = 0;
    for (const auto& b : streams.blocks) {
      ASSERT_EQ(b.offset, next);
      ASSERT_GT(b.streams, 0U);
      ASSERT_EQ(b.bytes % b.streams, 0U);
      ASSERT_LE(b.first_stream + b.streams, streams.streams.size());
      for (std::uint32_t s = 0; s < b.streams; ++s) {
        const auto& stream = streams.streams[b.first_stream + s];
        ASSERT_EQ(stream.output_bytes, b.bytes / b.streams);
        ASSERT_LE(stream.input_offset + stream.input_bytes, chunk.size());
        if (stream.stored) ASSERT_EQ(stream.input_bytes, stream.output_bytes);
      }
      next += b.bytes;
    }
    ASSERT_EQ(next, data.size());
  }
  EXPECT_GT(taken, 100U);
}

}  // namespace
}  // namespace zarr_device::codecs
