// Tests of the sharding_indexed codec: round trips with the index at either end, missing inner
// chunks, nested codecs, partial decoding from byte ranges, and shards with a damaged index or
// truncated data, which must raise CodecError (ChecksumError for a bad CRC), never crash.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "codecs/crc32c.hpp"
#include "codecs/shard_layout.hpp"
#include "place/strided_copy.hpp"
#include "test_util.hpp"

namespace zarr_device {
namespace {

using codecs::CodecChain;
using test::Bytes;
using test::json;
using test::make_spec;
using test::product;

constexpr std::uint64_t kMissing = std::numeric_limits<std::uint64_t>::max();
using Entry = std::pair<std::uint64_t, std::uint64_t>;  // offset, nbytes

json sharding(const std::vector<std::int64_t>& inner_chunk, json inner_codecs,
              const char* location = "end", json index_codecs = json::parse(R"([{"name": "bytes",
                                                   "configuration": {"endian": "little"}},
                                                  {"name": "crc32c"}])")) {
  return json::array({{{"name", "sharding_indexed"},
                       {"configuration",
                        {{"chunk_shape", inner_chunk},
                         {"codecs", std::move(inner_codecs)},
                         {"index_codecs", std::move(index_codecs)},
                         {"index_location", location}}}}});
}

const json kPlain = json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}])");

