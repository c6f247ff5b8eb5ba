// Tests of the codec chain: the "bytes" and "transpose" codecs decoding selections straight into
// strided destinations (against a naive model), encode/decode round trips through bytes->bytes
// codecs, the direct decompress-into-destination path, and chain validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "place/strided_copy.hpp"
#include "test_util.hpp"
#include "zarr_device/metadata.hpp"

namespace zarr_device {
namespace {

using codecs::CodecChain;
using test::Bytes;
using test::json;
using test::make_spec;
using test::product;

// Reverses each swap_unit-sized piece of every element: the model of a byte order change.
Bytes swapped(Bytes data, std::size_t swap_unit) {
  if (swap_unit <= 1) return data;
  for (std::size_t i = 0; i + swap_unit <= data.size(); i += swap_unit) {
    std::reverse(data.begin() + i, data.begin() + i + swap_unit);
  }
  return data;
}

// The model of the transpose codec: numpy's data.transpose(order), C-contiguous.
Bytes naive_transpose(const Bytes& data, const std::vector<std::int64_t>& shape,
                      const std::vector<std::int64_t>& order, std::size_t es,
                      std::vector<std::int64_t>* encoded_shape = nullptr) {
  std::vector<std::int64_t> enc(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) enc[i] = shape[order[i]];
  const auto strides = test::c_strides(shape, static_cast<std::int64_t>(es));
  Bytes out;
  test::for_each_index(enc, [&](const std::vector<std::int64_t>& j) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < order.size(); ++i) offset += j[i] * strides[order[i]];
    out.insert(out.end(), data.begin() + offset, data.begin() + offset + es);
  });
  if (encoded_shape) *encoded_shape = enc;
  return out;
}

json bytes_codec(const char* endian) {
  return {{"name", "bytes"}, {"configuration", {{"endian", endian}}}};
}

json transpose_codec(const std::vector<std::int64_t>& order) {
  return {{"name", "transpose"}, {"configuration", {{"order", order}}}};
}

// Decodes `selection` of `encoded` through `chain` into a fresh C-contiguous buffer (and, where
// `padded`, into a destination with gaps between rows, which must come back unchanged).
Bytes decode_selection(const CodecChain& chain, const Bytes& encoded,
                       const std::vector<DimSlice>& selection, bool padded = false) {
  const std::size_t es = chain.spec().dtype->size;
  const auto shape = test::selection_shape(selection);
  if (!padded || shape.empty()) {
    Bytes out(product(shape) * es, std::byte{0xEE});
    chain.decode_into(Buffer::copy_of(encoded), selection, test::c_view(out, shape, es));
    return out;
  }
  // One element of padding after each innermost row.
  auto strides = test::c_strides(shape, static_cast<std::int64_t>(es));
  const std::int64_t row = (shape.back() + 1) * static_cast<std::int64_t>(es);
  std::int64_t s = row;
  for (std::size_t d = shape.size() - 1; d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  Bytes buffer(static_cast<std::size_t>(s), std::byte{0xEE});
  chain.decode_into(Buffer::copy_of(encoded), selection, {buffer.data(), shape, strides});
  Bytes out;
  test::for_each_index(shape, [&](const std::vector<std::int64_t>& idx) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    out.insert(out.end(), buffer.begin() + off, buffer.begin() + off + es);
  });
  for (std::int64_t r = 0; r < s; r += row) {  // the gaps
    for (std::size_t b = 0; b < es; ++b) {
      EXPECT_EQ(buffer[static_cast<std::size_t>(r + row) - es + b], std::byte{0xEE});
    }
  }
  return out;
}

const char* const kTypes[] = {"uint8",     "int16",      "uint32",   "float32", "float64",
                              "complex64", "complex128", "bfloat16", "bool"};

// ---------------------------------------------------------------------------------------------
// bytes

