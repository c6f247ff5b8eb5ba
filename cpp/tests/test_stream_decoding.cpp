// Decoding stored chunks as a stream (CodecChain::stream_decoder): what a host read does with a
// chunk of tens of MiB (one window of the whole chunk, straight into place), so that it holds a
// piece of it, not all of it, and what a device read does with a chunk staged a part at a time
// (windows of its decoded bytes). Every size of window and of the stored pieces the decoder pulls
// decodes to what the whole chunk decodes to, and fails where it fails, with the same kind of
// error: damaged bytes under a crc32c are a checksum mismatch, even where zstd trips over them
// first.
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

// A window of the whole chunk, where stream_target puts it.
constexpr std::size_t kWhole = 0;

// The stored chunk decoded through the chain's stream decoder into `out`, in windows of `window`
// bytes (the last shorter), its bytes pulled in pieces of the sizes `cut` gives in turn.
Outcome streamed(const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t window,
                 const std::vector<std::size_t>& cut) {
  const auto& spec = chain.spec();
  try {
    auto decoder = chain.stream_decoder(stored.size(), test::pieces_of(stored, cut));
    if (!decoder) return {false, ErrorKind::kUsage, "no stream decoder"};
    if (window == kWhole) {
      const auto target = chain.stream_target(
          test::full_selection(spec.shape),
          StridedView{out.data(), spec.shape, test::c_strides(spec.shape, spec.dtype->size)});
      if (!target) return {false, ErrorKind::kUsage, "not into place"};
      EXPECT_EQ(target->data(), out.data());
      EXPECT_EQ(target->size(), out.size());
      decoder->fill(*target);
    } else {
      for (std::size_t at = 0; at < out.size(); at += window) {
        decoder->fill({out.data() + at, std::min(window, out.size() - at)});
      }
    }
    decoder->finish();
    return {};
  } catch (const Error& e) {
    return {false, e.kind(), e.what()};
  }
}

const std::vector<std::size_t> kWindows = {kWhole, 2, 4094, 65536, 1 << 20, std::size_t{4} << 20};
const std::vector<std::vector<std::size_t>> kCuts = {
    {1}, {3, 17}, {7}, {18}, {19, 1}, {4096}, {65536, 5}, {1 << 20}, {SIZE_MAX}};

TEST(StreamDecoding, EveryWindowAndPieceDecodesAsTheWholeChunkDoes) {
  const auto spec = make_spec({1500, 700}, "uint16");  // 2.1 MB
  const Bytes chunk = array_like(spec.nbytes(), 1);
  for (const char* codecs : {kZstd, kZstdCrc}) {
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    ASSERT_TRUE(chain.decodes_as_stream());
    const Bytes stored = test::to_bytes(*chain.encode(chunk));
    ASSERT_LT(stored.size(), chunk.size() / 2);
    for (const std::size_t window : kWindows) {
      for (const auto& cut : kCuts) {
        if (cut.front() < 4096 && window != kWhole && window < 4096) continue;  // (slow)
        SCOPED_TRACE(testing::Message() << "window " << window << ", piece " << cut.front());
        Bytes out(chunk.size(), std::byte{0x5a});
        const Outcome o = streamed(chain, stored, out, window, cut);
        ASSERT_TRUE(o.ok) << o.message;
        ASSERT_EQ(out, chunk);
      }
    }
  }
}

