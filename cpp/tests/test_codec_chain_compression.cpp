// Tests of the codec chain through bytes->bytes codecs: round trips, encoding that reads the chunk
// in place and leaves a checksum apart, decompression straight into the destination, what a
// decode leases, and the bounds on each codec's output.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <vector>

#include "codec_chain_test_util.hpp"
#include "codecs/codec_chain.hpp"
#include "test_util.hpp"

namespace zarr_device {
namespace {

using codecs::CodecChain;
using test::Bytes;
using test::json;
using test::make_spec;

TEST(CodecChain, RoundTripsThroughBytesToBytesCodecs) {
  const json chains[] = {
      json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])"),
      json::parse(R"([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}])"),
      json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}},
                      {"name": "zstd", "configuration": {"level": 1}}, {"name": "crc32c"}])"),
      json::parse(R"([{"name": "transpose", "configuration": {"order": [1, 0, 2]}},
                      {"name": "bytes"}, {"name": "gzip"}, {"name": "crc32c"}])"),
      json::parse(R"([{"name": "transpose", "configuration": {"order": [2, 1, 0]}},
                      {"name": "bytes", "configuration": {"endian": "big"}},
                      {"name": "crc32c"}])"),
  };
  std::mt19937 rng(21);
  const std::vector<std::int64_t> shape = {6, 5, 4};
  for (const auto& codecs : chains) {
    for (const char* type : {"int16", "float64", "complex64"}) {
      SCOPED_TRACE(codecs.dump() + " " + type);
      const auto spec = make_spec(shape, type);
      const CodecChain chain(codecs, spec);
      // Compressible data: small values.
      Bytes logical(spec.nbytes());
      for (std::size_t i = 0; i < logical.size(); ++i) {
        logical[i] = static_cast<std::byte>(i % 3 == 0 ? rng() % 4 : 0);
      }
      const auto encoded = chain.encode(logical);
      ASSERT_TRUE(encoded.has_value());
      const Bytes stored = test::to_bytes(*encoded);
      ASSERT_EQ(decode_selection(chain, stored, test::full_selection(shape)), logical);
      ASSERT_EQ(decode_selection(chain, stored, test::full_selection(shape), true), logical);
      for (int i = 0; i < 10; ++i) {
        const auto sel = test::random_selection(rng, shape);
        ASSERT_EQ(decode_selection(chain, stored, sel),
                  test::naive_select(logical, shape, sel, spec.dtype->size))
            << test::describe(sel);
      }
    }
  }
}

// A bytes->bytes codec that stores its input unchanged and records how it was asked to decode.
struct Recording {
  std::atomic<int> decode_calls{0};
  std::atomic<int> decode_into_calls{0};
  std::atomic<const std::byte*> decode_into_target{nullptr};
  std::atomic<std::size_t> decode_into_size{0};
  std::atomic<std::size_t> last_decoded_size_hint{0};
  std::atomic<std::size_t> last_decoded_bound{0};
  void reset() {
    decode_calls = 0;
    decode_into_calls = 0;
    decode_into_target = nullptr;
    decode_into_size = 0;
    last_decoded_size_hint = 0;
    last_decoded_bound = 0;
  }
};
Recording recording;

class RecordingCodec final : public BytesToBytesCodec {
 public:
  std::string_view name() const override { return "test.recording"; }
  json to_json() const override { return {{"name", "test.recording"}}; }
  Buffer decode(const Buffer& encoded, DecodedSize size) const override {
    ++recording.decode_calls;
    recording.last_decoded_size_hint = size.exact.value_or(0);
    recording.last_decoded_bound = size.at_most;
    return encoded;
  }
  void decode_into(const Buffer& encoded, std::span<std::byte> out) const override {
    ++recording.decode_into_calls;
    recording.decode_into_target = out.data();
    recording.decode_into_size = out.size();
    if (encoded.size() != out.size()) throw CodecError("test.recording: wrong size");
    std::memcpy(out.data(), encoded.data(), out.size());
  }
  Buffer encode(const Buffer& decoded) const override { return decoded; }
};

