// Tests of the bytes->bytes codecs as a family (their names, configurations and sharing across
// threads) and of the deflate (gzip, zlib) and lz4 codecs. Golden vectors come from numcodecs 0.16
// / zarr-python 3.1, so a change in our encoding of the formats shows up here rather than as
// unreadable data elsewhere. zstd, blosc and crc32c have files of their own.
#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "codec_test_util.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// Registry and configuration

TEST(CompressionCodecs, RegistersEveryName) {
  for (const char* name : {"zstd", "gzip", "blosc", "crc32c", "numcodecs.zlib", "numcodecs.gzip",
                           "numcodecs.zstd", "numcodecs.blosc", "numcodecs.lz4"}) {
    EXPECT_TRUE(CodecRegistry::instance().contains(name)) << name;
    EXPECT_NO_THROW((void)make(name)) << name;
  }
}

TEST(CompressionCodecs, MetadataEntries) {
  EXPECT_EQ(make("zstd")->to_json(),
            json::parse(R"({"name":"zstd","configuration":{"level":0,"checksum":false}})"));
  EXPECT_EQ(make("zstd", {{"level", 7}, {"checksum", true}})->to_json(),
            json::parse(R"({"name":"zstd","configuration":{"level":7,"checksum":true}})"));
  EXPECT_EQ(make("numcodecs.zstd", {{"id", "zstd"}, {"level", 3}})->to_json(),
            json::parse(R"({"id":"zstd","level":3,"checksum":false})"));
  EXPECT_EQ(make("gzip")->to_json(), json::parse(R"({"name":"gzip","configuration":{"level":5}})"));
  EXPECT_EQ(make("numcodecs.gzip")->to_json(), json::parse(R"({"id":"gzip","level":1})"));
  EXPECT_EQ(make("numcodecs.zlib", {{"level", 9}})->to_json(),
            json::parse(R"({"id":"zlib","level":9})"));
  EXPECT_EQ(make("numcodecs.lz4")->to_json(), json::parse(R"({"id":"lz4","acceleration":1})"));
  EXPECT_EQ(make("crc32c")->to_json(), json::parse(R"({"name":"crc32c"})"));
  // zarr-python's BloscCodec defaults once bound to an array of float32.
  EXPECT_EQ(make("blosc", json(), context_for(&kFloat32))->to_json(),
            json::parse(R"({"name":"blosc","configuration":{"cname":"zstd","clevel":5,
                "shuffle":"shuffle","typesize":4,"blocksize":0}})"));
  EXPECT_EQ(make("blosc", json(), context_for(&kUInt8))->to_json()["configuration"]["shuffle"],
            "bitshuffle");
  EXPECT_EQ(make("numcodecs.blosc")->to_json(),
            json::parse(R"({"id":"blosc","cname":"lz4","clevel":5,"shuffle":1,"blocksize":0})"));
  EXPECT_EQ(make("numcodecs.blosc", {{"shuffle", -1}})->to_json()["shuffle"], -1);
}

