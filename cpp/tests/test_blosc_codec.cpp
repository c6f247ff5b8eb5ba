// Tests of the blosc codec (v3 "blosc" and "numcodecs.blosc"): every compressor, shuffle and
// typesize, numcodecs' shuffle codes, and buffers that are hostile, truncated or damaged.
// Golden vectors come from numcodecs 0.16 / zarr-python 3.1, so a change in our
// encoding of the formats shows up here rather than as unreadable data elsewhere.
#include <blosc.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec_test_util.hpp"

namespace zarr_device {
namespace {

using namespace test;

std::vector<std::string> blosc_compressors() {
  std::vector<std::string> names;
  std::string list = blosc_list_compressors();
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    names.push_back(list.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

TEST(CompressionCodecs, BloscRoundTripsEveryCompressorShuffleAndTypesize) {
  const std::vector<std::string> compressors = blosc_compressors();
  std::printf("blosc compressors in this build: %s\n", blosc_list_compressors());
  ASSERT_FALSE(compressors.empty());
  for (const std::string& cname : compressors) {
    for (const char* shuffle : {"noshuffle", "shuffle", "bitshuffle"}) {
      for (int typesize : {1, 2, 4, 8, 16}) {
        auto codec = make("blosc", {{"cname", cname},
                                    {"clevel", 5},
                                    {"shuffle", shuffle},
                                    {"typesize", typesize},
                                    {"blocksize", 0}});
        for (std::size_t n : {0, 7, 1000, 70001}) {
          expect_round_trip(*codec, typed_data(n, typesize, static_cast<std::uint32_t>(n)));
        }
      }
    }
  }
}

TEST(CompressionCodecs, BloscLevelsAndBlocksizes) {
  const Bytes data = typed_data(200000, 4, 21);
  for (int clevel : {0, 1, 9}) {
    for (int blocksize : {0, 256, 4096, 65536}) {
      expect_round_trip(
          *make("blosc",
                {{"cname", "lz4"}, {"clevel", clevel}, {"blocksize", blocksize}, {"typesize", 4}}),
          data);
    }
  }
  expect_round_trip(*make("blosc", {{"typesize", 300}}), data);  // blosc treats >255 as bytes
}

TEST(CompressionCodecs, BloscNumcodecsShuffleCodes) {
  const Bytes data = typed_data(50000, 8, 3);
  // Header byte 2 holds the flags: 0x1 byte shuffle, 0x4 bit shuffle.
  const auto flags = [&](const BytesToBytesCodec& codec) {
    return static_cast<int>(codec.encode(to_buffer(data)).data()[2]) & 0x5;
  };
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", 0}}, context_for(&kFloat64))), 0);
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", 1}}, context_for(&kFloat64))), 1);
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", 2}}, context_for(&kFloat64))), 4);
  // AUTOSHUFFLE: bit shuffle for single bytes, byte shuffle otherwise.
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", -1}}, context_for(&kUInt8))), 4);
  EXPECT_EQ(flags(*make("numcodecs.blosc", {{"shuffle", -1}}, context_for(&kFloat64))), 1);
  for (int shuffle : {-1, 0, 1, 2}) {
    for (const std::string& cname : blosc_compressors()) {
      expect_round_trip(*make("numcodecs.blosc", {{"cname", cname}, {"shuffle", shuffle}},
                              context_for(&kFloat64)),
                        data);
    }
  }
}

TEST(CompressionCodecs, BloscTypesizeDefaultsToElementSize) {
  const Bytes data = typed_data(4096, 4, 1);
  for (const char* name : {"blosc", "numcodecs.blosc"}) {
    const Buffer encoded = make(name, json(), context_for(&kFloat32))->encode(to_buffer(data));
    EXPECT_EQ(static_cast<int>(encoded.data()[3]), 4) << name;  // header byte 3: typesize
  }
  const Buffer explicit_size =
      make("blosc", {{"typesize", 8}}, context_for(&kFloat32))->encode(to_buffer(data));
  EXPECT_EQ(static_cast<int>(explicit_size.data()[3]), 8);
  EXPECT_NO_THROW((void)make("blosc", json(), context_for(nullptr)));
}

TEST(CompressionCodecs, BloscGoldenBuffers) {
  // numcodecs.Blosc over numpy arrays.
  Bytes arange64(256);
  for (int i = 0; i < 64; ++i) arange64[4 * i] = static_cast<std::byte>(i);
  const std::vector<std::pair<const char*, Bytes>> golden = {
      {"lz4, shuffle, arange(64, '<u4')",
       from_hex("020131040001000000010000680000001400000050000000ff36000102030405060708090a0b0c0d"
                "0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435"
                "363738393a3b3c3d3e3f00000000000500a3500000000000")},
      {"zlib, bitshuffle, arange(64, '<u4')",
       from_hex("02017404000100000001000035000000140000001d000000785e5bb50a02ce40c1072860f80f850c"
                "ffa1184442e8e1040082341f25")},
  };
  for (const char* name : {"blosc", "numcodecs.blosc"}) {
    auto codec = make(name);
    for (const auto& [what, encoded] : golden) {
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(encoded), arange64.size())), arange64) << what;
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(encoded), std::nullopt)), arange64) << what;
    }
  }
  const Bytes zeros_u2 = from_hex(
      "02012102d0070000d007000038000000140000000e0000001f000100ffffffd25000000000000e0000001f0001"
      "00ffffffd2500000000000");  // lz4, shuffle, zeros(1000, '<u2')
  EXPECT_EQ(to_bytes(make("blosc")->decode(to_buffer(zeros_u2), 2000)), Bytes(2000, std::byte{0}));
  const Bytes zstd_u4 = from_hex(
      "02019404000400000004000048000000140000003000000028b52ffd60000335010040aaaaccf000ff00ff0c"
      "a030ef01a0829377ed5035045a1013f3884ba2956dee66356814f10f");  // zstd, bitshuffle, arange(256)
  Bytes arange256(1024);
  for (int i = 0; i < 256; ++i) arange256[4 * i] = static_cast<std::byte>(i);
  EXPECT_EQ(to_bytes(make("blosc")->decode(to_buffer(zstd_u4), 1024)), arange256);
}

