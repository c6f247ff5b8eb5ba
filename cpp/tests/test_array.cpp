// Tests of the engine end to end: arrays created, written and read through a store (memory and
// local directory, one parameterised suite), compared against a naive in-memory model. Chunks
// decoded and encoded side by side are in test_array_parallel.cpp.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <random>
#include <vector>

#include "array_test_util.hpp"
#include "codecs/crc32c.hpp"

namespace array_tests {
namespace {

// ---------------------------------------------------------------------------------------------

struct RoundTripCase {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> chunks;
  const char* dtype;
  json fill;
  json codecs;
  json key_encoding = nullptr;
};

std::vector<RoundTripCase> round_trip_cases() {
  return {
      {{7, 5}, {3, 2}, "int16", 0, json::parse(R"([{"name": "bytes"}])")},
      {{10},
       {4},
       "float64",
       "NaN",
       json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}},
                       {"name": "gzip", "configuration": {"level": 1}}])")},
      {{5, 6, 7}, {2, 4, 3}, "uint8", 3, json::parse(R"([{"name": "bytes"}])")},
      {{9, 8},
       {4, 4},
       "complex64",
       json::array({1.0, -1.0}),
       json::parse(R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
                       {"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}])")},
      {{6, 7}, {4, 3}, "bfloat16", 1.0, json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])")},
      {{13, 11},
       {5, 4},
       "float32",
       0,
       json::parse(R"([{"name": "bytes"}])"),
       json{{"name", "v2"}, {"configuration", {{"separator", "."}}}}},
      {{3, 4, 5},
       {2, 3, 2},
       "float8_e4m3fn",
       0,
       json::parse(R"([{"name": "transpose", "configuration": {"order": [2, 0, 1]}},
                       {"name": "bytes"}])")},
      {{10, 9}, {4, 6}, "int32", -1, sharded_codecs({2, 3}, json::parse(R"([{"name": "bytes"}])"))},
      {{11, 7},
       {6, 4},
       "uint64",
       0,
       sharded_codecs({3, 2}, json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}},
                                      {"name": "gzip"}, {"name": "crc32c"}])"),
                      "start")},
      // A transpose in front of the shard: partial reads go through it.
      {{9, 10},
       {6, 4},
       "int16",
       0,
       json::array({{{"name", "transpose"}, {"configuration", {{"order", {1, 0}}}}},
                    sharded_codecs({2, 3}, json::parse(R"([{"name": "bytes"}])"))[0]})},
  };
}

TEST_P(Array, RoundTripsForSeveralTypesChunkingsAndCodecs) {
  std::mt19937 rng(42);
  for (const auto& c : round_trip_cases()) {
    json doc = array_doc(c.shape, c.chunks, c.dtype, c.fill, c.codecs);
    if (!c.key_encoding.is_null()) doc["chunk_key_encoding"] = c.key_encoding;
    SCOPED_TRACE(doc.dump());
    store_->erase_prefix("");
    const auto a = create(doc);
    const std::size_t es = element_size(*a);
    const IoOptions serial{1};
    const IoOptions parallel{4};

    // Nothing written yet: all fill value.
    Bytes model = filled(*a);
    ASSERT_EQ(read_all(*a, parallel), model);

    // The whole array at once, then read back whole and in random selections.
    model = zd::test::random_bytes(model.size(), rng());
    a->write(zd::test::full_selection(c.shape), model, parallel);
    ASSERT_EQ(read_all(*a, serial), model);
    ASSERT_EQ(read_all(*a, parallel), model);
    for (int i = 0; i < 15; ++i) {
      const auto sel = zd::test::random_selection(rng, c.shape);
      ASSERT_EQ(read(*a, sel, i % 2 ? serial : parallel),
                zd::test::naive_select(model, c.shape, sel, es))
          << zd::test::describe(sel);
    }
    // Writes of random selections (steps, partial chunks), each checked by a full read.
    for (int i = 0; i < 6; ++i) {
      const auto sel = zd::test::random_selection(rng, c.shape);
      const Bytes values =
          zd::test::random_bytes(product(zd::test::selection_shape(sel)) * es, rng());
      a->write(sel, values, i % 2 ? serial : parallel);
      zd::test::naive_assign(model, c.shape, sel, values, es);
      ASSERT_EQ(read_all(*a, parallel), model) << "after writing " << zd::test::describe(sel);
    }
    // A fresh handle on the same store sees the same data.
    const auto reopened = zd::Array::open(store_, "arr");
    EXPECT_EQ(read_all(*reopened), model);
  }
}

