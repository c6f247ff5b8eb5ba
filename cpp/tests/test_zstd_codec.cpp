// Tests of the zstd codec: frames as zarr-python, numcodecs and libzstd write them, the block
// sizes zarr-device writes, and frames that are hostile, truncated or damaged. Golden vectors come
// from numcodecs 0.16 / zarr-python 3.1, so a change in our encoding of the formats shows up here
// rather than as unreadable data elsewhere.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_frameHeaderSize, to walk a frame's blocks
#include <gtest/gtest.h>
#include <zstd.h>

#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codec_test_util.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device {
namespace {

using namespace test;

// A zstd frame of `blocks` RLE blocks of 128 KiB each (4 bytes apiece), declaring its content
// size when `declared` is given.
Bytes rle_frame(int blocks, std::optional<std::uint32_t> declared, std::byte value) {
  Bytes frame = from_hex("28b52ffd");
  frame.push_back(std::byte{static_cast<unsigned char>(declared ? 0x80 : 0x00)});  // FHD
  frame.push_back(std::byte{0x38});  // window descriptor: 2^17 bytes
  if (declared) {
    for (int i = 0; i < 4; ++i) frame.push_back(static_cast<std::byte>(*declared >> (8 * i)));
  }
  for (int i = 0; i < blocks; ++i) {
    const std::uint32_t header = (128u * 1024 << 3) | (1u << 1) | (i + 1 == blocks ? 1u : 0u);
    for (int b = 0; b < 3; ++b) frame.push_back(static_cast<std::byte>(header >> (8 * b)));
    frame.push_back(value);
  }
  return frame;
}

// Compresses with libzstd directly, leaving the content size out of the frame header.
Bytes zstd_frame_without_size(const Bytes& data, bool checksum) {
  Bytes out = test::zstd_frame(data, false, checksum);
  EXPECT_EQ(ZSTD_getFrameContentSize(out.data(), out.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  return out;
}

TEST(CompressionCodecs, ZstdRoundTrips) {
  for (const char* name : {"zstd", "numcodecs.zstd"}) {
    for (int level : {-5, 0, 1, 3, 19}) {
      for (bool checksum : {false, true}) {
        auto codec = make(name, {{"level", level}, {"checksum", checksum}});
        for (std::size_t n : {0, 1, 1000, 300000}) {
          expect_round_trip(*codec, typed_data(n, 4, static_cast<std::uint32_t>(n)));
        }
        expect_round_trip(*codec, random_bytes(70000, 3));
      }
    }
  }
}

// The blocks of one zstd frame, walked from their headers: how many, and whether any is larger
// than `most` bytes stored (a compressed block's size is its stored size; raw and RLE blocks
// store their decoded size).
std::size_t zstd_blocks(const Buffer& frame) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(frame.data());
  std::size_t at = ZSTD_frameHeaderSize(frame.data(), frame.size());
  EXPECT_FALSE(ZSTD_isError(at));
  std::size_t blocks = 0;
  for (bool last = false; !last;) {
    const std::uint32_t header = bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16);
    last = (header & 1) != 0;
    const std::uint32_t type = (header >> 1) & 3;
    const std::uint32_t size = header >> 3;
    at += 3 + (type == 1 ? 1 : size);
    ++blocks;
  }
  return blocks;
}

TEST(CompressionCodecs, ZstdEndsABlockEveryZstdBlockBytes) {
  // bf16-like values whose frames are mostly Huffman-coded literals, as model weights compress.
  const Bytes data = typed_data(1 << 20, 2, 9);
  const Settings before = settings();
  Settings changed = before;
  for (const std::size_t block : {std::size_t{0}, std::size_t{4096}, std::size_t{16384}}) {
    changed.zstd_block_bytes = block;
    set_settings(changed);
    for (bool checksum : {false, true}) {
      const auto codec = make("zstd", {{"level", 1}, {"checksum", checksum}});
      const Buffer encoded = codec->encode(to_buffer(data));
      // One standard frame with its content size, decoded by libzstd as by the codec.
      EXPECT_EQ(ZSTD_getFrameContentSize(encoded.data(), encoded.size()), data.size());
      Bytes back(data.size());
      EXPECT_EQ(ZSTD_decompress(back.data(), back.size(), encoded.data(), encoded.size()),
                data.size());
      EXPECT_EQ(back, data);
      expect_round_trip(*codec, data);
      // A block every `block` bytes where that makes at most 128 (else libzstd's own: one per
      // 128 KiB).
      const std::size_t expected =
          block == 0 || data.size() / block > 128 ? 8 : data.size() / block;
      EXPECT_EQ(zstd_blocks(encoded), expected) << block;
    }
  }
  changed.zstd_block_bytes = 16384;
  set_settings(changed);
  const auto codec = make("zstd", {{"level", 1}});
  // A chunk no larger than a block is one block, as libzstd writes it.
  EXPECT_EQ(zstd_blocks(codec->encode(to_buffer(typed_data(8000, 2, 1)))), 1U);
  // Up to 128 blocks a chunk: 2 MiB in blocks of 16 KiB, 4 MiB in libzstd's 128 KiB.
  EXPECT_EQ(zstd_blocks(codec->encode(to_buffer(typed_data(2 << 20, 2, 2)))), 128U);
  EXPECT_EQ(zstd_blocks(codec->encode(to_buffer(typed_data(4 << 20, 2, 3)))), 32U);
  set_settings(before);
}

TEST(CompressionCodecs, ZstdWritesContentSizeAndChecksumFlag) {
  const Bytes data = typed_data(5000, 2, 1);
  for (bool checksum : {false, true}) {
    const Buffer encoded = make("zstd", {{"checksum", checksum}})->encode(to_buffer(data));
    EXPECT_EQ(ZSTD_getFrameContentSize(encoded.data(), encoded.size()), data.size());
    // Frame header descriptor (after the 4-byte magic), bit 2: Content_Checksum_flag.
    EXPECT_EQ(static_cast<int>(encoded.data()[4]) & 0x04, checksum ? 0x04 : 0);
  }
}

TEST(CompressionCodecs, ZstdGoldenFrames) {
  const Bytes text = bytes_of("hello zarr hello zarr hello zarr!");
  // numcodecs.Zstd(3) and Zstd(3, checksum=True).
  const Bytes plain = from_hex("28b52ffd20219500006068656c6c6f207a61727220210100fe8a17");
  const Bytes checked = from_hex("28b52ffd24219500006068656c6c6f207a61727220210100fe8a174e0d5378");
  for (const char* name : {"zstd", "numcodecs.zstd"}) {
    auto codec = make(name);
    for (const Bytes& frame : {plain, checked}) {
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), text.size())), text);
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), std::nullopt)), text);
    }
    EXPECT_EQ(to_bytes(make(name, {{"level", 3}})->encode(to_buffer(text))), plain);
    EXPECT_EQ(to_bytes(make(name, {{"level", 3}, {"checksum", true}})->encode(to_buffer(text))),
              checked);
  }
  // Written by hand from RFC 8878: one raw block, with and without a declared content size.
  const Bytes hello = bytes_of("hello");
  const Bytes sized = from_hex(
      "28b52ffd2005290000"
      "68656c6c6f");
  const Bytes unsized = from_hex(
      "28b52ffd0000290000"
      "68656c6c6f");
  auto codec = make("zstd");
  for (const Bytes& frame : {sized, unsized}) {
    EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), 5)), hello);
    EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), std::nullopt)), hello);
    Bytes out(5);
    codec->decode_into(to_buffer(frame), out);
    EXPECT_EQ(out, hello);
  }
}

