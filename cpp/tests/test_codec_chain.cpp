// Tests of the codec chain's array layout: the "bytes" and "transpose" codecs decoding selections
// straight into strided destinations (against a naive model), and chain validation. Chains
// through bytes->bytes codecs are in test_codec_chain_compression.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "codec_chain_test_util.hpp"
#include "codecs/codec_chain.hpp"
#include "codecs/shard_layout.hpp"
#include "place/strided_copy.hpp"
#include "test_util.hpp"
#include "zarr_device/array_metadata.hpp"

namespace zarr_device {
namespace {

using codecs::CodecChain;
using test::Bytes;
using test::json;
using test::make_spec;

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

// What the chain says of itself, so that readers and writers outside codecs/ never read its
// metadata: the order its transposes store the dimensions in, and the chunks a read decodes.
TEST(CodecChain, StoredOrderComposesTransposes) {
  const auto spec = make_spec({2, 3, 4}, "uint16");
  EXPECT_EQ(CodecChain(json::array({bytes_codec("little")}), spec).stored_order(),
            (std::vector<std::size_t>{0, 1, 2}));
  const CodecChain two(
      json::array({transpose_codec({2, 0, 1}), transpose_codec({1, 0, 2}), bytes_codec("little")}),
      spec);
  // The first stores (2, 0, 1); the second swaps its first two: (0, 2, 1).
  EXPECT_EQ(two.stored_order(), (std::vector<std::size_t>{0, 2, 1}));
  EXPECT_EQ(two.array_to_array()[0]->permutation(), (std::vector<std::size_t>{2, 0, 1}));
  EXPECT_EQ(two.spec().shape, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_FALSE(two.is_sharded());
  EXPECT_EQ(two.decoded_chunk_shape(), (std::vector<std::int64_t>{2, 3, 4}));
}

TEST(CodecChain, DecodedChunkShapeOfAShardIsInTheArraysOrder) {
  // A 6 x 4 shard transposed to 4 x 6, then sharded into 2 x 3 inner chunks: 3 x 2 in the
  // array's dimensions.
  const json shard = {
      {"name", "sharding_indexed"},
      {"configuration",
       {{"chunk_shape", {2, 3}}, {"codecs", json::array({bytes_codec("little")})}}}};
  const CodecChain chain(json::array({transpose_codec({1, 0}), shard}), make_spec({6, 4}, "uint8"));
  EXPECT_TRUE(chain.is_sharded());
  EXPECT_EQ(chain.shard_layout(), nullptr);  // a transpose around it: not read by range
  EXPECT_EQ(chain.decoded_chunk_shape(), (std::vector<std::int64_t>{3, 2}));
  const CodecChain plain(json::array({shard}), make_spec({4, 6}, "uint8"));
  EXPECT_NE(plain.shard_layout(), nullptr);
  EXPECT_EQ(plain.decoded_chunk_shape(), (std::vector<std::int64_t>{2, 3}));
}

TEST(CodecChain, CodecsSayWhatADeviceEncodes) {
  const auto spec = make_spec({64}, "float32");
  const CodecChain zstd(
      json::array({bytes_codec("little"), {{"name", "zstd"}}, {{"name", "crc32c"}}}), spec);
  EXPECT_EQ(zstd.bytes_to_bytes()[0]->device_encoding(), DeviceCodec::kZstd);
  // A checksum is appended by the CPU, as a suffix of what the device wrote.
  EXPECT_EQ(zstd.bytes_to_bytes()[1]->device_encoding(), std::nullopt);
  EXPECT_EQ(zstd.bytes_to_bytes()[1]->suffix_size(), 4U);
  // The device's frames carry no content checksum: a zstd that stores one is encoded on the CPU.
  const CodecChain checked(
      json::array({bytes_codec("little"),
                   {{"name", "zstd"}, {"configuration", {{"level", 1}, {"checksum", true}}}}}),
      spec);
  EXPECT_EQ(checked.bytes_to_bytes()[0]->device_encoding(), std::nullopt);
  const CodecChain gzip(json::array({bytes_codec("little"), {{"name", "gzip"}}}), spec);
  EXPECT_EQ(gzip.bytes_to_bytes()[0]->device_encoding(), std::nullopt);
}

}  // namespace
}  // namespace zarr_device
