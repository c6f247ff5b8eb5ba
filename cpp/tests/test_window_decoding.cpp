// Decoding stored chunks into windows of their decoded bytes (CodecChain::window_decoder): what a
// device read does with a chunk staged a part at a time. Every size of window and of the stored
// pieces it reads decodes to what the whole chunk decodes to, and fails where it fails, with the
// same kind of error: damaged bytes under a crc32c are a checksum mismatch, even where zstd trips
// over them first.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "decode_test_util.hpp"
#include "test_util.hpp"

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

// The same in windows of `window` bytes (the last shorter), the stored bytes read `piece` at a
// time.
Outcome in_windows(const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t window,
                   std::size_t piece) {
  try {
    auto decoder = chain.window_decoder(
        stored.size(),
        [&stored](std::uint64_t at, std::span<std::byte> into) {
          const std::size_t n =
              std::min<std::size_t>(into.size(), stored.size() - static_cast<std::size_t>(at));
          std::memcpy(into.data(), stored.data() + at, n);
          return n;
        },
        piece);
    for (std::size_t at = 0; at < out.size(); at += window) {
      decoder->fill({out.data() + at, std::min(window, out.size() - at)});
    }
    decoder->finish();
    return {};
  } catch (const Error& e) {
    return {false, e.kind(), e.what()};
  }
}

const std::vector<std::size_t> kWindows = {2, 4094, 65536, 1 << 20, std::size_t{4} << 20};
const std::vector<std::size_t> kPieces = {1, 7, 18, 19, 4096, 1 << 20};

TEST(WindowDecoding, EveryWindowAndPieceDecodesAsTheWholeChunkDoes) {
  const auto spec = make_spec({1500, 700}, "uint16");  // 2.1 MB
  const Bytes chunk = array_like(spec.nbytes(), 1);
  for (const char* codecs : {kZstd, kZstdCrc}) {
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    ASSERT_TRUE(
        chain.decodes_in_windows(test::full_selection(spec.shape),
                                 StridedView{nullptr, spec.shape, test::c_strides(spec.shape, 2)}));
    const Bytes stored = test::to_bytes(*chain.encode(chunk));
    for (const std::size_t window : kWindows) {
      for (const std::size_t piece : kPieces) {
        if (piece < 4096 && window < 4096) continue;  // (slow, and covered below)
        SCOPED_TRACE(testing::Message() << "window " << window << ", piece " << piece);
        Bytes out(chunk.size(), std::byte{0x5a});
        const Outcome o = in_windows(chain, stored, out, window, piece);
        ASSERT_TRUE(o.ok) << o.message;
        ASSERT_EQ(out, chunk);
      }
    }
  }
}

// Frames zstd itself writes: several in one chunk (an empty one, one without its size, one
// smaller than a frame header), their headers falling across pieces and windows anywhere.
TEST(WindowDecoding, SeveralFramesWithAndWithoutSizesCutAnywhere) {
  const auto spec = make_spec({40000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 2);
  const Bytes stored = test::several_frames(chunk);
  const CodecChain chain(json::parse(kZstd), spec);
  for (std::size_t piece = 1; piece <= 40; ++piece) {
    for (const std::size_t window : {std::size_t{1}, std::size_t{10}, std::size_t{9999}}) {
      Bytes out(chunk.size());
      const Outcome o = in_windows(chain, stored, out, window, piece);
      ASSERT_TRUE(o.ok) << "piece " << piece << ", window " << window << ": " << o.message;
      ASSERT_EQ(out, chunk) << "piece " << piece << ", window " << window;
    }
  }
}

TEST(WindowDecoding, ChunksOfTheWrongSizeFailAsWholeOnesDo) {
  const auto spec = make_spec({30000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 3);
  const CodecChain chain(json::parse(kZstd), spec);
  const Bytes stored = test::to_bytes(*chain.encode(chunk));
  for (const auto& other : {make_spec({30001}, "uint8"), make_spec({29999}, "uint8")}) {
    const CodecChain wrong(json::parse(kZstd), other);
    for (const std::size_t piece : kPieces) {
      Bytes out(other.nbytes());
      const Outcome o = in_windows(wrong, stored, out, 4096, piece);
      EXPECT_FALSE(o.ok);
      EXPECT_EQ(o.kind, ErrorKind::kCodec) << o.message;
    }
  }
  // Cut short: truncated, as the whole chunk is; and a frame that holds less than it declares,
  // followed by the rest (the total right): refused, as the whole chunk is.
  const Bytes cut_short(stored.begin(), stored.end() - 9);
  Bytes out(chunk.size());
  Outcome o = in_windows(chain, cut_short, out, 4096, 1000);
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.kind, ErrorKind::kCodec);
  Bytes first = test::zstd_frame(std::span(chunk).first(100), true, false);
  const Bytes rest = test::zstd_frame(std::span(chunk).subspan(100), true, false);
  // A single-segment frame of under 256 bytes stores its size in the byte after its descriptor:
  // make it declare 150.
  ASSERT_EQ(static_cast<unsigned>(first[4]) & 0xE0u, 0x20u);
  first[5] = std::byte{150};
  Bytes lying = first;
  lying.insert(lying.end(), rest.begin(), rest.end());
  Bytes reference(chunk.size());
  const Outcome w = whole(chain, lying, reference);
  EXPECT_FALSE(w.ok);
  EXPECT_EQ(w.kind, ErrorKind::kCodec);
  for (const std::size_t piece : {std::size_t{5}, std::size_t{4096}}) {
    o = in_windows(chain, lying, out, 77, piece);
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.kind, ErrorKind::kCodec) << o.message;
  }
  EXPECT_FALSE(in_windows(chain, Bytes{}, out, 4096, 1).ok);  // no data at all
}

