// Tests of CRC-32C itself (every implementation, pieces joined) and of the crc32c codec that
// appends it. Golden vectors come from numcodecs 0.16 / zarr-python 3.1, so a change in our
// encoding of the formats shows up here rather than as unreadable data elsewhere.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec_test_util.hpp"
#include "codecs/crc32c.hpp"

namespace zarr_device {
namespace {

using namespace test;

// ---------------------------------------------------------------------------------------------
// CRC-32C

struct Crc32cImpl {
  const char* name;
  std::uint32_t (*function)(std::span<const std::byte>, std::uint32_t);
};

std::vector<Crc32cImpl> crc32c_impls() {
  std::vector<Crc32cImpl> impls = {{"portable", codecs::detail::crc32c_portable},
                                   {"dispatch", [](std::span<const std::byte> d, std::uint32_t c) {
                                      return codecs::crc32c(d, c);
                                    }}};
  if (codecs::detail::crc32c_hardware_available()) {
    impls.push_back({"hardware", codecs::detail::crc32c_hardware});  // SSE4.2 or Arm CRC
  }
  return impls;
}

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 and the usual check value.
  Bytes ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[i] = static_cast<std::byte>(i);
    descending[i] = static_cast<std::byte>(31 - i);
  }
  const std::vector<std::pair<Bytes, std::uint32_t>> vectors = {
      {bytes_of("123456789"), 0xE3069283},
      {Bytes(), 0x00000000},
      {Bytes(32, std::byte{0x00}), 0x8A9136AA},
      {Bytes(32, std::byte{0xFF}), 0x62A8AB43},
      {ascending, 0x46DD794E},
      {descending, 0x113FDB5C},
      {bytes_of("hello zarr"), 0x6EA065BA},  // zarr-python's Crc32cCodec appends ba 65 a0 6e
  };
  for (const auto& impl : crc32c_impls()) {
    for (const auto& [data, expected] : vectors) {
      EXPECT_EQ(impl.function(data, 0), expected) << impl.name << ", " << data.size() << " bytes";
    }
  }
  std::printf("crc32c hardware path available: %s\n",
              codecs::detail::crc32c_hardware_available() ? "yes" : "no");
}

TEST(Crc32c, ImplementationsAgreeAtEveryLengthAndAlignment) {
  const Bytes data = random_bytes(4096 + 64, 7);
  for (std::size_t offset = 0; offset < 8; ++offset) {
    for (std::size_t length = 0; length <= 300; ++length) {
      const std::span<const std::byte> piece(data.data() + offset, length);
      const std::uint32_t expected = codecs::detail::crc32c_portable(piece, 0);
      for (const auto& impl : crc32c_impls()) {
        ASSERT_EQ(impl.function(piece, 0), expected)
            << impl.name << " offset " << offset << " length " << length;
      }
    }
  }
  const std::span<const std::byte> whole(data.data() + 3, 4096);
  for (const auto& impl : crc32c_impls()) {
    EXPECT_EQ(impl.function(whole, 0x12345678), codecs::detail::crc32c_portable(whole, 0x12345678))
        << impl.name;
  }
}

// Long inputs take the three-lane paths (blocks of 3 x 8 KiB, 3 x 1344 and 3 x 320 bytes) and then
// the tail.
TEST(Crc32c, ImplementationsAgreeOnLongInputs) {
  const Bytes data = random_bytes(200 * 1024 + 16, 13);
  for (std::size_t length :
       {std::size_t{959}, std::size_t{960}, std::size_t{961}, std::size_t{4031}, std::size_t{4032},
        std::size_t{4032 + 960 + 9}, std::size_t{4096}, std::size_t{24575}, std::size_t{24576},
        std::size_t{24576 + 4032 + 960 + 9}, std::size_t{3 * 24576 + 2 * 4032 + 100},
        std::size_t{200 * 1024}}) {
    for (std::size_t offset : {0, 3}) {
      const std::span<const std::byte> piece(data.data() + offset, length);
      for (const auto& impl : crc32c_impls()) {
        ASSERT_EQ(impl.function(piece, 0x9abcdef0),
                  codecs::detail::crc32c_portable(piece, 0x9abcdef0))
            << impl.name << " offset " << offset << " length " << length;
      }
    }
  }
}

// The hardware path (SSE4.2, or Arm's CRC instructions on aarch64) against the table on random
// buffers: random lengths across the three-lane block sizes, offsets and starting registers.
TEST(Crc32c, HardwareMatchesTableOnRandomBuffers) {
  if (!codecs::detail::crc32c_hardware_available()) {
    GTEST_SKIP() << "no CRC32C instruction on this processor (or in this build)";
  }
  const Bytes data = random_bytes(256 * 1024 + 16, 17);
  std::mt19937_64 random(17);
  for (int run = 0; run < 2000; ++run) {
    const std::size_t offset = random() % 16;
    const std::size_t length = random() % (run % 4 == 0 ? 256 * 1024 : 4096);
    const auto start = static_cast<std::uint32_t>(random());
    const std::span<const std::byte> piece(data.data() + offset, length);
    ASSERT_EQ(codecs::detail::crc32c_hardware(piece, start),
              codecs::detail::crc32c_portable(piece, start))
        << "offset " << offset << " length " << length << " start " << start;
  }
}