TEST_P(Array, ChunkKeysInTheStore) {
  auto a = create(array_doc({5, 4}, {2, 3}, "uint16", 0));
  a->write(zd::test::full_selection(a->metadata().shape), zd::test::random_bytes(40, 1));
  EXPECT_EQ(store_->list_dir("arr"), (std::vector<std::string>{"c", "zarr.json"}));
  EXPECT_EQ(store_->list_dir("arr/c"), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(store_->list_dir("arr/c/2"), (std::vector<std::string>{"0", "1"}));
  // Edge chunks are stored whole: 2 x 3 uint16.
  EXPECT_EQ(store_->size("arr/c/2/1"), 12u);

  json doc = array_doc({5, 4}, {2, 3}, "uint16", 0);
  doc["chunk_key_encoding"] = {{"name", "v2"}, {"configuration", {{"separator", "."}}}};
  auto v2keys = create(doc, "v2keys");
  v2keys->write(zd::test::full_selection(v2keys->metadata().shape), zd::test::random_bytes(40, 2));
  EXPECT_EQ(store_->list_dir("v2keys"),
            (std::vector<std::string>{"0.0", "0.1", "1.0", "1.1", "2.0", "2.1", "zarr.json"}));
}

TEST_P(Array, PartialChunkWriteReadsModifiesAndWritesBack) {
  const std::vector<std::int64_t> shape = {8, 8};
  auto a = create(array_doc(shape, {4, 4}, "int32", 0,
                            json::parse(R"([{"name": "bytes"}, {"name": "gzip"}])")));
  Bytes model = zd::test::random_bytes(8 * 8 * 4, 3);
  a->write(zd::test::full_selection(shape), model);
  const auto untouched = store_->get("arr/c/1/1");
  ASSERT_TRUE(untouched.has_value());
  // Rows 1 and 3, columns 1, 3 and 5 of chunk (0, 0) and (0, 1).
  const std::vector<DimSlice> sel = {{1, 2, 2}, {1, 2, 3}};
  std::vector<std::int32_t> values = {-1, -2, -3, -4, -5, -6};
  a->write(sel, zd::test::bytes_from(values));
  zd::test::naive_assign(model, shape, sel, zd::test::bytes_from(values), 4);
  EXPECT_EQ(read_all(*a), model);
  const auto got = zd::test::values_from<std::int32_t>(read(*a, sel));
  EXPECT_EQ(got, values);
  // A chunk the write did not touch was not rewritten.
  EXPECT_EQ(zd::test::to_bytes(*store_->get("arr/c/1/1")), zd::test::to_bytes(*untouched));
  // A partial write into a missing chunk starts from the fill value.
  auto b = create(array_doc(shape, {4, 4}, "int32", 9), "b");
  b->write(std::vector<DimSlice>{{5, 1, 1}, {6, 1, 1}},
           zd::test::bytes_from(std::vector<std::int32_t>{1}));
  auto all = zd::test::values_from<std::int32_t>(read_all(*b));
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], i == 5 * 8 + 6 ? 1 : 9) << i;
}