TEST(CompressionCodecs, BadConfigurationsRaiseFormatError) {
  EXPECT_THROW((void)make("zstd", {{"level", "high"}}), FormatError);
  EXPECT_THROW((void)make("zstd", {{"checksum", 1}}), FormatError);
  EXPECT_THROW((void)make("zstd", json::array({1, 2})), FormatError);
  EXPECT_THROW((void)make("gzip", {{"level", 10}}), FormatError);
  EXPECT_THROW((void)make("gzip", {{"level", 1.5}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.zlib", {{"level", -2}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"cname", "brotli"}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"clevel", 10}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"shuffle", "byteshuffle"}}), FormatError);
  EXPECT_THROW((void)make("blosc", {{"typesize", 0}}), FormatError);
  // Parsed from text, non-negative numbers are unsigned in nlohmann::json.
  EXPECT_THROW((void)make("blosc", json::parse(R"({"typesize": 0})")), FormatError);
  EXPECT_THROW((void)make("blosc", json::parse(R"({"clevel": 18446744073709551615})")),
               FormatError);
  EXPECT_EQ(make("blosc", json::parse(R"({"typesize": 2, "clevel": 9})"))
                ->to_json()["configuration"]["typesize"],
            2);
  EXPECT_THROW((void)make("blosc", {{"blocksize", -1}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.blosc", {{"shuffle", 3}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.blosc", {{"shuffle", "shuffle"}}), FormatError);
  EXPECT_THROW((void)make("numcodecs.lz4", {{"acceleration", "fast"}}), FormatError);
  EXPECT_THROW((void)make("crc32c", "x"), FormatError);
  EXPECT_THROW((void)make("zstd", {{"level", 1ull << 40}}), FormatError);
  try {
    (void)make("gzip", {{"level", 10}});
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("level"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// gzip and zlib

TEST(CompressionCodecs, DeflateRoundTrips) {
  for (const char* name : {"gzip", "numcodecs.gzip", "numcodecs.zlib"}) {
    for (int level : {-1, 0, 1, 5, 9}) {
      auto codec = make(name, {{"level", level}});
      for (std::size_t n : {0, 1, 1000, 300000}) {
        expect_round_trip(*codec, typed_data(n, 2, static_cast<std::uint32_t>(n)));
      }
      expect_round_trip(*codec, random_bytes(70000, 5));
    }
  }
}

TEST(CompressionCodecs, DeflateGoldenStreams) {
  const Bytes text = bytes_of("hello zarr hello zarr hello zarr!");
  // numcodecs.GZip(1) and numcodecs.Zlib(1).
  const Bytes gzip =
      from_hex("1f8b080081e80c6b04ffcb48cdc9c957a84a2c2a52c8c0c6540400d4f3c57a21000000");
  const Bytes zlib = from_hex("7801cb48cdc9c957a84a2c2a52c8c0c6540400d3720c3b");
  for (const char* name : {"gzip", "numcodecs.gzip"}) {
    EXPECT_EQ(to_bytes(make(name)->decode(to_buffer(gzip), text.size())), text);
    EXPECT_EQ(to_bytes(make(name)->decode(to_buffer(gzip), std::nullopt)), text);
  }
  auto zlib_codec = make("numcodecs.zlib");
  EXPECT_EQ(to_bytes(zlib_codec->decode(to_buffer(zlib), text.size())), text);
  EXPECT_EQ(to_bytes(zlib_codec->decode(to_buffer(zlib), std::nullopt)), text);
  // Same deflate settings as Python's zlib.compress, so the bytes match exactly.
  EXPECT_EQ(to_bytes(zlib_codec->encode(to_buffer(text))), zlib);
  // Our gzip header has no timestamp, but the deflate body and trailer match numcodecs'.
  const Bytes ours = to_bytes(make("numcodecs.gzip")->encode(to_buffer(text)));
  ASSERT_EQ(ours.size(), gzip.size());
  EXPECT_EQ(Bytes(ours.begin() + 10, ours.end()), Bytes(gzip.begin() + 10, gzip.end()));
}

// The check a GPU verifies after nvCOMP's decode (which skips it), as the codec reads it from the
// stored trailer: zlib's crc32() of the decoded bytes for gzip, adler32() for zlib.
TEST(CompressionCodecs, DeflateDeclaresTheCheckOfItsTrailer) {
  const Bytes data = typed_data(70000, 4, 9);
  const auto* bytes = reinterpret_cast<const Bytef*>(data.data());
  const auto crc = static_cast<std::uint32_t>(crc32(crc32(0, nullptr, 0), bytes, data.size()));
  const auto adler =
      static_cast<std::uint32_t>(adler32(adler32(0, nullptr, 0), bytes, data.size()));
  for (const char* name : {"gzip", "numcodecs.gzip", "numcodecs.zlib"}) {
    const auto codec = make(name);
    const Bytes stored = to_bytes(codec->encode(to_buffer(data)));
    const auto d = codec->device_decoding();
    ASSERT_TRUE(d && d->skips_check && d->check_value != nullptr) << name;
    const bool zlib = std::string_view(name) == "numcodecs.zlib";
    EXPECT_EQ(d->check, zlib ? DeviceCheck::kAdler32 : DeviceCheck::kCrc32) << name;
    EXPECT_EQ(d->check_value(stored), zlib ? adler : crc) << name;
  }
}

TEST(CompressionCodecs, GzipConcatenatedMembersAndPadding) {
  auto codec = make("gzip");
  const Bytes a = typed_data(4000, 4, 1);
  const Bytes b = random_bytes(3000, 2);
  Bytes stream = to_bytes(codec->encode(to_buffer(a)));
  stream.insert(stream.end(), 5, std::byte{0});  // Python's gzip module skips zero padding
  const Bytes second = to_bytes(codec->encode(to_buffer(b)));
  stream.insert(stream.end(), second.begin(), second.end());
  stream.insert(stream.end(), 3, std::byte{0});
  Bytes expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), expected.size())), expected);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), std::nullopt)), expected);
  Bytes out(expected.size());
  codec->decode_into(to_buffer(stream), out);
  EXPECT_EQ(out, expected);
  // Garbage after a member is not another member.
  Bytes garbage = stream;
  garbage.push_back(std::byte{0x42});
  expect_decode_error(*codec, garbage, expected.size(), "garbage after the members");
}