TEST(Crc32c, ContinuesAcrossPieces) {
  const Bytes data = random_bytes(1000, 11);
  const std::uint32_t whole = codecs::crc32c(data);
  for (std::size_t split : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    const std::span<const std::byte> all(data);
    for (const auto& impl : crc32c_impls()) {
      EXPECT_EQ(impl.function(all.subspan(split), impl.function(all.first(split), 0)), whole)
          << impl.name << " split at " << split;
    }
  }
}

// Checksums of pieces computed apart join into the whole's: each split, lengths past a table's
// reach (of 2^k bytes and between) and empty pieces on either side.
TEST(Crc32c, CombinesPiecesComputedApart) {
  const Bytes data = random_bytes(70000, 12);
  const std::span<const std::byte> all(data);
  for (std::size_t split : {0, 1, 3, 4, 5, 8, 255, 256, 4096, 65536, 69999, 70000}) {
    const std::uint32_t a = codecs::crc32c(all.first(split));
    const std::uint32_t b = codecs::crc32c(all.subspan(split));
    EXPECT_EQ(codecs::crc32c_combine(a, b, data.size() - split), codecs::crc32c(all))
        << "split at " << split;
  }
  // Three pieces joined left to right.
  const std::uint32_t ab = codecs::crc32c_combine(codecs::crc32c(all.first(100)),
                                                  codecs::crc32c(all.subspan(100, 900)), 900);
  EXPECT_EQ(codecs::crc32c_combine(ab, codecs::crc32c(all.subspan(1000)), data.size() - 1000),
            codecs::crc32c(all));
}

// ---------------------------------------------------------------------------------------------
// crc32c codec

TEST(CompressionCodecs, Crc32cAppendsChecksum) {
  auto codec = make("crc32c");
  // zarr-python's Crc32cCodec output for b"hello zarr".
  const Bytes golden = from_hex(
      "68656c6c6f207a617272"
      "ba65a06e");
  EXPECT_EQ(to_bytes(codec->encode(to_buffer(bytes_of("hello zarr")))), golden);
  EXPECT_EQ(codec->encoded_size(10), 14u);
  const Buffer encoded = to_buffer(golden);
  const Buffer decoded = codec->decode(encoded, 10);
  EXPECT_EQ(to_bytes(decoded), bytes_of("hello zarr"));
  EXPECT_EQ(decoded.data(), encoded.data()) << "decode should slice, not copy";
  for (std::size_t n : {0, 1, 5000}) expect_round_trip(*codec, random_bytes(n, 9));
}

TEST(CompressionCodecs, Crc32cMismatchRaisesChecksumError) {
  auto codec = make("crc32c");
  Bytes damaged = from_hex(
      "68656c6c6f207a617272"
      "ba65a06e");
  damaged[0] ^= std::byte{0x01};
  expect_decode_error(*codec, damaged, 10, "payload damaged");
  EXPECT_THROW((void)codec->decode(to_buffer(damaged), 10), ChecksumError);
  Bytes out(10);
  EXPECT_THROW(codec->decode_into(to_buffer(damaged), out), ChecksumError);
  try {
    (void)codec->decode(to_buffer(damaged), std::nullopt);
    ADD_FAILURE() << "no error";
  } catch (const ChecksumError& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kChecksum);
    EXPECT_NE(message.find("crc32c"), std::string::npos) << message;
    EXPECT_NE(message.find("0x6ea065ba"), std::string::npos) << message;  // stored
    EXPECT_NE(message.find([&] {
      char hex[11];
      std::snprintf(hex, sizeof hex, "0x%08x", codecs::crc32c(std::span(damaged).first(10)));
      return std::string(hex);
    }()),
              std::string::npos)
        << message;
  }
}

TEST(CompressionCodecs, Crc32cShortOrMisSizedInputRaisesCodecError) {
  auto codec = make("crc32c");
  for (std::size_t n : {0, 1, 3}) {
    const Buffer short_input = to_buffer(Bytes(n, std::byte{0}));
    EXPECT_THROW((void)codec->decode(short_input, std::nullopt), CodecError);
    Bytes out(0);
    EXPECT_THROW(codec->decode_into(short_input, out), CodecError);
  }
  const Buffer encoded = codec->encode(to_buffer(bytes_of("abc")));
  EXPECT_THROW((void)codec->decode(encoded, 4), CodecError);
  Bytes wrong(2);
  EXPECT_THROW(codec->decode_into(encoded, wrong), CodecError);
  EXPECT_EQ(codec->decode(to_buffer(from_hex("00000000")), 0).size(), 0u);  // crc32c("") == 0
}

// crc32c returns a slice of its input, yet it too keeps to the bound the chain gives it.
TEST(Crc32c, KeepsToTheChainsBound) {
  const auto codec = make("crc32c");
  const Bytes payload = bytes_of("abcdefgh");
  const Buffer stored = codec->encode(to_buffer(payload));
  EXPECT_EQ(to_bytes(codec->decode(stored, DecodedSize::bounded(8))), payload);
  EXPECT_THROW((void)codec->decode(stored, DecodedSize::bounded(7)), CodecError);
}

}  // namespace
}  // namespace zarr_device
