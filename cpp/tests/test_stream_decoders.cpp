// The stream decoders of single codecs (StreamDecoding::stream_decoder): zstd decompresses what
// it pulls into the windows it is given, straight into one window of the whole output; crc32c
// hands out the data it pulls where it lies and compares its checksum at the end. Pieces and
// windows of any size decode to what the whole decode gives; truncated input, trailing garbage
// and a checksum mismatch fail with the whole decode's kind of error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "codec_test_util.hpp"
#include "decode_test_util.hpp"
#include "test_util.hpp"

namespace zarr_device {
namespace {

using test::Bytes;
using test::json;

// A decoder's outcome: ok, or the error's kind and message.
test::Outcome outcome_of(const std::function<void()>& decode) {
  try {
    decode();
    return {};
  } catch (const Error& e) {
    return {false, e.kind(), e.what()};
  }
}

std::unique_ptr<StreamDecoder> decoder_of(const BytesToBytesCodec& codec, std::size_t decoded,
                                          const Bytes& encoded, std::vector<std::size_t> cut) {
  const StreamDecoding* stream = codec.stream_decoding();
  EXPECT_NE(stream, nullptr);
  return stream->stream_decoder(decoded, encoded.size(), test::pieces_of(encoded, std::move(cut)));
}

// Decodes `encoded` into `out` in windows of `window` bytes (the last shorter; 0: one of all).
test::Outcome in_windows(const BytesToBytesCodec& codec, const Bytes& encoded, Bytes& out,
                         std::size_t window, std::vector<std::size_t> cut) {
  return outcome_of([&] {
    auto decoder = decoder_of(codec, out.size(), encoded, std::move(cut));
    if (window == 0) window = std::max<std::size_t>(out.size(), 1);
    for (std::size_t at = 0; at < out.size(); at += window) {
      decoder->fill({out.data() + at, std::min(window, out.size() - at)});
    }
    decoder->finish();
  });
}

// Decodes `encoded` into `out` by taking what the decoder hands out, at most `most` at a time.
test::Outcome handed_out(const BytesToBytesCodec& codec, const Bytes& encoded, Bytes& out,
                         std::size_t most, std::vector<std::size_t> cut) {
  return outcome_of([&] {
    auto decoder = decoder_of(codec, out.size(), encoded, std::move(cut));
    std::size_t at = 0;
    for (auto got = decoder->next(most); !got.empty(); got = decoder->next(most)) {
      ASSERT_LE(got.size(), most);
      ASSERT_LE(at + got.size(), out.size());
      std::memcpy(out.data() + at, got.data(), got.size());
      at += got.size();
    }
    EXPECT_EQ(at, out.size());
    decoder->finish();
  });
}

const std::vector<std::size_t> kOdd = {0, 1, 7, 19, 4093, 65537};
const std::vector<std::vector<std::size_t>> kCuts = {{1}, {3, 17}, {13}, {4099}, {SIZE_MAX}};

TEST(StreamDecoders, ZstdDecodesAnyPiecesIntoAnyWindows) {
  const auto zstd = test::make("zstd", json{{"level", 3}});
  const Bytes data = test::array_like(300007, 11);
  const Bytes encoded = test::to_bytes(zstd->encode(test::to_buffer(data)));
  for (const std::size_t window : kOdd) {
    for (const auto& cut : kCuts) {
      if (cut.front() < 20 && window > 0 && window < 20) continue;  // (slow)
      SCOPED_TRACE(testing::Message() << "window " << window << ", piece " << cut.front());
      Bytes out(data.size(), std::byte{0x5a});
      const auto o = in_windows(*zstd, encoded, out, window, cut);
      ASSERT_TRUE(o.ok) << o.message;
      ASSERT_EQ(out, data);
      if (window == 0) continue;
      Bytes handed(data.size());
      const auto h = handed_out(*zstd, encoded, handed, window, cut);
      ASSERT_TRUE(h.ok) << h.message;
      ASSERT_EQ(handed, data);
    }
  }
  // Nothing to decode: an empty frame, with or without a window.
  const Bytes empty = test::zstd_frame({}, true, false);
  Bytes none;
  EXPECT_TRUE(in_windows(*zstd, empty, none, 0, {1}).ok);
  EXPECT_TRUE(outcome_of([&] { decoder_of(*zstd, 0, empty, {2})->finish(); }).ok);
}

TEST(StreamDecoders, ZstdRefusesWhatItsWholeDecodeRefuses) {
  const auto zstd = test::make("zstd");
  const Bytes data = test::array_like(50000, 12);
  const Bytes encoded = test::to_bytes(zstd->encode(test::to_buffer(data)));
  const auto whole = [&](const Bytes& stored, std::size_t size) {
    return outcome_of([&] { (void)zstd->decode(test::to_buffer(stored), size); });
  };
  Bytes garbage = encoded;
  garbage.insert(garbage.end(), {std::byte{0x28}, std::byte{0xb5}, std::byte{0x2f}});
  const Bytes cut_short(encoded.begin(), encoded.end() - 5);
  for (const Bytes* bad : std::initializer_list<const Bytes*>{&garbage, &cut_short}) {
    ASSERT_EQ(whole(*bad, data.size()).kind, ErrorKind::kCodec);
    for (const std::size_t window : kOdd) {
      for (const auto& cut : kCuts) {
        if (cut.front() < 20 && window > 0 && window < 20) continue;  // (slow)
        Bytes out(data.size());
        const auto o = in_windows(*zstd, *bad, out, window, cut);
        EXPECT_FALSE(o.ok);
        EXPECT_EQ(o.kind, ErrorKind::kCodec) << o.message;
      }
    }
  }
  for (const std::size_t size : {data.size() - 1, data.size() + 1}) {  // another size
    for (const std::size_t window : {std::size_t{0}, std::size_t{4096}}) {
      Bytes out(size);
      EXPECT_EQ(in_windows(*zstd, encoded, out, window, {1000}).kind, ErrorKind::kCodec);
    }
  }
  // A source that ends before the encoded size it was made with.
  const Bytes truncated(encoded.begin(), encoded.begin() + 100);
  const auto ended = outcome_of([&] {
    auto decoder = zstd->stream_decoding()->stream_decoder(data.size(), encoded.size(),
                                                           test::pieces_of(truncated, {64}));
    Bytes out(data.size());
    decoder->fill(out);
  });
  EXPECT_EQ(ended.kind, ErrorKind::kCodec);
  EXPECT_NE(ended.message.find("bytes early"), std::string::npos) << ended.message;
  // No data; finished before the last window; a window past the end.
  Bytes out(data.size());
  EXPECT_EQ(in_windows(*zstd, Bytes{}, out, 0, {1}).kind, ErrorKind::kCodec);
  EXPECT_EQ(outcome_of([&] {
              auto decoder = decoder_of(*zstd, data.size(), encoded, {4096});
              decoder->fill(std::span(out).first(100));
              decoder->finish();
            }).kind,
            ErrorKind::kCodec);
  EXPECT_EQ(outcome_of([&] {
              auto decoder = decoder_of(*zstd, data.size(), encoded, {4096});
              decoder->fill(std::span(out).first(100));
              Bytes more(data.size());
              decoder->fill(more);
            }).kind,
            ErrorKind::kCodec);
  // zstd's own content checksum, damaged: a checksum mismatch, in windows as whole.
  Bytes checked = test::zstd_frame(data, true, true);
  checked[checked.size() - 2] ^= std::byte{1};
  ASSERT_EQ(whole(checked, data.size()).kind, ErrorKind::kChecksum);
  for (const std::size_t window : {std::size_t{0}, std::size_t{4096}}) {
    EXPECT_EQ(in_windows(*zstd, checked, out, window, {1000}).kind, ErrorKind::kChecksum);
  }
}

TEST(StreamDecoders, Crc32cHandsOutItsDataWhereItLies) {
  const auto crc = test::make("crc32c", json::object());
  const Bytes data = test::random_bytes(100003, 13);
  const Bytes encoded = test::to_bytes(crc->encode(test::to_buffer(data)));
  EXPECT_EQ(crc->stream_decoding()->window_memory({}, data.size()), 0U);
  for (const auto& cut : kCuts) {
    for (const std::size_t window : kOdd) {
      SCOPED_TRACE(testing::Message() << "window " << window << ", piece " << cut.front());
      Bytes out(data.size());
      const auto o = in_windows(*crc, encoded, out, window, cut);
      ASSERT_TRUE(o.ok) << o.message;
      ASSERT_EQ(out, data);
      if (window == 0) continue;
      Bytes handed(data.size());
      const auto h = handed_out(*crc, encoded, handed, window, cut);
      ASSERT_TRUE(h.ok) << h.message;
      ASSERT_EQ(handed, data);
    }
  }
  // What it hands out is the source's own bytes, not a copy.
  std::vector<std::pair<const std::byte*, std::size_t>> pulled;
  auto source = test::pieces_of(encoded, {4096});
  auto decoder = crc->stream_decoding()->stream_decoder(
      data.size(), encoded.size(), [&]() -> std::span<const std::byte> {
        const auto piece = source();
        pulled.emplace_back(piece.data(), piece.size());
        return piece;
      });
  for (auto got = decoder->next(SIZE_MAX); !got.empty(); got = decoder->next(SIZE_MAX)) {
    EXPECT_GE(got.data(), pulled.back().first);
    EXPECT_LE(got.data() + got.size(), pulled.back().first + pulled.back().second);
  }
  decoder->finish();
}

TEST(StreamDecoders, Crc32cRefusesWhatItsWholeDecodeRefuses) {
  const auto crc = test::make("crc32c", json::object());
  const Bytes data = test::random_bytes(20000, 14);
  const Bytes encoded = test::to_bytes(crc->encode(test::to_buffer(data)));
  const auto whole = [&](const Bytes& stored) {
    return outcome_of([&] { (void)crc->decode(test::to_buffer(stored), std::nullopt); });
  };
  // Damage in the data or the checksum, and bytes after it: a mismatch, with the whole message.
  Bytes damaged = encoded;
  damaged[777] ^= std::byte{4};
  Bytes wrong_sum = encoded;
  wrong_sum.back() ^= std::byte{1};
  Bytes garbage = encoded;
  garbage.insert(garbage.end(), {std::byte{1}, std::byte{2}});
  for (const Bytes* bad : {&damaged, &wrong_sum, &garbage}) {
    const auto w = whole(*bad);
    ASSERT_EQ(w.kind, ErrorKind::kChecksum) << w.message;
    for (const auto& cut : kCuts) {
      for (const std::size_t window : kOdd) {
        Bytes out(bad->size() - 4);
        const auto o = in_windows(*crc, *bad, out, window, cut);
        EXPECT_EQ(o.kind, ErrorKind::kChecksum) << o.message;
        EXPECT_EQ(o.message, w.message);
      }
    }
  }
  // A source that ends early, in the data or in the checksum.
  for (const std::size_t keep : {std::size_t{100}, encoded.size() - 2}) {
    const Bytes truncated(encoded.begin(), encoded.begin() + static_cast<std::ptrdiff_t>(keep));
    const auto o = outcome_of([&] {
      auto decoder = crc->stream_decoding()->stream_decoder(data.size(), encoded.size(),
                                                            test::pieces_of(truncated, {64}));
      Bytes out(data.size());
      decoder->fill(out);
      decoder->finish();
    });
    EXPECT_EQ(o.kind, ErrorKind::kCodec);
    EXPECT_NE(o.message.find("crc32c: data is " + std::to_string(keep) + " bytes, expected " +
                             std::to_string(encoded.size())),
              std::string::npos)
        << o.message;
  }
  // Shorter than a checksum, another size than said, finished early: refused as such.
  const Bytes three(3, std::byte{0});
  Bytes none;
  EXPECT_EQ(whole(three).kind, ErrorKind::kCodec);
  EXPECT_EQ(in_windows(*crc, three, none, 0, {1}).kind, ErrorKind::kCodec);
  Bytes other(data.size() + 1);
  EXPECT_EQ(in_windows(*crc, encoded, other, 0, {64}).kind, ErrorKind::kCodec);
  EXPECT_EQ(outcome_of([&] {
              auto decoder = decoder_of(*crc, data.size(), encoded, {64});
              Bytes out(10);
              decoder->fill(out);
              decoder->finish();
            }).kind,
            ErrorKind::kCodec);
}

}  // namespace
}  // namespace zarr_device