// The index as stored: little-endian (offset, nbytes) pairs, then optionally their CRC-32C.
Bytes index_bytes(const std::vector<Entry>& entries, bool crc = true) {
  Bytes out;
  for (const auto& [offset, nbytes] : entries) {
    const Bytes o = test::le_bytes(offset, 8);
    const Bytes n = test::le_bytes(nbytes, 8);
    out.insert(out.end(), o.begin(), o.end());
    out.insert(out.end(), n.begin(), n.end());
  }
  if (crc) {
    const Bytes c = test::le_bytes(codecs::crc32c(out), 4);
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

std::vector<Entry> parse_index(std::span<const std::byte> bytes, std::size_t n) {
  std::vector<Entry> entries;
  for (std::size_t i = 0; i < n; ++i) {
    entries.emplace_back(test::le_bits(bytes.subspan(16 * i, 8)),
                         test::le_bits(bytes.subspan(16 * i + 8, 8)));
  }
  return entries;
}

// Assembles a shard from encoded inner chunks (nullopt: missing), in order.
Bytes build_shard(const std::vector<std::optional<Bytes>>& chunks, bool at_start, bool crc = true) {
  const std::size_t index_size = chunks.size() * 16 + (crc ? 4 : 0);
  std::vector<Entry> entries;
  Bytes data;
  std::uint64_t offset = at_start ? index_size : 0;
  for (const auto& c : chunks) {
    if (!c) {
      entries.emplace_back(kMissing, kMissing);
      continue;
    }
    entries.emplace_back(offset, c->size());
    data.insert(data.end(), c->begin(), c->end());
    offset += c->size();
  }
  const Bytes index = index_bytes(entries, crc);
  Bytes out = at_start ? index : data;
  const Bytes& rest = at_start ? data : index;
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// Replaces the index of a shard built by build_shard (with a CRC) by `entries`.
Bytes with_index(Bytes shard, const std::vector<Entry>& entries, bool at_start) {
  const Bytes index = index_bytes(entries);
  const std::size_t at = at_start ? 0 : shard.size() - index.size();
  std::copy(index.begin(), index.end(), shard.begin() + static_cast<std::ptrdiff_t>(at));
  return shard;
}

Bytes decode_full(const CodecChain& chain, const Bytes& shard,
                  const std::vector<DimSlice>& selection) {
  const std::size_t es = chain.spec().dtype->size;
  const auto shape = test::selection_shape(selection);
  Bytes out(product(shape) * es, std::byte{0xEE});
  chain.decode_into(Buffer::copy_of(shard), selection, test::c_view(out, shape, es));
  return out;
}

// A RangeReader over `shard` that records every request; ranges behave as a store's do (a negative
// offset is a suffix, ranges past the end are cut short).
struct CountingReader {
  const Bytes* shard = nullptr;
  mutable std::vector<std::pair<std::int64_t, std::int64_t>> calls;

  RangeReader reader() const {
    return [this](std::int64_t offset, std::int64_t length) -> std::optional<Buffer> {
      calls.emplace_back(offset, length);
      const auto size = static_cast<std::int64_t>(shard->size());
      const std::int64_t start =
          offset < 0 ? std::max<std::int64_t>(0, size + offset) : std::min(offset, size);
      const std::int64_t n = offset < 0 ? size - start : std::min(length, size - start);
      return Buffer::copy_of({shard->data() + start, static_cast<std::size_t>(n)});
    };
  }
};

// Decodes through byte ranges, telling the codec the shard's true size (or `claimed_size`).
Bytes decode_partial(const CodecChain& chain, const CountingReader& reader,
                     const std::vector<DimSlice>& selection,
                     std::optional<std::uint64_t> claimed_size = std::nullopt) {
  const std::size_t es = chain.spec().dtype->size;
  const auto shape = test::selection_shape(selection);
  Bytes out(product(shape) * es, std::byte{0xEE});
  chain.decode_partial(reader.reader(), claimed_size.value_or(reader.shard->size()), selection,
                       test::c_view(out, shape, es));
  return out;
}

// Random int32 data of `shape` in which the inner chunks listed in `fill_chunks` (linear indices
// over a grid of `inner` chunks) hold only `fill`.
Bytes shard_data(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& inner,
                 const std::vector<std::size_t>& fill_chunks, std::int32_t fill,
                 std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> values(static_cast<std::size_t>(product(shape)));
  std::vector<std::int64_t> grid;
  for (std::size_t d = 0; d < shape.size(); ++d) grid.push_back(shape[d] / inner[d]);
  std::size_t k = 0;
  test::for_each_index(shape, [&](const std::vector<std::int64_t>& idx) {
    std::size_t linear = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) {
      linear =
          linear * static_cast<std::size_t>(grid[d]) + static_cast<std::size_t>(idx[d] / inner[d]);
    }
    const bool is_fill =
        std::find(fill_chunks.begin(), fill_chunks.end(), linear) != fill_chunks.end();
    values[k++] = is_fill ? fill : static_cast<std::int32_t>(rng() % 1000) - 500;
  });
  return test::bytes_from(values);
}

const std::vector<std::int64_t> kShard = {8, 6};
const std::vector<std::int64_t> kInner = {4, 3};  // a 2 x 2 grid of inner chunks

// ---------------------------------------------------------------------------------------------

TEST(Sharding, RoundTripWithIndexAtStartAndEnd) {
  std::mt19937 rng(1);
  for (const char* location : {"start", "end"}) {
    for (std::int32_t fill : {0, 7}) {
      SCOPED_TRACE(std::string(location) + " fill " + std::to_string(fill));
      const bool at_start = std::string(location) == "start";
      const auto spec =
          make_spec(kShard, "int32", test::le_bytes(static_cast<std::uint32_t>(fill), 4));
      const CodecChain chain(sharding(kInner, kPlain, location), spec);
      const Bytes data = shard_data(kShard, kInner, {2}, fill, 10);
      const auto encoded = chain.encode(data);
      ASSERT_TRUE(encoded.has_value());
      const Bytes shard = test::to_bytes(*encoded);
      // Three stored chunks of 4 * 3 int32, and an index of 4 entries plus its CRC.
      const std::size_t index_size = 4 * 16 + 4;
      ASSERT_EQ(shard.size(), 3 * 48 + index_size);
      const auto index_span = at_start ? std::span<const std::byte>(shard).first(index_size)
                                       : std::span<const std::byte>(shard).last(index_size);
      EXPECT_EQ(test::le_bits(index_span.last(4)),
                codecs::crc32c(index_span.first(index_size - 4)));
      const auto entries = parse_index(index_span, 4);
      const std::uint64_t base = at_start ? index_size : 0;
      EXPECT_EQ(entries[0], Entry(base, 48));
      EXPECT_EQ(entries[1], Entry(base + 48, 48));
      EXPECT_EQ(entries[2], Entry(kMissing, kMissing));  // all fill: not stored
      EXPECT_EQ(entries[3], Entry(base + 96, 48));
      // Inner chunk 1 (rows 0-3, columns 3-5) is stored as its C-order elements.
      const auto v = test::values_from<std::int32_t>(data);
      const auto stored1 =
          test::values_from<std::int32_t>(std::span<const std::byte>(shard).subspan(
              static_cast<std::size_t>(entries[1].first), 48));
      EXPECT_EQ(stored1[0], v[3]);
      EXPECT_EQ(stored1[4], v[6 + 4]);

      EXPECT_EQ(decode_full(chain, shard, test::full_selection(kShard)), data);
      for (int i = 0; i < 30; ++i) {
        const auto sel = test::random_selection(rng, kShard);
        ASSERT_EQ(decode_full(chain, shard, sel), test::naive_select(data, kShard, sel, 4))
            << test::describe(sel);
      }
    }
  }
}

// A shard encoded as its pieces (what the engine hands a store to write without copying it
// whole) holds the stored chunks and the index, in the order of the shard the codec encodes.
TEST(Sharding, AShardsPiecesAreTheEncodedShardInOrder) {
  for (const char* location : {"start", "end"}) {
    SCOPED_TRACE(location);
    const auto spec = make_spec(kShard, "int32", test::le_bytes(0, 4));
    const CodecChain chain(sharding(kInner, kPlain, location), spec);
    const Bytes data = shard_data(kShard, kInner, {2}, 0, 10);
    const Bytes whole = test::to_bytes(*chain.encode(data));
    const auto* layout = chain.shard_layout();
    ASSERT_NE(layout, nullptr);
    const auto pieces =
        layout->encode_shard(data.data(), place::c_strides(kShard, 4),
                             [](std::size_t n, const std::function<void(std::size_t)>& body) {
                               for (std::size_t i = n; i-- > 0;) body(i);  // any order
                             });
    ASSERT_TRUE(pieces.has_value());
    ASSERT_EQ(pieces->parts.size(), 4U);  // three stored chunks and the index
    const std::size_t index_part = std::string(location) == "start" ? 0 : 3;
    EXPECT_EQ(pieces->parts[index_part].size(), 4 * 16 + 4);
    Bytes joined;
    for (const auto& part : pieces->parts) joined.insert(joined.end(), part.begin(), part.end());
    EXPECT_EQ(joined, whole);
    EXPECT_EQ(pieces->size(), whole.size());
    EXPECT_EQ(test::to_bytes(pieces->joined()), whole);
  }
  // A shard all fill value has no pieces: nothing to store.
  const auto spec = make_spec(kShard, "int32", test::le_bytes(5, 4));
  const CodecChain chain(sharding(kInner, kPlain), spec);
  const Bytes fill = shard_data(kShard, kInner, {0, 1, 2, 3}, 5, 1);
  EXPECT_FALSE(chain.shard_layout()
                   ->encode_shard(fill.data(), place::c_strides(kShard, 4),
                                  [](std::size_t n, const std::function<void(std::size_t)>& body) {
                                    for (std::size_t i = 0; i < n; ++i) body(i);
                                  })
                   .has_value());
}

TEST(Sharding, InnerChunksThatAreRunsOfTheShardAreEncodedWhereTheyAre) {
  const auto in_order = [](std::size_t n, const std::function<void(std::size_t)>& body) {
    for (std::size_t i = 0; i < n; ++i) body(i);
  };
  const auto points_into = [](std::span<const std::byte> part, const Bytes& data) {
    return part.data() >= data.data() && part.data() < data.data() + data.size();
  };
  const json crc = json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}},
                                   {"name": "crc32c"}])");
  const json big = json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}}])");
  struct Case {
    std::vector<std::int64_t> inner;
    json codecs;
    bool views;             // the stored inner chunks are views of the shard
    std::size_t per_chunk;  // pieces an inner chunk is stored as
    std::size_t stored;     // inner chunks stored (not all fill value)
  };
  // Rows of the shard are one run each (a crc32c is a piece of its own after them); a 4 x 3
  // inner chunk is not; a big-endian layout changes the bytes.
  for (const auto& [inner, codecs, views, per_chunk, stored] :
       {Case{{2, 6}, kPlain, true, 1, 3}, Case{{1, 6}, kPlain, true, 1, 6},
        Case{{4, 3}, kPlain, false, 1, 4}, Case{{2, 6}, crc, true, 2, 3},
        Case{{2, 6}, big, false, 1, 3}}) {
    SCOPED_TRACE(codecs.dump() + " " + std::to_string(inner[0]) + "x" + std::to_string(inner[1]));
    const auto spec = make_spec(kShard, "int32", test::le_bytes(7, 4));
    const CodecChain chain(sharding(inner, codecs), spec);
    const auto* layout = chain.shard_layout();
    ASSERT_NE(layout, nullptr);
    EXPECT_EQ(layout->inner().is_plain(), codecs == kPlain);
    Bytes data = test::random_bytes(spec.nbytes(), 5);
    // Rows 2-3 all fill value: the inner chunk(s) there are left out, views or not.
    const Bytes fill = test::le_bytes(7, 4);
    for (std::size_t i = 2 * 6; i < 4 * 6; ++i) {
      std::copy_n(fill.begin(), 4, data.begin() + static_cast<std::ptrdiff_t>(4 * i));
    }
    const auto strides = place::c_strides(kShard, 4);
    EXPECT_EQ(layout->runs_of(strides), inner[1] == 6);
    const auto pieces = layout->encode_shard(data.data(), strides, in_order);
    ASSERT_TRUE(pieces.has_value());
    std::size_t viewing = 0;
    for (const auto& part : pieces->parts) viewing += points_into(part, data) ? 1 : 0;
    EXPECT_EQ(pieces->parts.size(), stored * per_chunk + 1);  // and the index
    EXPECT_EQ(viewing, views ? stored : 0);
    const Bytes joined = test::to_bytes(pieces->joined());
    EXPECT_EQ(joined, test::to_bytes(*chain.encode(data)));
    EXPECT_EQ(decode_full(chain, joined, test::full_selection(kShard)), data);
  }
  // The shard as the left half of wider values: its rows are no longer runs, so they are copied.
  const auto spec = make_spec(kShard, "int32", test::le_bytes(0, 4));
  const CodecChain chain(sharding({2, 6}, kPlain), spec);
  const std::vector<std::int64_t> wide = {8, 12};
  const std::vector<std::int64_t> tall = {16, 6};
  EXPECT_FALSE(chain.shard_layout()->runs_of(place::c_strides(wide, 4)));
  EXPECT_TRUE(chain.shard_layout()->runs_of(place::c_strides(tall, 4)));
}

