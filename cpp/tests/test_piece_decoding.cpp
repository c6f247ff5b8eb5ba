// Decoding stored chunks from pieces (CodecChain::piece_decoder): what a host read does with
// chunks of tens of MiB, so that it holds a piece of each, not all of it. Every way of cutting the
// stored bytes into pieces decodes to what the whole chunk decodes to, and fails where it fails,
// with the same kind of error: damaged bytes under a crc32c are a checksum mismatch, even where
// zstd trips over them first.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "decode_test_util.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

using codecs::CodecChain;
using test::Bytes;
using test::json;
using test::make_spec;

using test::array_like;
using test::kZstd;
using test::kZstdCrc;
using test::Outcome;
using test::whole;

// The same through the piece decoder, fed pieces of the sizes `cut` gives in turn.
Outcome in_pieces(const CodecChain& chain, const Bytes& stored, Bytes& out,
                  const std::vector<std::size_t>& cut) {
  const auto& spec = chain.spec();
  try {
    auto decoder = chain.piece_decoder(
        test::full_selection(spec.shape),
        StridedView{out.data(), spec.shape, test::c_strides(spec.shape, spec.dtype->size)},
        stored.size());
    if (!decoder) return {false, ErrorKind::kUsage, "no piece decoder"};
    std::size_t at = 0;
    for (std::size_t k = 0; at < stored.size(); ++k) {
      const std::size_t n = std::min(cut[k % cut.size()], stored.size() - at);
      decoder->feed({stored.data() + at, n});
      at += n;
    }
    decoder->finish();
    return {};
  } catch (const Error& e) {
    return {false, e.kind(), e.what()};
  }
}

const std::vector<std::vector<std::size_t>> kCuts = {
    {1}, {3, 17}, {7}, {18}, {19, 1}, {4096}, {65536, 5}, {1 << 20}, {SIZE_MAX}};

TEST(PieceDecoding, EveryCutDecodesAsTheWholeChunkDoes) {
  const auto spec = make_spec({1500, 700}, "uint16");  // 2.1 MB
  const Bytes chunk = array_like(spec.nbytes(), 1);
  for (const char* codecs : {kZstd, kZstdCrc}) {
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    const Bytes stored = test::to_bytes(*chain.encode(chunk));
    ASSERT_LT(stored.size(), chunk.size() / 2);
    for (const auto& cut : kCuts) {
      SCOPED_TRACE(testing::Message() << "piece " << cut.front());
      Bytes out(chunk.size(), std::byte{0x5a});
      const Outcome o = in_pieces(chain, stored, out, cut);
      ASSERT_TRUE(o.ok) << o.message;
      EXPECT_EQ(out, chunk);
    }
  }
}

// Frames zstd itself writes: several in one chunk (an empty one, one without its size, one
// smaller than a frame header), cut anywhere, headers included.
TEST(PieceDecoding, SeveralFramesWithAndWithoutSizesCutAnywhere) {
  const auto spec = make_spec({40000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 2);
  const Bytes stored = test::several_frames(chunk);
  const CodecChain chain(json::parse(kZstd), spec);
  Bytes reference(chunk.size());
  ASSERT_TRUE(whole(chain, stored, reference).ok);
  ASSERT_EQ(reference, chunk);
  for (std::size_t piece = 1; piece <= 40; ++piece) {
    Bytes out(chunk.size());
    const Outcome o = in_pieces(chain, stored, out, {piece});
    ASSERT_TRUE(o.ok) << "piece " << piece << ": " << o.message;
    ASSERT_EQ(out, chunk) << "piece " << piece;
  }
}

TEST(PieceDecoding, ChunksOfTheWrongSizeFailAsWholeOnesDo) {
  const auto spec = make_spec({30000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 3);
  const CodecChain chain(json::parse(kZstd), spec);
  const Bytes stored = test::to_bytes(*chain.encode(chunk));
  const auto larger_spec = make_spec({30001}, "uint8");
  const auto smaller_spec = make_spec({29999}, "uint8");
  for (const auto& other : {larger_spec, smaller_spec}) {
    const CodecChain wrong(json::parse(kZstd), other);
    Bytes out(other.nbytes());
    for (const auto& cut : kCuts) {
      const Outcome o = in_pieces(wrong, stored, out, cut);
      EXPECT_FALSE(o.ok);
      EXPECT_EQ(o.kind, ErrorKind::kCodec) << o.message;
    }
  }
  // Cut short: truncated, as the whole chunk is.
  const Bytes cut_short(stored.begin(), stored.end() - 9);
  Bytes out(chunk.size());
  const Outcome o = in_pieces(chain, cut_short, out, {1000});
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.kind, ErrorKind::kCodec);
  EXPECT_NE(o.message.find("truncated"), std::string::npos) << o.message;
  EXPECT_FALSE(in_pieces(chain, Bytes{}, out, {1}).ok);  // no data at all
}

// Damage anywhere in a chunk under a crc32c: a checksum mismatch, however the pieces fall, as
// when the chunk is verified whole before zstd sees it.
TEST(PieceDecoding, DamageUnderAChecksumIsAChecksumMismatch) {
  test::expect_damage_is_a_checksum_mismatch(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return in_pieces(chain, stored, out, {cut});
      },
      {4096, 1 << 20});
}