TEST_P(Array, ChunksEqualToFillValueAreErased) {
  for (bool sharded : {false, true}) {
    SCOPED_TRACE(sharded ? "sharded" : "plain");
    store_->erase_prefix("");
    const std::vector<std::int64_t> shape = {6, 6};
    auto a =
        create(array_doc(shape, {3, 3}, "int32", 5,
                         sharded ? sharded_codecs({3, 1}, json::parse(R"([{"name": "bytes"}])"))
                                 : json::parse(R"([{"name": "bytes"}])")));
    const std::vector<DimSlice> chunk00 = {{0, 1, 3}, {0, 1, 3}};
    // Writing the fill value into a missing chunk stores nothing.
    a->write(chunk00, zd::test::bytes_from(std::vector<std::int32_t>(9, 5)));
    EXPECT_FALSE(store_->exists("arr/c/0/0"));
    // Something else: stored.
    std::vector<std::int32_t> values(9, 5);
    values[4] = 6;
    a->write(chunk00, zd::test::bytes_from(values));
    EXPECT_TRUE(store_->exists("arr/c/0/0"));
    EXPECT_FALSE(store_->exists("arr/c/0/1"));
    // Overwriting the one non-fill element with the fill value: the chunk is removed.
    a->write(std::vector<DimSlice>{{1, 1, 1}, {1, 1, 1}},
             zd::test::bytes_from(std::vector<std::int32_t>{5}));
    EXPECT_FALSE(store_->exists("arr/c/0/0"));
    // A whole-array write of fill leaves the store with metadata only.
    a->write(zd::test::full_selection(shape), zd::test::random_bytes(36 * 4, 4));
    EXPECT_TRUE(store_->exists("arr/c/1/1"));
    a->write(zd::test::full_selection(shape),
             zd::test::bytes_from(std::vector<std::int32_t>(36, 5)));
    for (const char* key : {"arr/c/0/0", "arr/c/0/1", "arr/c/1/0", "arr/c/1/1"}) {
      EXPECT_FALSE(store_->exists(key)) << key;
    }
    EXPECT_TRUE(store_->exists("arr/zarr.json"));
    EXPECT_EQ(read_all(*a), filled(*a));
  }
}

TEST_P(Array, MissingChunksReadAsFillValue) {
  struct Case {
    const char* dtype;
    json fill;
    json codecs;
  };
  const Case cases[] = {
      {"int32", 7, json::parse(R"([{"name": "bytes"}])")},
      {"float32", "NaN", json::parse(R"([{"name": "bytes"}, {"name": "zstd"}])")},
      {"float64", "-Infinity", json::parse(R"([{"name": "bytes"}])")},
      {"bool", true, json::parse(R"([{"name": "bytes"}])")},
      {"complex128", json::array({1.5, -2.0}), json::parse(R"([{"name": "bytes"}])")},
      {"bfloat16", "0x7fc1", json::parse(R"([{"name": "bytes"}])")},
      {"int16", -3, sharded_codecs({2, 2}, json::parse(R"([{"name": "bytes"}])"))},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.dtype) + " " + c.fill.dump());
    store_->erase_prefix("");
    auto a = create(array_doc({5, 6}, {4, 4}, c.dtype, c.fill, c.codecs));
    const Bytes& fill = a->metadata().fill_value;
    const std::size_t es = fill.size();
    EXPECT_EQ(read_all(*a, IoOptions{3}), filled(*a));
    // One element written: its chunk is stored, the rest still reads as fill.
    Bytes one = zd::test::random_bytes(es, 5);
    if (one == fill) one[0] ^= std::byte{1};
    a->write(std::vector<DimSlice>{{4, 1, 1}, {5, 1, 1}}, one);
    Bytes expected = filled(*a);
    std::copy(one.begin(), one.end(), expected.end() - static_cast<std::ptrdiff_t>(es));
    EXPECT_EQ(read_all(*a, IoOptions{3}), expected);
    // Rows 0 and 2, columns 1 and 4: all in chunks never written.
    Bytes four;
    for (int i = 0; i < 4; ++i) four.insert(four.end(), fill.begin(), fill.end());
    EXPECT_EQ(read(*a, {{0, 2, 2}, {1, 3, 2}}), four);
  }
}

TEST_P(Array, ShardWithSomeInnerChunksMissing) {
  const std::vector<std::int64_t> shape = {8, 8};
  auto a = create(array_doc(shape, {8, 8}, "uint16", 77,
                            sharded_codecs({4, 4}, json::parse(R"([{"name": "bytes"}])"))));
  // Only the inner chunk at rows 4-7, columns 0-3 gets data.
  const std::vector<DimSlice> sel = {{4, 1, 4}, {0, 1, 4}};
  const Bytes values = zd::test::random_bytes(16 * 2, 6);
  a->write(sel, values);
  Bytes model = filled(*a);
  zd::test::naive_assign(model, shape, sel, values, 2);
  EXPECT_EQ(read_all(*a), model);
  // The shard holds one inner chunk of 32 bytes and an index of 4 entries with its CRC.
  EXPECT_EQ(store_->size("arr/c/0/0"), 32u + 4 * 16 + 4);
  for (int i = 0; i < 3; ++i) {
    std::mt19937 rng(i);
    const auto s = zd::test::random_selection(rng, shape);
    EXPECT_EQ(read(*a, s, IoOptions{2}), zd::test::naive_select(model, shape, s, 2));
  }
}