TEST(Sharding, AllFillShardEncodesToNothing) {
  const auto spec = make_spec(kShard, "int32", test::le_bytes(5, 4));
  const CodecChain chain(sharding(kInner, kPlain), spec);
  EXPECT_FALSE(chain.encode(shard_data(kShard, kInner, {0, 1, 2, 3}, 5, 1)).has_value());
  // Zero is not the fill value here, so zeros are stored.
  EXPECT_TRUE(chain.encode(Bytes(spec.nbytes(), std::byte{0})).has_value());
}

TEST(Sharding, MissingInnerChunksReadAsFill) {
  for (bool at_start : {false, true}) {
    SCOPED_TRACE(at_start);
    const auto spec = make_spec(kShard, "int32", test::le_bytes(0xfffffff9, 4));  // -7
    const CodecChain chain(sharding(kInner, kPlain, at_start ? "start" : "end"), spec);
    std::vector<std::int32_t> chunk1(12);
    for (int i = 0; i < 12; ++i) chunk1[i] = 100 + i;
    // Only inner chunk 1 is stored.
    const Bytes shard =
        build_shard({std::nullopt, test::bytes_from(chunk1), std::nullopt, std::nullopt}, at_start);
    const auto out =
        test::values_from<std::int32_t>(decode_full(chain, shard, test::full_selection(kShard)));
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 6; ++c) {
        const std::int32_t expected = (r < 4 && c >= 3) ? 100 + r * 3 + (c - 3) : -7;
        EXPECT_EQ(out[r * 6 + c], expected) << r << "," << c;
      }
    }
    // A shard whose index lists nothing at all.
    const Bytes empty =
        build_shard({std::nullopt, std::nullopt, std::nullopt, std::nullopt}, at_start);
    const auto none =
        test::values_from<std::int32_t>(decode_full(chain, empty, {{1, 3, 3}, {0, 2, 3}}));
    EXPECT_EQ(none, std::vector<std::int32_t>(9, -7));
  }
}