void register_recording_codec() {
  static const bool once = [] {
    CodecRegistry::instance().add("test.recording", [](const json&, const CodecContext&) {
      return std::make_shared<RecordingCodec>();
    });
    return true;
  }();
  (void)once;
}

// A little-endian "bytes" layout hands the chunk itself to the first compressor, so encoding
// holds no copy of it; what encode returns is never the caller's memory, even from a codec that
// returns its input as it was. encode_memory counts what encoding holds.
TEST(CodecChain, EncodeReadsTheChunkInPlaceAndReturnsMemoryOfItsOwn) {
  register_recording_codec();
  const std::vector<std::int64_t> shape = {4, 6};
  const auto spec = make_spec(shape, "float32");
  const std::size_t n = spec.nbytes();
  const Bytes logical = test::random_bytes(n, 5);
  for (const char* codecs : {R"([{"name": "bytes"}, {"name": "test.recording"}])",
                             R"([{"name": "bytes"}, {"name": "crc32c"}])",
                             R"([{"name": "bytes"}, {"name": "zstd"}, {"name": "crc32c"}])",
                             R"([{"name": "bytes", "configuration": {"endian": "big"}},
                                 {"name": "test.recording"}])",
                             R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
                                 {"name": "bytes"}, {"name": "test.recording"}])"}) {
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    Bytes chunk = logical;
    const auto encoded = chain.encode(chunk);
    ASSERT_TRUE(encoded.has_value());
    EXPECT_FALSE(encoded->data() >= chunk.data() && encoded->data() < chunk.data() + n);
    const Bytes stored = test::to_bytes(*encoded);
    std::fill(chunk.begin(), chunk.end(), std::byte{0x5a});  // the caller reuses its memory
    EXPECT_EQ(test::to_bytes(*encoded), stored);
    EXPECT_EQ(decode_selection(chain, stored, test::full_selection(shape)), logical);
  }
  const auto memory = [&](const char* codecs) {
    return CodecChain(json::parse(codecs), spec).encode_memory();
  };
  // What encode_pieces holds: nothing for the elements where they are, the checksum alone for a
  // crc32c that follows them, a copy for a layout that changes the bytes or an array->array step.
  EXPECT_EQ(memory(R"([{"name": "bytes"}])"), 0);
  EXPECT_EQ(memory(R"([{"name": "bytes"}, {"name": "crc32c"}])"), 4);
  EXPECT_EQ(
      memory(R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}])"),
      n + 4);
  EXPECT_EQ(memory(R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
                       {"name": "bytes"}, {"name": "crc32c"}])"),
            n + 4);
  const CodecChain zstd(json::parse(R"([{"name": "bytes"}, {"name": "zstd"}, {"name": "crc32c"}])"),
                        spec);
  EXPECT_LT(zstd.encode_memory(), zstd.decode_memory());
  // The compressed chunk at its bound and the checksum beside it, not a copy of both.
  EXPECT_EQ(zstd.encode_memory(), zstd.max_stored_size());
}