TEST(CodecChain, BytesDecodeIntoMatchesNaiveModel) {
  std::mt19937 rng(11);
  for (int iteration = 0; iteration < 300; ++iteration) {
    const char* type = kTypes[rng() % std::size(kTypes)];
    const bool big = rng() % 2;
    std::vector<std::int64_t> shape;
    for (std::size_t d = 0, nd = rng() % 4; d < nd; ++d) shape.push_back(1 + rng() % 7);
    const auto spec = make_spec(shape, type);
    const std::size_t es = spec.dtype->size;
    SCOPED_TRACE(std::string(type) + (big ? " big " : " little ") + test::describe(shape));
    const CodecChain chain(json::array({bytes_codec(big ? "big" : "little")}), spec);
    const Bytes logical = test::random_bytes(spec.nbytes(), rng());
    const Bytes encoded = big ? swapped(logical, spec.dtype->swap_unit) : logical;
    auto stored = chain.encode(logical);
    ASSERT_TRUE(stored.has_value());
    ASSERT_EQ(test::to_bytes(*stored), encoded);
    const auto sel =
        iteration % 5 == 0 ? test::full_selection(shape) : test::random_selection(rng, shape);
    SCOPED_TRACE(test::describe(sel));
    ASSERT_EQ(decode_selection(chain, encoded, sel), test::naive_select(logical, shape, sel, es));
    ASSERT_EQ(decode_selection(chain, encoded, sel, true),
              test::naive_select(logical, shape, sel, es));
  }
}

TEST(CodecChain, BytesBigEndianKnownBytes) {
  const auto spec = make_spec({3}, "int16");
  const CodecChain chain(json::array({bytes_codec("big")}), spec);
  const Bytes encoded = {std::byte{0x01}, std::byte{0x02}, std::byte{0xff},
                         std::byte{0xfe}, std::byte{0x00}, std::byte{0x07}};
  const auto out = test::values_from<std::int16_t>(decode_selection(chain, encoded, {{0, 1, 3}}));
  EXPECT_EQ(out, (std::vector<std::int16_t>{0x0102, -2, 7}));
  // complex64: each part swapped on its own.
  const auto cspec = make_spec({1}, "complex64");
  const CodecChain cchain(json::array({bytes_codec("big")}), cspec);
  const Bytes c = {std::byte{0x3f}, std::byte{0x80}, std::byte{0}, std::byte{0},
                   std::byte{0x40}, std::byte{0x00}, std::byte{0}, std::byte{0}};
  const auto parts = test::values_from<float>(decode_selection(cchain, c, {{0, 1, 1}}));
  EXPECT_EQ(parts, (std::vector<float>{1.0f, 2.0f}));
}

// ---------------------------------------------------------------------------------------------
// transpose

void check_transpose(const std::vector<std::vector<std::int64_t>>& orders,
                     const std::vector<std::int64_t>& shape, const char* type, const char* endian,
                     std::mt19937& rng, int selections) {
  const auto spec = make_spec(shape, type);
  const std::size_t es = spec.dtype->size;
  json codecs = json::array();
  for (const auto& o : orders) codecs.push_back(transpose_codec(o));
  codecs.push_back(bytes_codec(endian));
  SCOPED_TRACE(codecs.dump() + " " + test::describe(shape) + " " + type);
  const CodecChain chain(codecs, spec);
  const Bytes logical = test::random_bytes(spec.nbytes(), rng());
  // Model: each transpose in turn, then the byte order.
  Bytes encoded = logical;
  std::vector<std::int64_t> current = shape;
  for (const auto& o : orders) {
    std::vector<std::int64_t> next;
    encoded = naive_transpose(encoded, current, o, es, &next);
    current = next;
  }
  if (std::string(endian) == "big") encoded = swapped(encoded, spec.dtype->swap_unit);
  const auto stored = chain.encode(logical);
  ASSERT_TRUE(stored.has_value());
  ASSERT_EQ(test::to_bytes(*stored), encoded);
  for (int i = 0; i < selections; ++i) {
    const auto sel = i == 0 ? test::full_selection(shape) : test::random_selection(rng, shape);
    SCOPED_TRACE(test::describe(sel));
    const Bytes expected = test::naive_select(logical, shape, sel, es);
    ASSERT_EQ(decode_selection(chain, encoded, sel), expected);
    ASSERT_EQ(decode_selection(chain, encoded, sel, true), expected);
  }
}