TEST(Sharding, NestedCodecs) {
  const json inner_codecs[] = {
      // transpose inside the shard, big-endian bytes, a checksum per inner chunk
      json::parse(R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
                      {"name": "bytes", "configuration": {"endian": "big"}},
                      {"name": "crc32c"}])"),
      json::parse(R"([{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}])"),
      // a shard inside the shard
      sharding({2, 3}, json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])"), "start"),
  };
  std::mt19937 rng(2);
  for (const auto& codecs : inner_codecs) {
    for (const char* location : {"start", "end"}) {
      SCOPED_TRACE(codecs.dump() + " " + location);
      const std::vector<std::int64_t> inner =
          codecs[0]["name"] == "sharding_indexed" ? std::vector<std::int64_t>{4, 6} : kInner;
      const auto spec = make_spec(kShard, "int32");
      const CodecChain chain(sharding(inner, codecs, location), spec);
      const Bytes data = shard_data(kShard, inner, {1}, 0, 3);
      const Bytes shard = test::to_bytes(*chain.encode(data));
      EXPECT_EQ(decode_full(chain, shard, test::full_selection(kShard)), data);
      const CountingReader reader{&shard, {}};
      for (int i = 0; i < 20; ++i) {
        const auto sel = test::random_selection(rng, kShard);
        const Bytes expected = test::naive_select(data, kShard, sel, 4);
        ASSERT_EQ(decode_full(chain, shard, sel), expected) << test::describe(sel);
        ASSERT_EQ(decode_partial(chain, reader, sel), expected) << test::describe(sel);
      }
    }
  }
  // The index codecs can differ too: big-endian index without a checksum.
  const auto spec = make_spec(kShard, "int32");
  const CodecChain chain(
      sharding(kInner, kPlain, "end",
               json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}}])")),
      spec);
  const Bytes data = shard_data(kShard, kInner, {}, 0, 4);
  const Bytes shard = test::to_bytes(*chain.encode(data));
  ASSERT_EQ(shard.size(), 4 * 48 + 4 * 16u);
  // The first index entry's offset, big endian: 0; its length: 48 in the last byte.
  EXPECT_EQ(shard[4 * 48 + 15], std::byte{48});
  EXPECT_EQ(decode_full(chain, shard, test::full_selection(kShard)), data);
}