TEST(CompressionCodecs, ZstdFramesWithoutContentSize) {
  auto codec = make("zstd");
  for (std::size_t n : {0, 1, 100, 200000}) {
    const Bytes data = typed_data(n, 8, 5);
    for (bool checksum : {false, true}) {
      const Bytes frame = zstd_frame_without_size(data, checksum);
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), n)), data);
      EXPECT_EQ(to_bytes(codec->decode(to_buffer(frame), std::nullopt)), data);
      Bytes out(n);
      codec->decode_into(to_buffer(frame), out);
      EXPECT_EQ(out, data);
      // One byte more or less than the frame holds.
      EXPECT_THROW((void)codec->decode(to_buffer(frame), n + 1), CodecError);
      Bytes bigger(n + 1);
      EXPECT_THROW(codec->decode_into(to_buffer(frame), bigger), CodecError);
      if (n > 0) {
        EXPECT_THROW((void)codec->decode(to_buffer(frame), n - 1), CodecError);
        Bytes smaller(n - 1);
        EXPECT_THROW(codec->decode_into(to_buffer(frame), smaller), CodecError);
      }
    }
  }
}

TEST(CompressionCodecs, ZstdConcatenatedAndSkippableFrames) {
  const Bytes a = typed_data(3000, 4, 1);
  const Bytes b = typed_data(5000, 2, 2);
  const Bytes c = random_bytes(100, 3);
  Bytes stream = to_bytes(make("zstd")->encode(to_buffer(a)));
  const Bytes skippable = from_hex(
      "5a2a4d18"
      "03000000"
      "aabbcc");  // 3 bytes of user data
  stream.insert(stream.end(), skippable.begin(), skippable.end());
  const Bytes unsized = zstd_frame_without_size(b, true);
  stream.insert(stream.end(), unsized.begin(), unsized.end());
  const Bytes sized_c = to_bytes(make("zstd", {{"checksum", true}})->encode(to_buffer(c)));
  stream.insert(stream.end(), sized_c.begin(), sized_c.end());

  Bytes expected = a;
  expected.insert(expected.end(), b.begin(), b.end());
  expected.insert(expected.end(), c.begin(), c.end());
  auto codec = make("zstd");
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), expected.size())), expected);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(stream), std::nullopt)), expected);
  Bytes out(expected.size());
  codec->decode_into(to_buffer(stream), out);
  EXPECT_EQ(out, expected);
  // The declared sizes (a and c) alone already exceed this.
  EXPECT_THROW((void)codec->decode(to_buffer(stream), a.size()), CodecError);

  // All frames sized: the one-shot path.
  Bytes sized = to_bytes(codec->encode(to_buffer(a)));
  sized.insert(sized.end(), sized_c.begin(), sized_c.end());
  Bytes ac = a;
  ac.insert(ac.end(), c.begin(), c.end());
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(sized), ac.size())), ac);
  EXPECT_EQ(to_bytes(codec->decode(to_buffer(sized), std::nullopt)), ac);
  EXPECT_THROW((void)codec->decode(to_buffer(sized), ac.size() + 1), CodecError);
}