TEST(CodecChain, TransposeTwoDimensional) {
  std::mt19937 rng(5);
  for (const char* endian : {"little", "big"}) {
    check_transpose({{1, 0}}, {5, 7}, "int32", endian, rng, 20);
    check_transpose({{0, 1}}, {5, 7}, "uint16", endian, rng, 10);
    check_transpose({{1, 0}}, {1, 9}, "float64", endian, rng, 10);
  }
}

TEST(CodecChain, TransposeEveryThreeDimensionalPermutation) {
  std::mt19937 rng(6);
  std::vector<std::int64_t> order = {0, 1, 2};
  do {
    for (const char* type : {"uint8", "float32", "complex64"}) {
      check_transpose({order}, {4, 3, 5}, type, rng() % 2 ? "big" : "little", rng, 15);
    }
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(CodecChain, TransposeChainedAndFourDimensional) {
  std::mt19937 rng(8);
  check_transpose({{1, 2, 0}, {2, 0, 1}}, {2, 3, 4}, "int16", "little", rng, 15);  // cancel out
  check_transpose({{2, 0, 1}, {0, 2, 1}}, {2, 3, 4}, "int64", "big", rng, 15);
  check_transpose({{3, 1, 0, 2}}, {2, 3, 4, 3}, "float32", "little", rng, 20);
  check_transpose({{3, 2, 1, 0}}, {2, 1, 4, 3}, "uint8", "little", rng, 20);
}

TEST(CodecChain, TransposeOrderStringsAndToJson) {
  const auto spec = make_spec({2, 3, 4}, "int32");
  const CodecChain f(json::parse(R"([{"name": "transpose", "configuration": {"order": "F"}},
                                     {"name": "bytes"}])"),
                     spec);
  EXPECT_EQ(f.to_json(), json::parse(R"([
      {"name": "transpose", "configuration": {"order": [2, 1, 0]}},
      {"name": "bytes", "configuration": {"endian": "little"}}])"));
  const CodecChain c(json::parse(R"([{"name": "transpose", "configuration": {"order": "C"}},
                                     {"name": "bytes", "configuration": {"endian": "big"}}])"),
                     spec);
  EXPECT_EQ(c.to_json()[0]["configuration"]["order"], json::parse("[0, 1, 2]"));
  EXPECT_EQ(c.to_json()[1], bytes_codec("big"));
  // One-byte types need no endian, and none is written.
  const CodecChain u8(json::parse(R"([{"name": "bytes"}])"), make_spec({4}, "uint8"));
  EXPECT_EQ(u8.to_json(), json::parse(R"([{"name": "bytes"}])"));
}

TEST(CodecChain, V2FortranOrderChunkDecodes) {
  // A .zarray with order F and big-endian int32: the chunk bytes are the column-major elements,
  // each big endian.
  const json zarray = {{"zarr_format", 2}, {"shape", {2, 3}},   {"chunks", {2, 3}},
                       {"dtype", ">i4"},   {"order", "F"},      {"compressor", nullptr},
                       {"fill_value", 0},  {"filters", nullptr}};
  const auto m = ArrayMetadata::from_v2(zarray, json::object());
  const CodecChain chain(m.codecs, ChunkSpec{m.chunk_shape, m.dtype, m.fill_value}, 2);
  // Logical [[1, 2, 3], [4, 5, 6]] in F order: 1 4 2 5 3 6.
  Bytes encoded;
  for (std::uint8_t v : {1, 4, 2, 5, 3, 6}) {
    encoded.insert(encoded.end(), {std::byte{0}, std::byte{0}, std::byte{0}, std::byte{v}});
  }
  const auto out = test::values_from<std::int32_t>(
      decode_selection(chain, encoded, test::full_selection(m.chunk_shape)));
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  const auto column =
      test::values_from<std::int32_t>(decode_selection(chain, encoded, {{0, 1, 2}, {1, 1, 1}}));
  EXPECT_EQ(column, (std::vector<std::int32_t>{2, 5}));
  const std::vector<std::int32_t> logical = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(test::to_bytes(*chain.encode(test::bytes_from(logical))), encoded);
}

// ---------------------------------------------------------------------------------------------
// bytes->bytes codecs

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