TEST(Sharding, PartialDecodeReadsOnlyTheNeededRanges) {
  for (bool at_start : {false, true}) {
    SCOPED_TRACE(at_start ? "index at start" : "index at end");
    const auto spec = make_spec(kShard, "int32");
    const CodecChain chain(sharding(kInner, kPlain, at_start ? "start" : "end"), spec);
    EXPECT_TRUE(chain.supports_partial_decode());
    const Bytes data = shard_data(kShard, kInner, {2}, 0, 5);
    const Bytes shard = test::to_bytes(*chain.encode(data));
    const std::int64_t index_size = 68;
    const auto shard_size = static_cast<std::int64_t>(shard.size());
    const auto index_call =
        at_start ? std::pair<std::int64_t, std::int64_t>(0, index_size)
                 : std::pair<std::int64_t, std::int64_t>(shard_size - index_size, index_size);
    const auto entries = parse_index(at_start ? std::span<const std::byte>(shard).first(68)
                                              : std::span<const std::byte>(shard).last(68),
                                     4);
    auto entry_call = [&](std::size_t i) {
      return std::pair<std::int64_t, std::int64_t>(static_cast<std::int64_t>(entries[i].first),
                                                   static_cast<std::int64_t>(entries[i].second));
    };

    // Inside inner chunk 3 only: the index, then that chunk.
    CountingReader reader{&shard, {}};
    std::vector<DimSlice> sel = {{5, 1, 2}, {4, 1, 2}};
    EXPECT_EQ(decode_partial(chain, reader, sel), test::naive_select(data, kShard, sel, 4));
    EXPECT_EQ(reader.calls,
              (std::vector<std::pair<std::int64_t, std::int64_t>>{index_call, entry_call(3)}));
    // Across inner chunks 0 and 1: two chunk reads.
    reader.calls.clear();
    sel = {{1, 1, 1}, {0, 1, 6}};
    EXPECT_EQ(decode_partial(chain, reader, sel), test::naive_select(data, kShard, sel, 4));
    EXPECT_EQ(reader.calls, (std::vector<std::pair<std::int64_t, std::int64_t>>{
                                index_call, entry_call(0), entry_call(1)}));
    // Only the missing chunk 2: nothing but the index, and fill value out.
    reader.calls.clear();
    sel = {{4, 2, 2}, {0, 2, 2}};
    EXPECT_EQ(decode_partial(chain, reader, sel), Bytes(16, std::byte{0}));
    EXPECT_EQ(reader.calls.size(), 1u);
    // Everything: equals the full decode.
    reader.calls.clear();
    sel = test::full_selection(kShard);
    EXPECT_EQ(decode_partial(chain, reader, sel), decode_full(chain, shard, sel));
    EXPECT_EQ(reader.calls.size(), 4u);  // index + 3 stored chunks
    // The shard shrank after its size was taken: an error, not a short read taken as data.
    if (!at_start) {
      EXPECT_THROW(decode_partial(chain, reader, sel, shard.size() + 10), CodecError);
    }
    const Bytes shorter(shard.begin(), shard.end() - 1);
    const CountingReader short_reader{&shorter, {}};
    EXPECT_THROW(decode_partial(chain, short_reader, sel, shard.size()), CodecError);
  }
  // With a bytes->bytes codec after the shard, byte ranges are not the shard's: no partial decode.
  const CodecChain wrapped(
      json::parse(R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 3],
                      "codecs": [{"name": "bytes"}]}}, {"name": "crc32c"}])"),
      make_spec(kShard, "int32"));
  EXPECT_FALSE(wrapped.supports_partial_decode());
}