// Where the first block starts: the first entry of the offsets after the 16-byte header.
std::size_t load_first_bstart(const Bytes& encoded) {
  std::size_t offset = 0;
  for (int i = 0; i < 4; ++i) offset |= static_cast<std::size_t>(encoded[16 + i]) << (8 * i);
  return offset;
}

TEST(CompressionCodecs, BloscTruncatedOrCorruptRaisesCodecError) {
  const Bytes data = typed_data(20000, 4, 5);
  for (const std::string& cname : blosc_compressors()) {
    auto codec = make("blosc", {{"cname", cname}, {"typesize", 4}});
    const Bytes encoded = to_bytes(codec->encode(to_buffer(data)));
    SCOPED_TRACE(cname);
    expect_truncations_rejected(*codec, encoded, data.size(), encoded.size() > 2000 ? 37 : 1);
    // Header: version, compressed length, and block offsets that point outside the buffer.
    for (std::size_t i :
         {std::size_t{0}, std::size_t{12}, std::size_t{13}, std::size_t{16}, std::size_t{19}}) {
      Bytes damaged = encoded;
      damaged[i] ^= std::byte{0xFF};
      expect_decode_error(*codec, damaged, data.size(), "byte " + std::to_string(i) + " flipped");
    }
    expect_wrong_sizes_rejected(*codec, encoded, data.size());
    Bytes trailing = encoded;
    trailing.push_back(std::byte{0});
    expect_decode_error(*codec, trailing, data.size(), "trailing byte");
  }
  // A compressed stream that is damaged inside: zstd's own frame checks catch it.
  auto zstd = make("blosc", {{"cname", "zstd"}, {"typesize", 4}, {"shuffle", "noshuffle"}});
  Bytes damaged = to_bytes(zstd->encode(to_buffer(data)));
  ASSERT_EQ(static_cast<int>(damaged[2]) & 0x2, 0) << "stored uncompressed";
  const std::size_t first_block = load_first_bstart(damaged);
  damaged[first_block + 4] ^= std::byte{0xFF};  // the zstd magic number of the first split
  expect_decode_error(*zstd, damaged, data.size(), "inner zstd frame damaged");
}

TEST(CompressionCodecs, BloscHeaderClaimingGigabytesIsNotAllocated) {
  // A 16-byte header that declares 2 GiB - 17 bytes of output and says it is 16 bytes long.
  const Bytes header = from_hex(
      "02013104"
      "efffff7f"
      "00000100"
      "10000000");
  auto codec = make("blosc");
  AddressSpaceCap cap(std::size_t{1} << 30);
  if (cap.active()) {
    EXPECT_THROW(ByteArray(std::size_t{4} << 30), OutOfMemoryError);
  }
  EXPECT_THROW((void)codec->decode(to_buffer(header), std::nullopt), CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(header), 1000), CodecError);
}

TEST(CompressionCodecs, BloscRandomDamageNeverCrashes) {
  const Bytes data = typed_data(20000, 4, 14);
  std::uint32_t seed = 100;
  for (const std::string& cname : blosc_compressors()) {
    for (const char* shuffle : {"noshuffle", "shuffle", "bitshuffle"}) {
      auto codec = make("blosc", {{"cname", cname}, {"shuffle", shuffle}, {"typesize", 4}});
      fuzz_decode(*codec, to_bytes(codec->encode(to_buffer(data))), data.size(), 100, ++seed);
    }
  }
}

}  // namespace
}  // namespace zarr_device