// Damage anywhere in a chunk under a crc32c: a checksum mismatch, however the windows and pieces
// fall, with the whole chunk's message.
TEST(WindowDecoding, DamageUnderAChecksumIsAChecksumMismatch) {
  test::expect_damage_is_a_checksum_mismatch(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return in_windows(chain, stored, out, 65536, cut);
      },
      {4096, 1 << 20});
}

// Random damage without a checksum: windows and the whole decode agree on whether the chunk
// decodes, and on what it decodes to when it does.
TEST(WindowDecoding, RandomDamageWithoutAChecksumIsJudgedAlike) {
  // Windows and pieces of unrelated sizes.
  test::expect_random_damage_judged_alike(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return in_windows(chain, stored, out, cut, 1 + (cut * 7919) % 5000);
      },
      8000);
}

// What a decoder in windows keeps for a chunk: the window its first frame declares (from its
// descriptor, or its content for a single-segment frame), at most the chunk; the chunk where the
// bytes are no frame's start.
TEST(WindowDecoding, MemoryIsTheFramesWindow) {
  const auto frame_with_window = [](std::span<const std::byte> data, int window_log) {
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, window_log);
    Bytes out(ZSTD_compressBound(data.size()));
    const std::size_t n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
    ZSTD_freeCCtx(cctx);
    out.resize(n);
    return out;
  };
  const Bytes chunk = array_like(std::size_t{4} << 20, 9);
  const auto spec = make_spec({static_cast<std::int64_t>(chunk.size())}, "uint8");
  const CodecChain chain(json::parse(kZstdCrc), spec);
  const Bytes wide = frame_with_window(chunk, 20);
  EXPECT_EQ(chain.window_memory(wide), std::size_t{1} << 20);
  EXPECT_EQ(chain.window_memory(std::span(wide).first(6)), std::size_t{1} << 20);
  const Bytes widest = frame_with_window(chunk, 23);  // more than the chunk: the chunk
  EXPECT_EQ(chain.window_memory(widest), chunk.size());
  const auto small_spec = make_spec({100000}, "uint8");
  const CodecChain small(json::parse(kZstd), small_spec);
  const Bytes single = test::zstd_frame(std::span(chunk).first(100000), true, false);
  ASSERT_NE(static_cast<unsigned>(single[4]) & 0x20U, 0U);  // a single segment
  EXPECT_EQ(small.window_memory(single), 100000U);
  EXPECT_EQ(small.window_memory(std::span(single).first(3)), 100000U);  // too few bytes
  const Bytes garbage(64, std::byte{7});
  EXPECT_EQ(chain.window_memory(garbage), chunk.size());
  // What it decodes with is within that: a chunk in windows, 1 MiB of history.
  Bytes out(chunk.size());
  const Bytes stored = test::to_bytes(*chain.encode(chunk));
  EXPECT_LE(chain.window_memory(stored), chunk.size());
  ASSERT_TRUE(in_windows(chain, stored, out, 65536, 4096).ok);
  EXPECT_EQ(out, chunk);
}

TEST(WindowDecoding, OnlyWhereTheChunkDecompressesIntoPlace) {
  const auto spec = make_spec({100, 100}, "uint16");
  const StridedView whole_view{nullptr, spec.shape, test::c_strides(spec.shape, 2)};
  const auto all = test::full_selection(spec.shape);
  EXPECT_TRUE(CodecChain(json::parse(kZstdCrc), spec).decodes_in_windows(all, whole_view));
  std::vector<DimSlice> part = all;
  part[0].count = 50;
  const std::vector<std::int64_t> half_shape = {50, 100};
  const StridedView half{nullptr, half_shape, test::c_strides(half_shape, 2)};
  EXPECT_FALSE(CodecChain(json::parse(kZstd), spec).decodes_in_windows(part, half));
  const StridedView transposed{nullptr, spec.shape, {2, 200}};
  EXPECT_FALSE(CodecChain(json::parse(kZstd), spec).decodes_in_windows(all, transposed));
  for (const char* codecs :
       {R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd"}])",
        R"([{"name": "bytes"}, {"name": "gzip"}])", R"([{"name": "bytes"}, {"name": "crc32c"}])",
        R"([{"name": "bytes"}, {"name": "crc32c"}, {"name": "zstd"}])",
        R"([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"},
            {"name": "zstd"}])"}) {
    SCOPED_TRACE(codecs);
    EXPECT_FALSE(CodecChain(json::parse(codecs), spec).decodes_in_windows(all, whole_view));
  }
}

}  // namespace
}  // namespace zarr_device