TEST(CompressionCodecs, DeflateOutputGrowsWhenNothingDeclaresItsSize) {
  const Bytes zeros(10u << 20, std::byte{0});
  for (const char* name : {"gzip", "numcodecs.zlib"}) {
    auto codec = make(name, {{"level", 9}});
    const Buffer encoded = codec->encode(to_buffer(zeros));
    EXPECT_LT(encoded.size(), zeros.size() / 500);
    EXPECT_EQ(to_bytes(codec->decode(encoded, std::nullopt)), zeros) << name;
  }
  // Two members: the size in the last member's trailer is not the whole output.
  auto gzip = make("gzip");
  Bytes two = to_bytes(gzip->encode(to_buffer(zeros)));
  const Bytes small = to_bytes(gzip->encode(to_buffer(bytes_of("tail"))));
  two.insert(two.end(), small.begin(), small.end());
  EXPECT_EQ(gzip->decode(to_buffer(two), std::nullopt).size(), zeros.size() + 4);
}

TEST(CompressionCodecs, DeflateTruncatedOrCorruptRaisesCodecError) {
  const Bytes data = typed_data(3000, 2, 8);
  for (const char* name : {"gzip", "numcodecs.gzip", "numcodecs.zlib"}) {
    auto codec = make(name);
    const Bytes encoded = to_bytes(codec->encode(to_buffer(data)));
    expect_truncations_rejected(*codec, encoded, data.size());
    // gzip's header fields (flags, time, OS) are unprotected; everything after is checked by
    // the stream's structure, CRC-32 and length. zlib's two header bytes carry a check.
    const std::size_t first =
        std::string_view(name).find("zlib") != std::string_view::npos ? 0 : 10;
    for (std::size_t i = first; i < encoded.size(); ++i) {
      Bytes damaged = encoded;
      damaged[i] ^= std::byte{0xFF};
      expect_decode_error(*codec, damaged, data.size(), "byte " + std::to_string(i) + " flipped");
    }
    expect_wrong_sizes_rejected(*codec, encoded, data.size());
    expect_decode_error(*codec, Bytes(), 0, "empty");
    expect_decode_error(*codec, bytes_of("definitely not deflate"), 10, "not a stream");
  }
  // A damaged checksum is a ChecksumError: gzip's CRC-32 sits before the 4-byte length, zlib's
  // Adler-32 is last.
  Bytes gzip = to_bytes(make("gzip")->encode(to_buffer(data)));
  gzip[gzip.size() - 8] ^= std::byte{1};
  EXPECT_THROW((void)make("gzip")->decode(to_buffer(gzip), data.size()), ChecksumError);
  Bytes zlib = to_bytes(make("numcodecs.zlib")->encode(to_buffer(data)));
  zlib.back() ^= std::byte{1};
  EXPECT_THROW((void)make("numcodecs.zlib")->decode(to_buffer(zlib), data.size()), ChecksumError);
  // zlib streams do not concatenate: anything after the end is an error.
  Bytes trailing = to_bytes(make("numcodecs.zlib")->encode(to_buffer(data)));
  trailing.push_back(std::byte{0});
  expect_decode_error(*make("numcodecs.zlib"), trailing, data.size(), "trailing byte");
}

TEST(CompressionCodecs, DeflateRandomDamageNeverCrashes) {
  const Bytes data = typed_data(20000, 4, 13);
  for (const char* name : {"gzip", "numcodecs.zlib"}) {
    auto codec = make(name);
    fuzz_decode(*codec, to_bytes(codec->encode(to_buffer(data))), data.size(), 400, 4);
  }
}