// Every way of decoding `shard` must throw E.
template <typename E>
void expect_decode_throws(const CodecChain& chain, const Bytes& shard, const std::string& what,
                          const char* message_part = nullptr) {
  SCOPED_TRACE(what);
  for (const auto& sel :
       {test::full_selection(kShard), std::vector<DimSlice>{{0, 1, 8}, {0, 3, 2}}}) {
    try {
      decode_full(chain, shard, sel);
      ADD_FAILURE() << "decode_into did not throw";
    } catch (const E& e) {
      if (message_part)
        EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
    const CountingReader reader{&shard, {}};
    try {
      decode_partial(chain, reader, sel);
      ADD_FAILURE() << "decode_partial did not throw";
    } catch (const E& e) {
      if (message_part)
        EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
    }
  }
}

TEST(Sharding, CorruptIndexRaisesCodecError) {
  for (bool at_start : {false, true}) {
    SCOPED_TRACE(at_start ? "index at start" : "index at end");
    const auto spec = make_spec(kShard, "int32");
    const CodecChain chain(sharding(kInner, kPlain, at_start ? "start" : "end"), spec);
    const Bytes data = shard_data(kShard, kInner, {}, 0, 6);
    const Bytes shard = test::to_bytes(*chain.encode(data));
    const std::uint64_t base = at_start ? 68 : 0;
    const std::vector<Entry> good = {
        {base, 48}, {base + 48, 48}, {base + 96, 48}, {base + 144, 48}};
    ASSERT_EQ(shard, with_index(shard, good, at_start));  // the model of the layout is right

    auto tampered = [&](std::size_t i, Entry e) {
      auto entries = good;
      entries[i] = e;
      return with_index(shard, entries, at_start);
    };
    expect_decode_throws<CodecError>(chain, tampered(3, {shard.size() - 24, 48}), "past the end");
    expect_decode_throws<CodecError>(chain, tampered(0, {1 << 20, 48}), "far past the end");
    expect_decode_throws<CodecError>(chain, tampered(1, {base + 24, 48}), "overlapping", "overlap");
    expect_decode_throws<CodecError>(chain, tampered(2, {base, 48}), "same range as another");
    expect_decode_throws<CodecError>(chain, tampered(1, {kMissing - 15, 32}), "wrapping", "wraps");
    expect_decode_throws<CodecError>(chain, tampered(1, {8, kMissing}), "huge length");
    expect_decode_throws<CodecError>(chain, tampered(1, {kMissing, 48}), "half missing");
    expect_decode_throws<CodecError>(chain, tampered(1, {base + 48, kMissing}), "half missing 2");
    if (at_start) {
      // Inside the index itself.
      expect_decode_throws<CodecError>(chain, tampered(0, {0, 48}), "inside the index");
    } else {
      // Reaching into the index at the end.
      expect_decode_throws<CodecError>(chain, tampered(3, {base + 160, 48}), "into the index");
    }
    // A length that fits the bounds but not the inner chunk: the inner decode fails, naming it.
    expect_decode_throws<CodecError>(chain, tampered(3, {base + 144, 44}), "short inner chunk",
                                     "inner chunk 3");
  }
}

TEST(Sharding, PartialDecodeNeverTurnsLargeOffsetsIntoSuffixReads) {
  // An index entry's offset is unsigned; one of 2^63 or more must be rejected, not handed to the
  // RangeReader as a negative ("last n bytes") offset.

  const CodecChain chain(sharding(kInner, kPlain, "end"), make_spec(kShard, "int32"));
  const Bytes shard = test::to_bytes(*chain.encode(shard_data(kShard, kInner, {}, 0, 12)));
  for (std::uint64_t offset : {std::uint64_t{1} << 63, kMissing - 1000, kMissing - 300}) {
    SCOPED_TRACE(offset);
    const Bytes bad = with_index(shard, {{0, 48}, {48, 48}, {96, 48}, {offset, 48}}, false);
    const CountingReader reader{&bad, {}};
    EXPECT_THROW(decode_partial(chain, reader, test::full_selection(kShard)), CodecError);
    for (std::size_t i = 0; i < reader.calls.size(); ++i) {
      EXPECT_GE(reader.calls[i].first, 0) << "read " << i << " asks for a suffix";
    }
    EXPECT_THROW(decode_full(chain, bad, test::full_selection(kShard)), CodecError);
  }
}

TEST(Sharding, IndexChecksumMismatchRaisesChecksumError) {
  for (bool at_start : {false, true}) {
    SCOPED_TRACE(at_start);
    const CodecChain chain(sharding(kInner, kPlain, at_start ? "start" : "end"),
                           make_spec(kShard, "int32"));
    const Bytes shard = test::to_bytes(*chain.encode(shard_data(kShard, kInner, {}, 0, 7)));
    const std::size_t index_at = at_start ? 0 : shard.size() - 68;
    for (std::size_t flip : {std::size_t{0}, std::size_t{17}, std::size_t{63}, std::size_t{66}}) {
      Bytes bad = shard;
      bad[index_at + flip] ^= std::byte{0x10};
      expect_decode_throws<ChecksumError>(chain, bad, "flip at " + std::to_string(flip),
                                          "shard index");
    }
    // Damage in an inner chunk is not covered by the index checksum (no inner crc32c): it decodes.
    Bytes inner = shard;
    inner[at_start ? 70 : 2] ^= std::byte{1};
    EXPECT_NO_THROW(decode_full(chain, inner, test::full_selection(kShard)));
  }
  // With a crc32c per inner chunk, damage there is a ChecksumError naming the inner chunk.
  const CodecChain checked(
      sharding(kInner, json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])"), "end"),
      make_spec(kShard, "int32"));
  Bytes shard = test::to_bytes(*checked.encode(shard_data(kShard, kInner, {}, 0, 8)));
  shard[52 + 5] ^= std::byte{1};  // inside inner chunk 1 (each is 48 + 4 bytes)
  expect_decode_throws<ChecksumError>(checked, shard, "inner crc", "inner chunk 1");
}