TEST(CompressionCodecs, ZstdOutputGrowsWhenNothingDeclaresItsSize) {
  auto codec = make("zstd");
  // 8 MiB from 262 bytes: far past the first guess of the output size.
  const Bytes frame = rle_frame(64, std::nullopt, std::byte{7});
  const Buffer decoded = codec->decode(to_buffer(frame), std::nullopt);
  ASSERT_EQ(decoded.size(), 64u * 128 * 1024);
  EXPECT_EQ(to_bytes(decoded), Bytes(decoded.size(), std::byte{7}));
  EXPECT_EQ(codec->decode(to_buffer(frame), decoded.size()).size(), decoded.size());
  EXPECT_THROW((void)codec->decode(to_buffer(frame), decoded.size() - 1), CodecError);

  // A declared size beyond what is allocated up front: streamed, and held to the declaration.
  const std::uint32_t big = 600u * 128 * 1024;
  EXPECT_EQ(codec->decode(to_buffer(rle_frame(600, big, std::byte{1})), std::nullopt).size(), big);
  EXPECT_THROW((void)codec->decode(to_buffer(rle_frame(599, big, std::byte{1})), std::nullopt),
               CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(rle_frame(600, big - 1, std::byte{1})), std::nullopt),
               CodecError);
}

TEST(CompressionCodecs, ZstdSizeMismatchRaisesCodecError) {
  const Bytes data = typed_data(10000, 4, 9);
  for (const char* name : {"zstd", "numcodecs.zstd"}) {
    auto codec = make(name);
    const Buffer encoded = codec->encode(to_buffer(data));
    expect_wrong_sizes_rejected(*codec, to_bytes(encoded), data.size(), {data.size() * 2});
    try {
      (void)codec->decode(encoded, data.size() + 1);
      ADD_FAILURE() << "no error";
    } catch (const CodecError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(data.size())), std::string::npos)
          << e.what();
    }
  }
}

TEST(CompressionCodecs, ZstdHostileContentSizeIsNotAllocated) {
  // A raw block of 5 bytes in a frame that declares 2^40 bytes of content.
  const Bytes frame = from_hex(
      "28b52ffde0"
      "0000000000010000"
      "290000"
      "68656c6c6f");
  ASSERT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()), 1ull << 40);
  auto codec = make("zstd");
  AddressSpaceCap cap(std::size_t{1} << 30);
  if (cap.active()) {
    EXPECT_THROW(ByteArray(std::size_t{4} << 30), OutOfMemoryError);
  }
  expect_decode_error(*codec, frame, 5, "declares 2^40 bytes");
  try {
    (void)codec->decode(to_buffer(frame), std::nullopt);
  } catch (const CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("1099511627776"), std::string::npos) << e.what();
  }
  // The caller expecting 1 GiB from 18 bytes: refused before allocating.
  EXPECT_THROW((void)codec->decode(to_buffer(frame), std::size_t{1} << 30), CodecError);
}