// A chunk's stored value as pieces: a checksum apart from what it follows (no copy to append
// it), the elements where they are for a little-endian layout; joined, they are what encode()
// gives. Pieces that view a chunk of its own memory keep it alive.
TEST(CodecChain, EncodePiecesLeaveAChecksumApartAndTheElementsWhereTheyAre) {
  const std::vector<std::int64_t> shape = {4, 6};
  const auto spec = make_spec(shape, "float32");
  const std::size_t n = spec.nbytes();
  const Bytes logical = test::random_bytes(n, 9);
  struct Case {
    const char* codecs;
    std::size_t pieces;
    bool first_views_chunk;
  };
  for (const auto& [codecs, count, views] :
       {Case{R"([{"name": "bytes"}])", 1, true},
        Case{R"([{"name": "bytes"}, {"name": "crc32c"}])", 2, true},
        Case{R"([{"name": "bytes"}, {"name": "zstd"}, {"name": "crc32c"}])", 2, false},
        Case{R"([{"name": "bytes"}, {"name": "zstd"}])", 1, false},
        Case{R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "crc32c"}])", 2,
             false},
        Case{R"([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"},
                 {"name": "crc32c"}])",
             2, false}}) {
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    const Bytes whole = test::to_bytes(*chain.encode(logical));
    const auto pieces = chain.encode_pieces(Buffer({}, logical.data(), logical.size()));
    ASSERT_TRUE(pieces.has_value());
    ASSERT_EQ(pieces->size(), count);
    EXPECT_EQ(pieces->front().data() == logical.data(), views);
    if (count == 2) EXPECT_EQ(pieces->back().size(), 4U);
    Bytes joined;
    for (const auto& piece : *pieces) {
      joined.insert(joined.end(), piece.span().begin(), piece.span().end());
    }
    EXPECT_EQ(joined, whole);
    EXPECT_EQ(decode_selection(chain, joined, test::full_selection(shape)), logical);
    // A chunk that owns its memory: the pieces hold it after the caller lets it go.
    std::optional<std::vector<Buffer>> held;
    {
      const Buffer owned = Buffer::copy_of(logical);
      held = chain.encode_pieces(owned);
    }
    Bytes again;
    for (const auto& piece : *held)
      again.insert(again.end(), piece.span().begin(), piece.span().end());
    EXPECT_EQ(again, whole);
  }
}

TEST(CodecChain, DirectPathDecompressesStraightIntoDestination) {
  register_recording_codec();
  const std::vector<std::int64_t> shape = {4, 6};
  const auto spec = make_spec(shape, "float32");
  const Bytes logical = test::random_bytes(spec.nbytes(), 3);
  {
    const CodecChain chain(json::parse(R"([{"name": "bytes"}, {"name": "test.recording"}])"), spec);
    EXPECT_FALSE(chain.is_plain());
    // Whole chunk into a C-contiguous destination: one decode_into, into the destination itself.
    recording.reset();
    Bytes out(spec.nbytes());
    chain.decode_into(Buffer::copy_of(logical), test::full_selection(shape),
                      test::c_view(out, shape, 4));
    EXPECT_EQ(out, logical);
    EXPECT_EQ(recording.decode_into_calls, 1);
    EXPECT_EQ(recording.decode_calls, 0);
    EXPECT_EQ(recording.decode_into_target, out.data());
    EXPECT_EQ(recording.decode_into_size, spec.nbytes());

    // Part of the chunk: decoded to a buffer (told the exact size), then placed.
    recording.reset();
    const std::vector<DimSlice> part = {{1, 2, 2}, {0, 1, 6}};
    EXPECT_EQ(decode_selection(chain, logical, part), test::naive_select(logical, shape, part, 4));
    EXPECT_EQ(recording.decode_into_calls, 0);
    EXPECT_EQ(recording.decode_calls, 1);
    EXPECT_EQ(recording.last_decoded_size_hint, spec.nbytes());

    // Whole chunk into a destination with gaps: not contiguous, so no direct path.
    recording.reset();
    EXPECT_EQ(decode_selection(chain, logical, test::full_selection(shape), true), logical);
    EXPECT_EQ(recording.decode_into_calls, 0);
    EXPECT_EQ(recording.decode_calls, 1);
  }
  {
    // Two bytes->bytes codecs: the outer one decodes to a buffer, the inner one into place.
    const CodecChain chain(
        json::parse(R"([{"name": "bytes"}, {"name": "test.recording"}, {"name": "crc32c"}])"),
        spec);
    const Bytes stored = test::to_bytes(*chain.encode(logical));
    EXPECT_EQ(stored.size(), logical.size() + 4);
    recording.reset();
    Bytes out(spec.nbytes());
    chain.decode_into(Buffer::copy_of(stored), test::full_selection(shape),
                      test::c_view(out, shape, 4));
    EXPECT_EQ(out, logical);
    EXPECT_EQ(recording.decode_into_calls, 1);
    EXPECT_EQ(recording.decode_into_target, out.data());
  }
  for (const char* codecs :
       {R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "test.recording"}])",
        R"([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"},
            {"name": "test.recording"}])"}) {
    // Not laid out as the destination wants: never direct, and still right.
    SCOPED_TRACE(codecs);
    const CodecChain chain(json::parse(codecs), spec);
    const Bytes stored = test::to_bytes(*chain.encode(logical));
    recording.reset();
    EXPECT_EQ(decode_selection(chain, stored, test::full_selection(shape)), logical);
    EXPECT_EQ(recording.decode_into_calls, 0);
    EXPECT_EQ(recording.decode_calls, 1);
  }
}