// Frames zstd itself writes: several in one chunk (an empty one, one without its size, one
// smaller than a frame header), their headers falling across pieces and windows anywhere.
TEST(StreamDecoding, SeveralFramesWithAndWithoutSizesCutAnywhere) {
  const auto spec = make_spec({40000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 2);
  const Bytes stored = test::several_frames(chunk);
  const CodecChain chain(json::parse(kZstd), spec);
  Bytes reference(chunk.size());
  ASSERT_TRUE(whole(chain, stored, reference).ok);
  ASSERT_EQ(reference, chunk);
  for (std::size_t piece = 1; piece <= 40; ++piece) {
    for (const std::size_t window : {kWhole, std::size_t{1}, std::size_t{10}, std::size_t{9999}}) {
      Bytes out(chunk.size());
      const Outcome o = streamed(chain, stored, out, window, {piece});
      ASSERT_TRUE(o.ok) << "piece " << piece << ", window " << window << ": " << o.message;
      ASSERT_EQ(out, chunk) << "piece " << piece << ", window " << window;
    }
  }
}

TEST(StreamDecoding, ChunksOfTheWrongSizeFailAsWholeOnesDo) {
  const auto spec = make_spec({30000}, "uint8");
  const Bytes chunk = array_like(spec.nbytes(), 3);
  const CodecChain chain(json::parse(kZstd), spec);
  const Bytes stored = test::to_bytes(*chain.encode(chunk));
  for (const auto& other : {make_spec({30001}, "uint8"), make_spec({29999}, "uint8")}) {
    const CodecChain wrong(json::parse(kZstd), other);
    for (const std::size_t window : {kWhole, std::size_t{4096}}) {
      for (const auto& cut : kCuts) {
        Bytes out(other.nbytes());
        const Outcome o = streamed(wrong, stored, out, window, cut);
        EXPECT_FALSE(o.ok);
        EXPECT_EQ(o.kind, ErrorKind::kCodec) << o.message;
      }
    }
  }
  // Cut short: truncated, as the whole chunk is; with trailing garbage: refused, as the whole
  // chunk is; and a frame that holds less than it declares, followed by the rest (the total
  // right): refused, as the whole chunk is.
  const Bytes cut_short(stored.begin(), stored.end() - 9);
  Bytes garbage = stored;
  garbage.insert(garbage.end(), {std::byte{1}, std::byte{2}, std::byte{3}});
  Bytes first = test::zstd_frame(std::span(chunk).first(100), true, false);
  const Bytes rest = test::zstd_frame(std::span(chunk).subspan(100), true, false);
  // A single-segment frame of under 256 bytes stores its size in the byte after its descriptor:
  // make it declare 150.
  ASSERT_EQ(static_cast<unsigned>(first[4]) & 0xE0u, 0x20u);
  first[5] = std::byte{150};
  Bytes lying = first;
  lying.insert(lying.end(), rest.begin(), rest.end());
  for (const Bytes* bad : std::initializer_list<const Bytes*>{&cut_short, &garbage, &lying}) {
    Bytes reference(chunk.size());
    const Outcome w = whole(chain, *bad, reference);
    EXPECT_FALSE(w.ok);
    EXPECT_EQ(w.kind, ErrorKind::kCodec);
    for (const std::size_t window : {kWhole, std::size_t{77}, std::size_t{4096}}) {
      for (const std::size_t piece : {std::size_t{5}, std::size_t{1000}}) {
        Bytes out(chunk.size());
        const Outcome o = streamed(chain, *bad, out, window, {piece});
        EXPECT_FALSE(o.ok);
        EXPECT_EQ(o.kind, ErrorKind::kCodec) << o.message;
      }
    }
  }
  Bytes out(chunk.size());
  const Outcome o = streamed(chain, cut_short, out, kWhole, {1000});
  EXPECT_NE(o.message.find("truncated"), std::string::npos) << o.message;
  EXPECT_FALSE(streamed(chain, Bytes{}, out, kWhole, {1}).ok);  // no data at all
  EXPECT_FALSE(streamed(chain, Bytes{}, out, 4096, {1}).ok);
}

// Damage anywhere in a chunk under a crc32c: a checksum mismatch with the whole decode's message,
// however the windows and pieces fall, as when the chunk is verified whole before zstd sees it.
TEST(StreamDecoding, DamageUnderAChecksumIsAChecksumMismatch) {
  test::expect_damage_is_a_checksum_mismatch(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return streamed(chain, stored, out, kWhole, {cut});
      },
      {4096, 1 << 20});
  test::expect_damage_is_a_checksum_mismatch(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return streamed(chain, stored, out, 65536, {cut});
      },
      {4096, 1 << 20});
  // Bytes after the checksum: the checksum is read where the stored bytes end, as whole.
  const auto spec = make_spec({600, 500}, "uint16");
  const CodecChain chain(json::parse(kZstdCrc), spec);
  Bytes stored = test::to_bytes(*chain.encode(array_like(spec.nbytes(), 4)));
  stored.insert(stored.end(), 5, std::byte{0});
  Bytes out(spec.nbytes());
  const Outcome w = whole(chain, stored, out);
  ASSERT_EQ(w.kind, ErrorKind::kChecksum) << w.message;
  for (const std::size_t window : {kWhole, std::size_t{65536}}) {
    const Outcome o = streamed(chain, stored, out, window, {4096});
    EXPECT_EQ(o.kind, ErrorKind::kChecksum) << o.message;
    EXPECT_EQ(o.message, w.message);
  }
}