// A shard of four inner chunks whose index (offset and length of each, little endian, then its
// crc32c) gives the first `length` bytes at offset 0 and the others as missing.
Bytes shard_claiming(std::uint64_t length) {
  Bytes shard(length, std::byte{1});
  Bytes index(4 * 16, std::byte{0xFF});
  for (int b = 0; b < 8; ++b) {
    index[static_cast<std::size_t>(b)] = std::byte{0};
    index[8 + static_cast<std::size_t>(b)] = static_cast<std::byte>((length >> (8 * b)) & 0xFF);
  }
  const std::uint32_t crc = zd::codecs::crc32c(index);
  shard.insert(shard.end(), index.begin(), index.end());
  for (int b = 0; b < 4; ++b) shard.push_back(static_cast<std::byte>((crc >> (8 * b)) & 0xFF));
  return shard;
}

TEST_P(Array, ErrorsNameTheArrayAndTheChunk) {
  for (const std::string path : {"", "grp/arr"}) {
    SCOPED_TRACE("path '" + path + "'");
    const std::string prefix = path.empty() ? "" : path + "/";
    struct Case {
      const char* what;
      json codecs;
      Bytes garbage;
    };
    const Case cases[] = {
        {"wrong size, plain", json::parse(R"([{"name": "bytes"}])"), zd::test::bytes_of("xyz")},
        {"wrong size, transposed",
         json::parse(R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
                         {"name": "bytes"}])"),
         Bytes(100)},
        {"not gzip", json::parse(R"([{"name": "bytes"}, {"name": "gzip"}])"),
         zd::test::bytes_of("definitely not a gzip stream")},
        {"bad checksum", json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])"),
         Bytes(4 * 4 * 4 + 4, std::byte{1})},
        {"truncated shard", sharded_codecs({2, 2}, json::parse(R"([{"name": "bytes"}])")),
         Bytes(10)},
        // 64 bytes compress to at most 64 + 8 + 1024: a larger value is refused before it is read.
        {"larger than any encoding", json::parse(R"([{"name": "bytes"}, {"name": "zstd"}])"),
         Bytes(4000, std::byte{7})},
        // A shard whose index says its first inner chunk (2 x 2 int32: 16 bytes) takes 4000.
        {"inner chunk larger than any encoding",
         sharded_codecs({2, 2}, json::parse(R"([{"name": "bytes"}])")), shard_claiming(4000)},
    };
    for (const auto& c : cases) {
      SCOPED_TRACE(c.what);
      store_->erase_prefix("");
      const std::vector<std::int64_t> shape = {8, 8};
      auto a =
          zd::Array::create(store_, path, array_doc(shape, {4, 4}, "int32", 0, c.codecs), false);
      a->write(zd::test::full_selection(shape), zd::test::random_bytes(256, 7));
      put(prefix + "c/0/1", c.garbage);
      const std::string message = error_message([&] { (void)read_all(*a, IoOptions{2}); });
      EXPECT_TRUE(contains(message, "chunk '" + prefix + "c/0/1'")) << message;
      EXPECT_TRUE(contains(message, "array '" + path + "'")) << message;
      EXPECT_TRUE(contains(message, store_->describe())) << message;
      EXPECT_THROW((void)read_all(*a), zd::CodecError);
      if (std::string(c.what) == "bad checksum") {
        EXPECT_THROW((void)read_all(*a), zd::ChecksumError);
      }
      if (std::string(c.what).find("larger than any encoding") != std::string::npos) {
        EXPECT_TRUE(contains(message, "stored as 4000 bytes, more than any encoding")) << message;
      }
      // Selections that do not touch the damaged chunk still read.
      EXPECT_NO_THROW((void)read(*a, {{0, 1, 8}, {0, 1, 4}}));
      // A partial write into the damaged chunk reads it first, and fails the same way.
      const std::string write_message = error_message([&] {
        a->write(std::vector<DimSlice>{{0, 1, 1}, {5, 1, 1}},
                 zd::test::bytes_from(std::vector<std::int32_t>{1}));
      });
      EXPECT_TRUE(contains(write_message, "chunk '" + prefix + "c/0/1'")) << write_message;
      // A whole-chunk write replaces it without reading it.
      a->write(std::vector<DimSlice>{{0, 1, 4}, {4, 1, 4}},
               zd::test::bytes_from(std::vector<std::int32_t>(16, 3)));
      EXPECT_NO_THROW((void)read_all(*a));
    }
  }
}