// Encodes `payload` with a standalone bytes->bytes codec.
Bytes encode_with(const char* name, const Bytes& payload) {
  CodecContext context;
  context.chunk = make_spec({static_cast<std::int64_t>(payload.size())}, "uint8");
  auto codec = std::dynamic_pointer_cast<BytesToBytesCodec>(
      CodecRegistry::instance().create(name, json::object(), context));
  return test::to_bytes(codec->encode(Buffer::copy_of(payload)));
}

// What a read leases for a decode beside the stored bytes follows what decode_into does: nothing
// for a chunk decompressed straight into place or for a checksum's step, a bound for each buffer
// made.
TEST(CodecChain, DecodeScratchCountsTheBuffersADecodeMakes) {
  register_recording_codec();
  const std::vector<std::int64_t> shape = {16};
  const auto spec = make_spec(shape, "uint8");
  const Bytes logical = test::random_bytes(spec.nbytes(), 5);
  const auto full = test::full_selection(shape);
  const std::vector<DimSlice> part = {{0, 2, 8}};
  Bytes out(spec.nbytes());
  std::vector<std::byte> wide(2 * spec.nbytes());
  const StridedView into{out.data(), shape, {1}};
  const StridedView gapped{wide.data(), shape, {2}};
  const StridedView into_part{out.data(), {8}, {1}};
  {
    // One compressor: the decoded chunk's buffer, unless it decodes into place.
    const CodecChain chain(json::parse(R"([{"name": "bytes"}, {"name": "test.recording"}])"), spec);
    const Buffer stored = Buffer::copy_of(logical);
    for (const auto& [selection, view] :
         {std::pair{full, into}, std::pair{full, gapped}, std::pair{part, into_part}}) {
      recording.reset();
      chain.decode_into(stored, selection, view);
      const bool into_place = recording.decode_into_calls == 1;
      EXPECT_EQ(chain.decode_scratch(selection, view), into_place ? 0u : spec.nbytes());
    }
    EXPECT_EQ(chain.decode_scratch(full, into), 0u);
  }
  {
    // A checksum outside it: a view of the stored bytes, no buffer of its own.
    const CodecChain chain(
        json::parse(R"([{"name": "bytes"}, {"name": "test.recording"}, {"name": "crc32c"}])"),
        spec);
    EXPECT_EQ(chain.decode_scratch(full, into), 0u);
    EXPECT_EQ(chain.decode_scratch(full, gapped), spec.nbytes());
    EXPECT_EQ(chain.decode_scratch(part, into_part), spec.nbytes());
  }
  {
    // Two compressors: the outer one's output at its bound (16 + 16/8 + 1024), always.
    const CodecChain chain(
        json::parse(
            R"([{"name": "bytes"}, {"name": "test.recording"}, {"name": "test.recording"}])"),
        spec);
    EXPECT_EQ(chain.decode_scratch(full, into), 1042u);
    EXPECT_EQ(chain.decode_scratch(part, into_part), 16u + 1042u);
    EXPECT_EQ(chain.decode_memory(), 16u + 1042u + 2196u);  // the bound whatever the destination
  }
  {
    // No bytes->bytes codec: the array->bytes codec reads the stored bytes themselves.
    const CodecChain chain(json::parse(R"([{"name": "bytes"}])"), spec);
    EXPECT_EQ(chain.decode_scratch(part, into_part), 0u);
  }
}