// Random damage without a checksum: the piece decoder and the whole decode agree on whether the
// chunk decodes, and on what it decodes to when it does.
TEST(PieceDecoding, RandomDamageWithoutAChecksumIsJudgedAlike) {
  test::expect_random_damage_judged_alike(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return in_pieces(chain, stored, out, {cut});
      },
      5000);
}

TEST(PieceDecoding, OnlyWhereTheChunkDecompressesIntoPlace) {
  const auto spec = make_spec({100, 100}, "uint16");
  Bytes out(spec.nbytes());
  const StridedView whole_view{out.data(), spec.shape, test::c_strides(spec.shape, 2)};
  const auto all = test::full_selection(spec.shape);
  EXPECT_NE(CodecChain(json::parse(kZstdCrc), spec).piece_decoder(all, whole_view, 1000), nullptr);
  // Part of the chunk, a strided destination, big-endian elements, a codec that does not decode
  // from pieces, a checksum before the compressor: the whole chunk's way.
  std::vector<DimSlice> part = all;
  part[0].count = 50;
  const std::vector<std::int64_t> half_shape = {50, 100};
  const StridedView half{out.data(), half_shape, test::c_strides(half_shape, 2)};
  EXPECT_EQ(CodecChain(json::parse(kZstd), spec).piece_decoder(part, half, 1000), nullptr);
  const StridedView transposed{out.data(), spec.shape, {2, 200}};
  EXPECT_EQ(CodecChain(json::parse(kZstd), spec).piece_decoder(all, transposed, 1000), nullptr);
  for (const char* codecs :
       {R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd"}])",
        R"([{"name": "bytes"}, {"name": "gzip"}])", R"([{"name": "bytes"}, {"name": "crc32c"}])",
        R"([{"name": "bytes"}, {"name": "crc32c"}, {"name": "zstd"}])"}) {
    SCOPED_TRACE(codecs);
    EXPECT_EQ(CodecChain(json::parse(codecs), spec).piece_decoder(all, whole_view, 1000), nullptr);
  }
}

// A host read of chunks of more than 8 MiB stored reads each in pieces and decodes it into place,
// with a budget smaller than one chunk; damage in one is a checksum error naming its key.
TEST(PieceDecoding, HostReadsOfLargeChunksReadThemInPieces) {
  auto recording = std::make_shared<test::ReadRecordingStore>(make_memory_store());
  const std::vector<std::int64_t> shape = {4, 3000, 2000};  // 4 chunks of 12 MB (uint16)
  const std::vector<std::int64_t> chunks = {1, 3000, 2000};
  auto array = Array::create(
      recording, "big", test::array_doc(shape, chunks, "uint16", 0, json::parse(kZstdCrc)), false);
  std::vector<std::uint16_t> values(static_cast<std::size_t>(test::product(shape)));
  std::mt19937 rng(8);
  for (auto& v : values) v = static_cast<std::uint16_t>(rng() % 65536);  // 12 MB stored a chunk
  const auto all = test::full_selection(shape);
  array->write(all, {reinterpret_cast<const std::byte*>(values.data()), values.size() * 2});
  IoOptions small;
  small.max_inflight_bytes = 4 << 20;
  small.threads = 2;
  std::vector<std::uint16_t> out(values.size());
  recording->largest_read = 0;
  array->read(all, {reinterpret_cast<std::byte*>(out.data()), out.size() * 2}, small);
  EXPECT_EQ(out, values);
  EXPECT_LE(recording->largest_read.load(), std::size_t{2} << 20);
  EXPECT_GT(recording->largest_read.load(), 0u);

  // The same values as inner chunks of shards (two to a shard).
  const json sharded = json::array(
      {{{"name", "sharding_indexed"},
        {"configuration", {{"chunk_shape", chunks}, {"codecs", json::parse(kZstdCrc)}}}}});
  auto in_shards = Array::create(
      recording, "shards", test::array_doc(shape, {2, 3000, 2000}, "uint16", 0, sharded), false);
  in_shards->write(all, {reinterpret_cast<const std::byte*>(values.data()), values.size() * 2});
  std::fill(out.begin(), out.end(), 0);
  recording->largest_read = 0;
  in_shards->read(all, {reinterpret_cast<std::byte*>(out.data()), out.size() * 2}, small);
  EXPECT_EQ(out, values);
  EXPECT_LE(recording->largest_read.load(), std::size_t{2} << 20);

  // One byte of chunk 2 damaged: the read fails naming it, as a checksum mismatch.
  auto stored = recording->get("big/c/2/0/0", {});
  ASSERT_TRUE(stored.has_value());
  Bytes damaged = test::to_bytes(*stored);
  damaged[damaged.size() / 2] ^= std::byte{0x10};
  recording->set("big/c/2/0/0", damaged);
  try {
    array->read(all, {reinterpret_cast<std::byte*>(out.data()), out.size() * 2}, small);
    FAIL() << "a damaged chunk was read";
  } catch (const ChecksumError& e) {
    EXPECT_NE(std::string(e.what()).find("c/2/0/0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zarr_device