TEST(Sharding, TruncatedShardRaisesCodecError) {
  for (bool at_start : {false, true}) {
    SCOPED_TRACE(at_start);
    const CodecChain chain(sharding(kInner, kPlain, at_start ? "start" : "end"),
                           make_spec(kShard, "int32"));
    const Bytes data = shard_data(kShard, kInner, {}, 0, 9);
    const Bytes shard = test::to_bytes(*chain.encode(data));
    for (std::size_t length = 0; length < shard.size(); ++length) {
      const Bytes cut(shard.begin(), shard.begin() + static_cast<std::ptrdiff_t>(length));
      SCOPED_TRACE(length);
      EXPECT_THROW(decode_full(chain, cut, test::full_selection(kShard)), CodecError);
      const CountingReader reader{&cut, {}};
      EXPECT_THROW(decode_partial(chain, reader, test::full_selection(kShard)), CodecError);
    }
  }
}

TEST(Sharding, RandomDamageNeverCrashes) {
  // Whatever the bytes, decoding either succeeds or raises CodecError (the sanitizers catch any
  // out-of-bounds access).
  const CodecChain chain(sharding(kInner, json::parse(R"([{"name": "bytes"}, {"name": "gzip"}])"),
                                  "end", json::parse(R"([{"name": "bytes"}])")),
                         make_spec(kShard, "int32"));
  const Bytes shard = test::to_bytes(*chain.encode(shard_data(kShard, kInner, {1}, 0, 10)));
  std::mt19937 rng(10);
  for (int i = 0; i < 300; ++i) {
    Bytes bad = shard;
    for (int flips = 1 + rng() % 4; flips > 0; --flips) {
      bad[rng() % bad.size()] = static_cast<std::byte>(rng());
    }
    try {
      decode_full(chain, bad, test::random_selection(rng, kShard));
    } catch (const CodecError&) {
    }
    const CountingReader reader{&bad, {}};
    try {
      decode_partial(chain, reader, test::random_selection(rng, kShard));
    } catch (const CodecError&) {
    }
  }
}