TEST(CompressionCodecs, ZstdTruncatedOrCorruptRaisesCodecError) {
  auto codec = make("zstd", {{"checksum", true}});
  const Bytes small = typed_data(200, 2, 4);
  const Bytes encoded = to_bytes(codec->encode(to_buffer(small)));
  expect_truncations_rejected(*codec, encoded, small.size());
  const Bytes large = typed_data(300000, 4, 4);
  const Bytes encoded_large = to_bytes(codec->encode(to_buffer(large)));
  expect_truncations_rejected(*codec, encoded_large, large.size(), 997);
  expect_truncations_rejected(*codec, zstd_frame_without_size(large, false), large.size(), 997);

  // With a content checksum, a flipped bit either is caught or changes nothing (an unused header
  // bit, bits of an entropy table description that decode the same).
  int caught = 0;
  int flips = 0;
  for (std::size_t i = 0; i < encoded.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit, ++flips) {
      Bytes damaged = encoded;
      damaged[i] ^= static_cast<std::byte>(1 << bit);
      SCOPED_TRACE("byte " + std::to_string(i) + " bit " + std::to_string(bit));
      Bytes out(small.size());
      try {
        codec->decode_into(to_buffer(damaged), out);
        EXPECT_EQ(out, small);
        EXPECT_EQ(to_bytes(codec->decode(to_buffer(damaged), small.size())), small);
      } catch (const CodecError&) {
        ++caught;
        EXPECT_THROW((void)codec->decode(to_buffer(damaged), small.size()), CodecError);
      }
    }
  }
  EXPECT_GT(caught, flips * 9 / 10);
  Bytes bad_checksum = encoded;
  bad_checksum.back() ^= std::byte{1};
  EXPECT_THROW((void)codec->decode(to_buffer(bad_checksum), small.size()), ChecksumError);

  expect_decode_error(*codec, Bytes(), 0, "empty");
  expect_decode_error(*codec, bytes_of("not zstd at all"), 10, "not a frame");
  Bytes trailing = encoded;
  trailing.push_back(std::byte{0});
  expect_decode_error(*codec, trailing, small.size(), "trailing byte");
}

TEST(CompressionCodecs, ZstdRandomDamageNeverCrashes) {
  auto codec = make("zstd");
  const Bytes data = typed_data(20000, 4, 12);
  fuzz_decode(*codec, to_bytes(codec->encode(to_buffer(data))), data.size(), 400, 1);
  fuzz_decode(*codec, zstd_frame_without_size(data, false), data.size(), 400, 2);
  fuzz_decode(*codec, rle_frame(8, std::nullopt, std::byte{3}), 8 * 128 * 1024, 200, 3);
}

// Found by fuzzing (cpp/fuzz): libzstd's streaming decoder "completes" a frame that ends in an
// empty last block before producing its declared size when the output buffer is small; every
// decode path must refuse it, not only the sized ones.
TEST(Zstd, AFrameMustHoldTheSizeItDeclares) {
  const auto codec = make("zstd");
  const Bytes frames = from_hex("28b52ffd80180a5d2c0005000028b52ffd0000050000");
  EXPECT_THROW((void)codec->decode(to_buffer(frames), std::nullopt), CodecError);
  EXPECT_THROW((void)codec->decode(to_buffer(frames), DecodedSize::bounded(1 << 20)), CodecError);
}

// Found by fuzzing (cpp/fuzz): a frame without a declared size whose blocks reach back past its
// window. Decoded through zstd's own window buffer, which a thread's context keeps from one decode
// to the next, it failed or succeeded depending on how large an earlier frame had made that
// buffer. Every decode of it must give the same answer, whatever ran on the thread before.
TEST(Zstd, AFrameDecodesAlikeWhateverTheThreadDecodedBefore) {
  const auto codec = make("zstd");
  const Bytes frame = from_hex(
      "28b52ffd00260202020202020202020202020202020202020202020202020202"
      "0202020202020202020202020202025d02020202020202020202020202020202"
      "020202020202bd000070004201000000240600ff98b7a5430341004430706604");
  struct Outcome {
    bool ok = false;
    Bytes bytes;
  };
  const auto decode_after = [&](const Bytes* before) {
    Outcome outcome;
    std::thread([&] {
      if (before != nullptr) (void)codec->decode(to_buffer(*before), std::nullopt);
      try {
        outcome.bytes = to_bytes(codec->decode(to_buffer(frame), std::nullopt));
        outcome.ok = true;
      } catch (const CodecError&) {
      }
    }).join();
    return outcome;
  };
  // A frame with an 8 MiB window and no declared size: its decode leaves a large buffer behind.
  Bytes large(8 << 20);
  std::mt19937 random(7);
  for (std::size_t i = 0; i < large.size(); i += 64) large[i] = static_cast<std::byte>(random());
  const Bytes large_frame = zstd_frame_without_size(large, false);
  const Outcome alone = decode_after(nullptr);
  const Outcome after_large = decode_after(&large_frame);
  EXPECT_EQ(alone.ok, after_large.ok);
  EXPECT_EQ(alone.bytes, after_large.bytes);
  if (alone.ok) {  // the sized decodes agree with the free one
    Bytes into(alone.bytes.size());
    codec->decode_into(to_buffer(frame), into);
    EXPECT_EQ(into, alone.bytes);
  }
}

}  // namespace
}  // namespace zarr_device