TEST_P(Array, SelectionAndBufferErrors) {
  auto a = create(array_doc({10, 6}, {4, 4}, "uint8", 0));
  const std::vector<std::vector<DimSlice>> bad = {
      {{0, 1, 10}},                        // rank
      {{0, 1, 10}, {0, 1, 6}, {0, 1, 1}},  // rank
      {{0, 1, 11}, {0, 1, 6}},             // too many
      {{10, 1, 1}, {0, 1, 6}},             // start at the end
      {{-1, 1, 1}, {0, 1, 6}},             // negative start
      {{0, 1, -1}, {0, 1, 6}},             // negative count
      {{0, 0, 2}, {0, 1, 6}},              // step 0
      {{0, -1, 2}, {0, 1, 6}},             // negative step
      {{1, 3, 4}, {0, 1, 6}},              // 1, 4, 7, 10: past the end
      {{0, 1, 1}, {5, 2, 2}},              // 5, 7
  };
  for (const auto& sel : bad) {
    SCOPED_TRACE(zd::test::describe(sel));
    std::int64_t n = 1;
    for (const auto& s : sel) n *= std::max<std::int64_t>(s.count, 0);
    Bytes buffer(static_cast<std::size_t>(n));
    EXPECT_THROW(a->read(sel, buffer), zd::SelectionError);
    EXPECT_THROW(a->write(sel, buffer), zd::SelectionError);
  }
  // In bounds but the wrong buffer size.
  Bytes small(59), large(61);
  EXPECT_THROW(a->read(zd::test::full_selection(a->metadata().shape), small), zd::UsageError);
  EXPECT_THROW(a->write(zd::test::full_selection(a->metadata().shape), large), zd::UsageError);
  // Empty selections read and write nothing.
  Bytes none;
  EXPECT_NO_THROW(a->read(std::vector<DimSlice>{{3, 1, 0}, {0, 1, 6}}, none));
  EXPECT_NO_THROW(a->write(std::vector<DimSlice>{{0, 1, 10}, {2, 1, 0}}, none));
  EXPECT_EQ(store_->list_dir("arr"), std::vector<std::string>{"zarr.json"});
  // The largest in-bounds strided selection.
  Bytes out(3 * 2);
  EXPECT_NO_THROW(a->read(std::vector<DimSlice>{{1, 3, 3}, {0, 5, 2}}, out));
}