TEST(Sharding, InvalidConfigurationsRaiseFormatError) {
  const auto spec = make_spec(kShard, "int32");
  const char* const cases[] = {
      R"({"chunk_shape": [3, 3], "codecs": [{"name": "bytes"}]})",  // does not divide
      R"({"chunk_shape": [4], "codecs": [{"name": "bytes"}]})",     // rank
      R"({"chunk_shape": [4, 0], "codecs": [{"name": "bytes"}]})",
      R"({"chunk_shape": [4, -3], "codecs": [{"name": "bytes"}]})",
      R"({"chunk_shape": "4,3", "codecs": [{"name": "bytes"}]})",
      R"({"codecs": [{"name": "bytes"}]})",
      R"({"chunk_shape": [4, 3]})",
      R"({"chunk_shape": [4, 3], "codecs": []})",
      R"({"chunk_shape": [4, 3], "codecs": [{"name": "gzip"}]})",
      R"({"chunk_shape": [4, 3], "codecs": [{"name": "bytes"}], "index_location": "middle"})",
      R"({"chunk_shape": [4, 3], "codecs": [{"name": "bytes"}],
          "index_codecs": [{"name": "bytes"}, {"name": "gzip"}]})",  // index size not fixed
      R"({"chunk_shape": [4, 3], "codecs": [{"name": "bytes"}], "index_codecs": []})",
  };
  for (const char* config : cases) {
    SCOPED_TRACE(config);
    const json codecs =
        json::array({{{"name", "sharding_indexed"}, {"configuration", json::parse(config)}}});
    EXPECT_THROW(CodecChain(codecs, spec), FormatError);
  }
}

TEST(Sharding, ToJsonFillsDefaults) {
  const CodecChain chain(
      json::parse(R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [4, 3],
                      "codecs": [{"name": "bytes"}]}}])"),
      make_spec(kShard, "int32"));
  EXPECT_EQ(chain.to_json(), json::parse(R"([{"name": "sharding_indexed", "configuration": {
      "chunk_shape": [4, 3],
      "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
      "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "crc32c"}],
      "index_location": "end"}}])"));
  // The defaults are what the encoder writes: index at the end with a CRC.
  const Bytes data = shard_data(kShard, kInner, {}, 0, 11);
  const Bytes shard = test::to_bytes(*chain.encode(data));
  const auto index = std::span<const std::byte>(shard).last(68);
  EXPECT_EQ(test::le_bits(index.last(4)), codecs::crc32c(index.first(64)));
  EXPECT_EQ(parse_index(index, 4)[0], Entry(0, 48));
}

}  // namespace
}  // namespace zarr_device