// Random damage without a checksum: the stream and the whole decode agree on whether the chunk
// decodes, and on what it decodes to when it does.
TEST(StreamDecoding, RandomDamageWithoutAChecksumIsJudgedAlike) {
  test::expect_random_damage_judged_alike(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return streamed(chain, stored, out, kWhole, {cut});
      },
      5000);
  // Windows and pieces of unrelated sizes.
  test::expect_random_damage_judged_alike(
      [](const CodecChain& chain, const Bytes& stored, Bytes& out, std::size_t cut) {
        return streamed(chain, stored, out, cut, {1 + (cut * 7919) % 5000});
      },
      8000);
}

// What a stream decoder keeps for a chunk in windows smaller than it: the window its first frame
// declares (from its descriptor, or its content for a single-segment frame), at most the chunk; the
// chunk where the bytes are no frame's start.
TEST(StreamDecoding, MemoryIsTheFramesWindow) {
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
  ASSERT_TRUE(streamed(chain, stored, out, 65536, {4096}).ok);
  EXPECT_EQ(out, chunk);
}

TEST(StreamDecoding, OnlyWhereTheChunkDecompressesIntoPlace) {
  const auto spec = make_spec({100, 100}, "uint16");
  Bytes out(spec.nbytes());
  const StridedView whole_view{out.data(), spec.shape, test::c_strides(spec.shape, 2)};
  const auto all = test::full_selection(spec.shape);
  const CodecChain zstd_crc(json::parse(kZstdCrc), spec);
  EXPECT_TRUE(zstd_crc.decodes_as_stream());
  EXPECT_TRUE(zstd_crc.stream_target(all, whole_view).has_value());
  // Part of the chunk, a strided destination: decoded whole, or a window at a time.
  std::vector<DimSlice> part = all;
  part[0].count = 50;
  const std::vector<std::int64_t> half_shape = {50, 100};
  const StridedView half{out.data(), half_shape, test::c_strides(half_shape, 2)};
  const CodecChain zstd(json::parse(kZstd), spec);
  EXPECT_FALSE(zstd.stream_target(part, half).has_value());
  const StridedView transposed{out.data(), spec.shape, {2, 200}};
  EXPECT_FALSE(zstd.stream_target(all, transposed).has_value());
  // Big-endian elements, a codec that does not decode as a stream, checksums alone (stored
  // elements), a checksum before the compressor, a transpose: the whole chunk's way.
  for (const char* codecs :
       {R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "zstd"}])",
        R"([{"name": "bytes"}, {"name": "gzip"}])", R"([{"name": "bytes"}, {"name": "crc32c"}])",
        R"([{"name": "bytes"}, {"name": "crc32c"}, {"name": "zstd"}])",
        R"([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"},
            {"name": "zstd"}])"}) {
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    EXPECT_FALSE(chain.decodes_as_stream());
    EXPECT_FALSE(chain.stream_target(all, whole_view).has_value());
  }
  // A transpose whose destination is laid out as the chunk is stored: straight into place.
  const CodecChain swapped(
      json::parse(R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
      {"name": "bytes"}, {"name": "zstd"}])"),
      spec);
  const auto target = swapped.stream_target(all, transposed);
  ASSERT_TRUE(target.has_value());
  EXPECT_EQ(target->data(), out.data());
  EXPECT_EQ(target->size(), out.size());
}

// A host read of chunks of more than 8 MiB stored reads each in pieces and decodes it into place,
// with a budget smaller than one chunk; damage in one is a checksum error naming its key.
TEST(StreamDecoding, HostReadsOfLargeChunksReadThemInPieces) {
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