// ---------------------------------------------------------------------------------------------
// lz4 (numcodecs)

TEST(CompressionCodecs, Lz4RoundTrips) {
  for (int acceleration : {-5, 0, 1, 10, 1000}) {
    auto codec = make("numcodecs.lz4", {{"acceleration", acceleration}});
    for (std::size_t n : {0, 1, 1000, 300000}) {
      expect_round_trip(*codec, typed_data(n, 4, static_cast<std::uint32_t>(n)));
    }
    expect_round_trip(*codec, random_bytes(70000, 6));
  }
}

TEST(CompressionCodecs, Lz4GoldenAndFormat) {
  const Bytes text = bytes_of("hello zarr hello zarr hello zarr!");
  // numcodecs.LZ4(): the size 33 as 4 little-endian bytes, then the LZ4 block.
  const Bytes golden = from_hex("21000000bd68656c6c6f207a617272200b00507a61727221");
  auto codec = make("numcodecs.lz4");
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(golden), text.size())), text);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(golden), std::nullopt)), text);
  EXPECT_EQ(to_bytes(codec->encode(to_buffer(text))), golden);
  const Buffer encoded = codec->encode(to_buffer(Bytes(100000, std::byte{1})));
  EXPECT_EQ(Bytes(encoded.data(), encoded.data() + 4), from_hex("a0860100"));
}

TEST(CompressionCodecs, Lz4TruncatedOrCorruptRaisesCodecError) {
  auto codec = make("numcodecs.lz4");
  const Bytes data = typed_data(5000, 4, 15);
  const Bytes encoded = to_bytes(codec->encode(to_buffer(data)));
  expect_truncations_rejected(*codec, encoded, data.size());
  // The size prefix disagreeing with the block, or with the caller.
  for (std::size_t i = 0; i < 4; ++i) {
    Bytes damaged = encoded;
    damaged[i] ^= std::byte{0x01};
    expect_decode_error(*codec, damaged, data.size(), "prefix byte " + std::to_string(i));
  }
  expect_wrong_sizes_rejected(*codec, encoded, data.size());
  // A match reaching back before the start of the output.
  expect_decode_error(*codec,
                      from_hex("10000000"
                               "1f"
                               "41"
                               "ffff"
                               "00"),
                      16, "bad offset");
  fuzz_decode(*codec, encoded, data.size(), 400, 5);
}

TEST(CompressionCodecs, Lz4PrefixClaimingFourGibibytesIsNotAllocated) {
  auto codec = make("numcodecs.lz4");
  const Bytes hostile = from_hex(
      "ffffffff"
      "00");
  AddressSpaceCap cap(std::size_t{1} << 30);
  if (cap.active()) {
    EXPECT_THROW(ByteArray(std::size_t{4} << 30), OutOfMemoryError);
  }
  EXPECT_THROW((void)codec->decode(to_buffer(hostile), std::nullopt), CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(hostile), 1), CodecError);
  // Within int range but more than 1 byte of block could produce.
  EXPECT_THROW((void)codec->decode(to_buffer(from_hex("00000070"
                                                      "00")),
                                   std::nullopt),
               CodecError);
  try {
    (void)codec->decode(to_buffer(hostile), std::nullopt);
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("4294967295"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lz4"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------

TEST(CompressionCodecs, CodecsAreSafeToShareAcrossThreads) {
  const std::vector<std::shared_ptr<BytesToBytesCodec>> codecs = {
      make("zstd", {{"checksum", true}}), make("gzip"),          make("numcodecs.zlib"),
      make("blosc", {{"typesize", 4}}),   make("numcodecs.lz4"), make("crc32c")};
  std::vector<std::thread> threads;
  threads.reserve(8);
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const Bytes data = typed_data(10000 + 97 * i, 4, static_cast<std::uint32_t>(t * 100 + i));
        for (const auto& codec : codecs) {
          const Buffer encoded = codec->encode(to_buffer(data));
          const Buffer decoded = codec->decode(encoded, data.size());
          if (!std::ranges::equal(decoded.span(), data)) ++failures;
          // A failed decode must not poison the thread's reusable state.
          try {
            (void)codec->decode(encoded.slice(0, encoded.size() / 2), data.size());
            ++failures;
          } catch (const CodecError&) {
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace zarr_device