TEST_P(Array, OpenAndCreate) {
  EXPECT_THROW(zd::Array::open(store_, "arr"), zd::NotFoundError);
  json doc = array_doc({4, 4}, {2, 2}, "float32", 1.5);
  doc["attributes"] = {{"k", "v"}};
  auto a = create(doc);
  EXPECT_EQ(a->path(), "arr");
  EXPECT_EQ(a->describe(), "array 'arr' in " + store_->describe());
  // zarr.json is written with every codec default filled in.
  const auto stored = json::parse(zd::test::string_of(*store_->get("arr/zarr.json")));
  EXPECT_EQ(stored["codecs"], json::parse(R"([{"name": "bytes",
                                               "configuration": {"endian": "little"}}])"));
  EXPECT_EQ(stored["attributes"], doc["attributes"]);
  EXPECT_EQ(a->codecs_json(), stored["codecs"]);
  EXPECT_EQ(a->inner_chunk_shape(), (std::vector<std::int64_t>{2, 2}));

  auto b = zd::Array::open(store_, "arr");
  EXPECT_EQ(b->metadata().shape, a->metadata().shape);
  EXPECT_EQ(b->metadata().dtype, a->metadata().dtype);
  EXPECT_EQ(b->metadata().fill_value, a->metadata().fill_value);
  EXPECT_EQ(b->metadata().attributes, doc["attributes"]);

  // Creating over an existing node needs overwrite, which removes the old chunks.
  a->write(zd::test::full_selection(a->metadata().shape), zd::test::random_bytes(64, 9));
  EXPECT_TRUE(store_->exists("arr/c/1/1"));
  EXPECT_THROW(create(doc), zd::UsageError);
  auto c = zd::Array::create(store_, "arr", array_doc({3}, {3}, "int8", 0), true);
  EXPECT_FALSE(store_->exists("arr/c/1/1"));
  EXPECT_EQ(zd::Array::open(store_, "arr")->metadata().shape, (std::vector<std::int64_t>{3}));
  // Invalid metadata is refused before the store is touched.
  json invalid = doc;
  invalid["data_type"] = "float128";
  EXPECT_THROW(zd::Array::create(store_, "new", invalid, false), zd::FormatError);
  EXPECT_FALSE(store_->exists("new/zarr.json"));
  invalid = doc;
  invalid["codecs"] = json::parse(R"([{"name": "gzip"}])");
  EXPECT_THROW(zd::Array::create(store_, "new", invalid, false), zd::FormatError);
  EXPECT_FALSE(store_->exists("new/zarr.json"));

  // Sharded: the inner chunk shape.
  auto s =
      zd::Array::create(store_, "s",
                        array_doc({8, 8}, {4, 8}, "int32", 0,
                                  sharded_codecs({2, 4}, json::parse(R"([{"name": "bytes"}])"))),
                        false);
  EXPECT_EQ(s->inner_chunk_shape(), (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(s->metadata().chunk_shape, (std::vector<std::int64_t>{4, 8}));
}

TEST_P(Array, InnerChunkShapeIsInArrayOrderBehindATranspose) {
  // Shards of 6 x 4 transposed to 4 x 6 before sharding into 2 x 3 inner chunks: in the array's
  // own dimensions an inner chunk is 3 x 2.
  json codecs = json::array({{{"name", "transpose"}, {"configuration", {{"order", {1, 0}}}}},
                             sharded_codecs({2, 3}, json::parse(R"([{"name": "bytes"}])"))[0]});
  auto a = create(array_doc({12, 8}, {6, 4}, "uint8", 0, codecs));
  EXPECT_EQ(a->inner_chunk_shape(), (std::vector<std::int64_t>{3, 2}));
}

TEST_P(Array, NestedCodecsMayBeGivenByName) {
  // A codec without configuration may be written as its bare name, at the top level (as tested
  // above) and inside a shard's codec lists alike.
  json codecs = json::array({{{"name", "sharding_indexed"},
                              {"configuration",
                               {{"chunk_shape", {2, 2}},
                                {"codecs", {"bytes"}},
                                {"index_codecs", {"bytes", "crc32c"}}}}}});
  auto a = create(array_doc({4, 4}, {4, 4}, "uint8", 0, codecs));
  const Bytes data = zd::test::random_bytes(16, 10);
  a->write(zd::test::full_selection(a->metadata().shape), data);
  EXPECT_EQ(read_all(*a), data);
}

TEST_P(Array, OpenErrors) {
  put_json("group/zarr.json", {{"zarr_format", 3}, {"node_type", "group"}});
  EXPECT_THROW(zd::Array::open(store_, "group"), zd::NotFoundError);
  put("bad/zarr.json", zd::test::bytes_of("{not json"));
  const std::string message = error_message([&] { zd::Array::open(store_, "bad"); });
  EXPECT_TRUE(contains(message, "array 'bad'")) << message;
  EXPECT_THROW(zd::Array::open(store_, "bad"), zd::FormatError);
  json doc = array_doc({4}, {2}, "int32", 0);
  doc["shape"] = {-4};
  put_json("neg/zarr.json", doc);
  EXPECT_THROW(zd::Array::open(store_, "neg"), zd::FormatError);
  EXPECT_TRUE(contains(error_message([&] { zd::Array::open(store_, "neg"); }), "array 'neg'"));
  doc = array_doc({4}, {2}, "int32", 0);
  doc["codecs"] = json::parse(R"([{"name": "no_such_codec"}])");
  put_json("codec/zarr.json", doc);
  EXPECT_THROW(zd::Array::open(store_, "codec"), zd::FormatError);
  put_json("v2bad/.zarray", {{"zarr_format", 2}, {"shape", {4}}});
  EXPECT_THROW(zd::Array::open(store_, "v2bad"), zd::FormatError);
}

TEST_P(Array, ZeroDimensionalAndEmptyArrays) {
  auto a = create(array_doc({}, {}, "float64", 0.25));
  EXPECT_EQ(zd::test::values_from<double>(read(*a, {})), std::vector<double>{0.25});
  a->write(std::vector<DimSlice>{}, zd::test::bytes_from(std::vector<double>{-3.5}));
  EXPECT_TRUE(store_->exists("arr/c"));
  EXPECT_EQ(zd::test::values_from<double>(read(*a, {})), std::vector<double>{-3.5});
  EXPECT_EQ(zd::test::values_from<double>(read(*zd::Array::open(store_, "arr"), {})),
            std::vector<double>{-3.5});

  auto e = create(array_doc({0, 5}, {2, 2}, "int32", 0), "empty");
  EXPECT_TRUE(read_all(*e).empty());
  Bytes none;
  EXPECT_NO_THROW(e->write(zd::test::full_selection(e->metadata().shape), none));
}

// zlib's format (what numcodecs.zlib writes).
Bytes zlib_compress(const Bytes& data) {
  uLongf size = compressBound(data.size());
  Bytes out(size);
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                      reinterpret_cast<const Bytef*>(data.data()), data.size(), 5),
            Z_OK);
  out.resize(size);
  return out;
}