TEST(CodecChain, WrongDecodedSizeRaisesCodecError) {
  register_recording_codec();
  const std::vector<std::int64_t> shape = {4, 4};
  const auto spec = make_spec(shape, "int32");
  const auto full = test::full_selection(shape);
  const std::vector<DimSlice> part = {{1, 1, 2}, {0, 2, 2}};
  for (std::size_t size : {std::size_t{0}, spec.nbytes() - 4, spec.nbytes() - 1, spec.nbytes() + 1,
                           spec.nbytes() + 64}) {
    SCOPED_TRACE(size);
    const Bytes payload = test::random_bytes(size, static_cast<std::uint32_t>(size));
    const std::pair<const char*, Bytes> cases[] = {
        {R"([{"name": "bytes"}])", payload},
        {R"([{"name": "bytes", "configuration": {"endian": "big"}}])", payload},
        {R"([{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes"}])",
         payload},
        {R"([{"name": "bytes"}, {"name": "crc32c"}])", encode_with("crc32c", payload)},
        {R"([{"name": "bytes"}, {"name": "gzip"}])", encode_with("gzip", payload)},
        {R"([{"name": "bytes"}, {"name": "zstd"}])", encode_with("zstd", payload)},
        {R"([{"name": "bytes"}, {"name": "test.recording"}])", payload},
        {R"([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip"}])",
         encode_with("gzip", payload)},
    };
    for (const auto& [codecs, stored] : cases) {
      SCOPED_TRACE(codecs);
      const CodecChain chain(json::parse(codecs), spec);
      EXPECT_THROW(decode_selection(chain, stored, full), CodecError);
      EXPECT_THROW(decode_selection(chain, stored, part), CodecError);
      EXPECT_THROW(decode_selection(chain, stored, full, true), CodecError);
    }
  }
}

// Stacked compressors: each one's output is bounded by what a valid encoding of the chunk can
// be, so a small stored chunk cannot expand into gigabytes on its way down the chain.
TEST(CodecChain, EveryCodecsOutputIsBoundedByTheChunk) {
  register_recording_codec();
  const auto spec = make_spec({16}, "uint8");
  {
    const CodecChain chain(
        json::parse(
            R"([{"name": "bytes"}, {"name": "test.recording"}, {"name": "test.recording"}])"),
        spec);
    // 16 bytes, then at most 16 + 16/8 + 1024 = 1042 after one codec, 1042 + 130 + 1024 after two.
    EXPECT_EQ(chain.max_stored_size(), 2196u);
    recording.reset();
    const std::vector<DimSlice> part = {{0, 2, 8}};
    EXPECT_THROW(decode_selection(chain, test::random_bytes(40, 1), part), CodecError);
    EXPECT_EQ(recording.decode_calls, 2);
    EXPECT_EQ(recording.last_decoded_bound, 16u);  // the inner one is told the exact size
    EXPECT_EQ(chain.decode_memory(), 16u + 1042u + 2196u);
  }
  // A zstd frame holding a 64 MiB gzip stream of zeros, as one 16-byte chunk's bytes.
  const Bytes bomb = encode_with("zstd", encode_with("gzip", Bytes(std::size_t{64} << 20)));
  ASSERT_LT(bomb.size(), std::size_t{1} << 20);
  const CodecChain chain(json::parse(R"([{"name": "bytes"}, {"name": "gzip"}, {"name": "zstd"}])"),
                         spec);
  const std::vector<std::int64_t> shape = {16};
  for (const auto& selection : {test::full_selection(shape), std::vector<DimSlice>{{1, 3, 5}}}) {
    try {
      (void)decode_selection(chain, bomb, selection);
      ADD_FAILURE() << "the bomb decoded";
    } catch (const CodecError& e) {
      EXPECT_NE(std::string(e.what()).find("more than"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zarr_device