TEST(CodecChain, InvalidChainsRaiseFormatError) {
  const auto spec = make_spec({4, 4}, "int32");
  const char* const cases[] = {
      R"([{"name": "no_such_codec"}])",
      R"([{"name": "bytes"}, {"name": "no_such_codec"}])",
      R"([])",
      R"({"name": "bytes"})",
      R"([{"name": "gzip"}, {"name": "bytes"}])",  // bytes->bytes before array->bytes
      R"([{"name": "crc32c"}])",                   // no array->bytes codec
      R"([{"name": "transpose", "configuration": {"order": [1, 0]}}])",
      R"([{"name": "bytes"}, {"name": "transpose", "configuration": {"order": [1, 0]}}])",
      R"([{"name": "bytes"}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {"order": [0, 0]}}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {"order": [0]}}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {"order": [0, 2]}}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {"order": [-1, 0]}}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {"order": "X"}}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {}}, {"name": "bytes"}])",
      R"([{"name": "transpose", "configuration": {"order": [0.5, 1]}}, {"name": "bytes"}])",
      R"([{"name": "bytes", "configuration": {"endian": "middle"}}])",
      R"([{"name": "bytes", "configuration": {"endian": 1}}])",
      R"([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 99}}])",
  };
  for (const char* codecs : cases) {
    SCOPED_TRACE(codecs);
    EXPECT_THROW(CodecChain(json::parse(codecs), spec), FormatError);
  }
  try {
    CodecChain(json::parse(R"([{"name": "bytes"}, {"name": "no_such_codec"}])"), spec);
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_codec"), std::string::npos) << e.what();
  }
  try {
    CodecChain(json::parse(R"([{"name": "gzip"}, {"name": "bytes"}])"), spec);
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
  }
}

TEST(CodecChain, PlainLayoutAndFixedSize) {
  const auto spec = make_spec({3, 5}, "uint16");
  EXPECT_TRUE(CodecChain(json::parse(R"([{"name": "bytes"}])"), spec).is_plain());
  EXPECT_FALSE(CodecChain(json::array({bytes_codec("big")}), spec).is_plain());
  EXPECT_FALSE(
      CodecChain(json::parse(R"([{"name": "bytes"}, {"name": "gzip"}])"), spec).is_plain());
  EXPECT_FALSE(
      CodecChain(json::array({transpose_codec({1, 0}), bytes_codec("little")}), spec).is_plain());
  EXPECT_EQ(CodecChain(json::parse(R"([{"name": "bytes"}])"), spec).fixed_encoded_size(), 30u);
  EXPECT_EQ(CodecChain(json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])"), spec)
                .fixed_encoded_size(),
            34u);
  EXPECT_EQ(CodecChain(
                json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}, {"name": "crc32c"}])"), spec)
                .fixed_encoded_size(),
            38u);
  EXPECT_EQ(CodecChain(json::parse(R"([{"name": "bytes"}, {"name": "zstd"}])"), spec)
                .fixed_encoded_size(),
            std::nullopt);
  EXPECT_FALSE(CodecChain(json::parse(R"([{"name": "bytes"}])"), spec).supports_partial_decode());
}

TEST(CodecChain, EncodeRejectsWrongSizeAndHandlesScalars) {
  const auto spec = make_spec({3, 5}, "uint16");
  const CodecChain chain(json::parse(R"([{"name": "bytes"}])"), spec);
  EXPECT_THROW((void)chain.encode(Bytes(29)), UsageError);
  EXPECT_THROW((void)chain.encode(Bytes(31)), UsageError);

  // A zero-dimensional chunk holds one element.
  const auto scalar = make_spec({}, "float64");
  const CodecChain s(json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}},
                                     {"name": "crc32c"}])"),
                     scalar);
  const Bytes one = test::bytes_from(std::vector<double>{2.5});
  const auto encoded = s.encode(one);
  ASSERT_TRUE(encoded.has_value());
  EXPECT_EQ(encoded->size(), 12u);
  EXPECT_EQ(decode_selection(s, test::to_bytes(*encoded), {}), one);
}

}  // namespace
}  // namespace zarr_device