TEST_P(Array, ReadsZarrV2) {
  // A 5 x 3 big-endian int32 array in F order, chunks of 2 x 2, with "/" between key parts and a
  // zlib compressor: every chunk written by hand.
  put_json("v2/.zarray", {{"zarr_format", 2},
                          {"shape", {5, 3}},
                          {"chunks", {2, 2}},
                          {"dtype", ">i4"},
                          {"order", "F"},
                          {"compressor", {{"id", "zlib"}, {"level", 5}}},
                          {"fill_value", -1},
                          {"filters", nullptr},
                          {"dimension_separator", "/"}});
  put_json("v2/.zattrs", {{"title", "v2 array"}});
  auto value = [](std::int64_t r, std::int64_t c) { return static_cast<std::int32_t>(10 * r + c); };
  for (std::int64_t cr = 0; cr < 3; ++cr) {
    for (std::int64_t cc = 0; cc < 2; ++cc) {
      if (cr == 1 && cc == 1) continue;  // missing: fill value
      Bytes chunk;
      for (std::int64_t j = 0; j < 2; ++j) {  // F order: the first index varies fastest
        for (std::int64_t i = 0; i < 2; ++i) {
          const std::int64_t r = cr * 2 + i, c = cc * 2 + j;
          const auto v = static_cast<std::uint32_t>(r < 5 && c < 3 ? value(r, c) : 12345);
          for (int b = 3; b >= 0; --b) chunk.push_back(static_cast<std::byte>(v >> (8 * b)));
        }
      }
      put("v2/" + std::to_string(cr) + "/" + std::to_string(cc), zlib_compress(chunk));
    }
  }
  const auto a = zd::Array::open(store_, "v2");
  EXPECT_EQ(a->metadata().zarr_format, 2);
  EXPECT_EQ(a->metadata().attributes, (json{{"title", "v2 array"}}));
  const auto out = zd::test::values_from<std::int32_t>(read_all(*a, IoOptions{2}));
  ASSERT_EQ(out.size(), 15u);
  for (std::int64_t r = 0; r < 5; ++r) {
    for (std::int64_t c = 0; c < 3; ++c) {
      const bool missing = r / 2 == 1 && c / 2 == 1;
      EXPECT_EQ(out[r * 3 + c], missing ? -1 : value(r, c)) << r << "," << c;
    }
  }
  const auto column = zd::test::values_from<std::int32_t>(read(*a, {{0, 2, 3}, {1, 1, 1}}));
  EXPECT_EQ(column, (std::vector<std::int32_t>{1, 21, 41}));
}

// No instantiation prefix, so the tests are named Array.<Test>/<store> and match "Array.*".
INSTANTIATE_TEST_SUITE_P(, Array,
                         ::testing::Values(StoreKind{"memory", false}, StoreKind{"local", true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace array_tests
