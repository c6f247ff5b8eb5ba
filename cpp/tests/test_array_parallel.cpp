// Tests of the engine's parallel reads and writes end to end: chunks and a shard's inner chunks
// decoded and encoded side by side within the byte budget, values written from the caller's
// buffer without a copy, and many threads under a tiny budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "array_test_util.hpp"

namespace array_tests {
namespace {

// A bytes->bytes codec that stores its input as it is and, decoding or encoding, waits a little
// while it counts the decodes (or encodes) running at once.
struct Overlap {
  std::atomic<int> now{0};
  std::atomic<int> most{0};

  void wait_counted() {
    const int running = ++now;
    for (int seen = most; running > seen && !most.compare_exchange_weak(seen, running);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    --now;
  }
};
Overlap overlap;         // decodes
Overlap encode_overlap;  // encodes

class OverlapCodec final : public zd::BytesToBytesCodec {
 public:
  [[nodiscard]] std::string_view name() const override { return "test.overlap"; }
  [[nodiscard]] json to_json() const override { return {{"name", "test.overlap"}}; }
  [[nodiscard]] zd::Buffer decode(const zd::Buffer& encoded, zd::DecodedSize) const override {
    overlap.wait_counted();
    return encoded;
  }
  [[nodiscard]] zd::Buffer encode(const zd::Buffer& decoded) const override {
    encode_overlap.wait_counted();
    return decoded;
  }
};

// A read leases a chunk's stored bytes and the buffers its decode makes: chunks decompressed
// straight into place with a checksum outside take one stored chunk each, so as many decode at
// once as the budget holds, rather than one at a time for a lease of three times the chunk.
void register_overlap_codec() {
  static const bool registered = [] {
    zd::CodecRegistry::instance().add("test.overlap", [](const json&, const zd::CodecContext&) {
      return std::make_shared<OverlapCodec>();
    });
    return true;
  }();
  (void)registered;
}

TEST_P(Array, LargeChunksDecodeSideBySideWithinTheBudget) {
  register_overlap_codec();
  const std::vector<std::int64_t> shape = {8 * 128, 128};  // 8 chunks of 64 KiB
  auto a = create(array_doc(
      shape, {128, 128}, "int32", 0,
      json::parse(R"([{"name": "bytes"}, {"name": "test.overlap"}, {"name": "crc32c"}])")));
  const Bytes model = zd::test::random_bytes(8 * 128 * 128 * 4, 17);
  a->write(zd::test::full_selection(shape), model);
  // A stored chunk: 64 KiB and its checksum. Three and a half of them: three decode at once.
  constexpr std::size_t kStored = 128 * 128 * 4 + 4;
  overlap.most = 0;
  ASSERT_EQ(read_all(*a, IoOptions{8, 3 * kStored + kStored / 2}), model);
  EXPECT_GE(overlap.most.load(), 2);
  EXPECT_LE(overlap.most.load(), 3);
}

// The inner chunks of one shard decode on several threads: a read of one large shard is not
// one thread's work.
TEST_P(Array, TheInnerChunksOfAShardDecodeSideBySide) {
  register_overlap_codec();
  const std::vector<std::int64_t> shape = {64, 128};
  auto a = create(array_doc(
      shape, {64, 128}, "int32", 0,
      sharded_codecs({8, 128}, json::parse(R"([{"name": "bytes"}, {"name": "test.overlap"}])"))));
  Bytes model = zd::test::random_bytes(64 * 128 * 4, 23);
  a->write(zd::test::full_selection(shape), model);
  overlap.most = 0;
  ASSERT_EQ(read_all(*a, IoOptions{4}), model);
  EXPECT_GE(overlap.most.load(), 2);
  // Rows 8-15 all fill value: that inner chunk is left out of the shard and reads as fill. A part
  // of the shard reads as the model says.
  const std::vector<DimSlice> zeros = {{8, 1, 8}, {0, 1, 128}};
  const Bytes fill(8 * 128 * 4);
  a->write(zeros, fill);
  zd::test::naive_assign(model, shape, zeros, fill, 4);
  EXPECT_EQ(read_all(*a, IoOptions{4}), model);
  const std::vector<DimSlice> rows = {{3, 2, 20}, {5, 3, 40}};
  EXPECT_EQ(read(*a, rows, IoOptions{4}), zd::test::naive_select(model, shape, rows, 4));
}

// The inner chunks of one shard encode on several threads, even when the budget holds one shard
// at a time: a write of a large shard is not one thread's work.
TEST_P(Array, TheInnerChunksOfAShardEncodeSideBySide) {
  register_overlap_codec();
  const std::vector<std::int64_t> shape = {128, 128};  // two shards of 8 inner chunks each
  auto a = create(array_doc(
      shape, {64, 128}, "int32", 0,
      sharded_codecs({8, 128}, json::parse(R"([{"name": "bytes"}, {"name": "test.overlap"}])"))));
  Bytes model = zd::test::random_bytes(128 * 128 * 4, 29);
  // Rows 8-15 all fill value: that inner chunk is left out of its shard.
  std::fill(model.begin() + 8 * 128 * 4, model.begin() + 16 * 128 * 4, std::byte{0});
  encode_overlap.most = 0;
  a->write(zd::test::full_selection(shape), model, IoOptions{4, 1});
  EXPECT_GE(encode_overlap.most.load(), 2);
  EXPECT_EQ(read_all(*a, IoOptions{4}), model);
  // A write into part of a shard reads it, updates it and encodes it the same way.
  const std::vector<DimSlice> part = {{60, 1, 10}, {3, 5, 20}};
  const Bytes values = zd::test::random_bytes(10 * 20 * 4, 31);
  a->write(part, values, IoOptions{4, 1});
  zd::test::naive_assign(model, shape, part, values, 4);
  EXPECT_EQ(read_all(*a, IoOptions{4}), model);
  // A shard across the array's edge (rows 64-99 of its 128) is filled past the edge first; a
  // strided selection that covers no shard whole updates both.
  store_->erase_prefix("");
  const std::vector<std::int64_t> edge_shape = {100, 128};
  auto b = create(
      array_doc(edge_shape, {64, 128}, "int32", 0,
                sharded_codecs({8, 128}, json::parse(R"([{"name": "bytes"}, {"name": "zstd"}])"))));
  Bytes edge_model = zd::test::random_bytes(100 * 128 * 4, 37);
  b->write(zd::test::full_selection(edge_shape), edge_model, IoOptions{4, 1});
  EXPECT_EQ(read_all(*b, IoOptions{4}), edge_model);
  const std::vector<DimSlice> strided = {{1, 3, 33}, {0, 2, 64}};
  const Bytes update = zd::test::random_bytes(33 * 64 * 4, 41);
  b->write(strided, update, IoOptions{4, 1});
  zd::test::naive_assign(edge_model, edge_shape, strided, update, 4);
  EXPECT_EQ(read_all(*b, IoOptions{4}), edge_model);
}

// A chunk that is one run of the values (it spans their trailing dimensions) is encoded from
// them, without a copy; others are copied first. Both read back, with chunks all fill value
// left out, whole and in part, under a budget of one byte and of plenty.
TEST_P(Array, ChunksThatAreOneRunOfTheValuesAreWrittenFromThem) {
  const std::vector<std::int64_t> shape = {64, 48};
  for (const std::vector<std::int64_t> chunks :
       {std::vector<std::int64_t>{8, 48}, {8, 16}, {1, 48}, {64, 48}}) {
    SCOPED_TRACE(std::to_string(chunks[0]) + "x" + std::to_string(chunks[1]));
    store_->erase_prefix("");
    auto a = create(
        array_doc(shape, chunks, "int32", 0,
                  json::parse(R"([{"name": "bytes"}, {"name": "zstd"}, {"name": "crc32c"}])")));
    Bytes model = zd::test::random_bytes(64 * 48 * 4, 43);
    std::fill(model.begin(), model.begin() + 48 * 4, std::byte{0});  // row 0 all fill value
    a->write(zd::test::full_selection(shape), model, IoOptions{4, 1});
    EXPECT_EQ(read_all(*a, IoOptions{4}), model);
    EXPECT_EQ(store_->exists("arr/c/0/0"), chunks[0] != 1);  // all fill: not stored
    // Rows 8-15 whole (one run for 8-row chunks) and a strided part.
    for (const std::vector<DimSlice>& part :
         {std::vector<DimSlice>{{8, 1, 8}, {0, 1, 48}}, {{3, 2, 20}, {5, 1, 40}}}) {
      const Bytes values =
          zd::test::random_bytes(static_cast<std::size_t>(part[0].count * part[1].count) * 4, 47);
      a->write(part, values, IoOptions{4, std::size_t{1} << 30});
      zd::test::naive_assign(model, shape, part, values, 4);
      EXPECT_EQ(read_all(*a, IoOptions{4}), model);
    }
  }
}

// Forwards to a store and counts the pieces of the shards set through it that point into
// `watched` (the values of a write) and those that do not (indexes, copies).
class PieceCountingStore final : public zd::test::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void set_pieces(std::string_view key,
                  std::span<const std::span<const std::byte>> pieces) override {
    for (const auto& piece : pieces) {
      const bool inside =
          piece.data() >= watched.data() && piece.data() < watched.data() + watched.size();
      ++(inside ? viewing : other);
    }
    inner_->set_pieces(key, pieces);  // the inner store writes the pieces as they are
  }

  std::span<const std::byte> watched;
  std::atomic<int> viewing{0};
  std::atomic<int> other{0};
};

TEST_P(Array, ShardsOfRunsOfTheValuesAreWrittenFromThem) {
  const std::vector<std::int64_t> shape = {64, 48};
  struct Case {
    std::vector<std::int64_t> shard;
    std::vector<std::int64_t> inner;
    json codecs;
    int views;  // inner chunks of a whole write that are views of its values
  };
  const json plain = json::parse(R"([{"name": "bytes"}])");
  const json checked = json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])");
  const json swapped = json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}}])");
  // 8 shards of 4 inner chunks of two rows, the first all fill value (a checksum is a piece of
  // its own after the elements); or inner chunks that are not runs of the values (16 of 48
  // columns), or whose stored bytes are not the elements.
  for (const auto& [shard, inner, codecs, views] :
       {Case{{8, 48}, {2, 48}, plain, 31}, Case{{8, 48}, {2, 48}, checked, 31},
        Case{{8, 16}, {2, 16}, plain, 0}, Case{{8, 48}, {2, 48}, swapped, 0}}) {
    SCOPED_TRACE(codecs.dump() + " inner " + std::to_string(inner[1]) + " columns");
    for (const IoOptions& options : {IoOptions{4, 1}, IoOptions{3, std::size_t{1} << 30}}) {
      SCOPED_TRACE("budget " + std::to_string(options.max_inflight_bytes));
      store_->erase_prefix("");
      auto counting = std::make_shared<PieceCountingStore>(store_);
      const auto doc = array_doc(shape, shard, "int32", 0, sharded_codecs(inner, codecs));
      const auto a = zd::Array::create(counting, "arr", doc, false);
      Bytes model = zd::test::random_bytes(64 * 48 * 4, 53);
      std::fill(model.begin(), model.begin() + 2 * 48 * 4, std::byte{0});  // rows 0-1: fill value
      counting->watched = model;
      a->write(zd::test::full_selection(shape), model, options);
      EXPECT_EQ(counting->viewing.load(), views);
      EXPECT_EQ(read_all(*a, IoOptions{4}), model);
      // A strided part (shards made here, their inner chunks views of them when plain runs).
      const std::vector<DimSlice> part = {{3, 2, 20}, {5, 1, 40}};
      const Bytes values = zd::test::random_bytes(20 * 40 * 4, 59);
      a->write(part, values, options);
      zd::test::naive_assign(model, shape, part, values, 4);
      EXPECT_EQ(read_all(*a, IoOptions{4}), model);
      // Rows 8-15 whole: one shard from the values.
      const std::vector<DimSlice> rows = {{8, 1, 8}, {0, 1, 48}};
      const Bytes row_values = zd::test::random_bytes(8 * 48 * 4, 61);
      counting->watched = row_values;
      counting->viewing = 0;
      a->write(rows, row_values, options);
      EXPECT_EQ(counting->viewing.load(), views == 0 ? 0 : 4);
      zd::test::naive_assign(model, shape, rows, row_values, 4);
      EXPECT_EQ(read_all(*a, IoOptions{4}), model);
    }
  }
}

TEST_P(Array, ConcurrencyWithATinyByteBudget) {
  std::mt19937 rng(8);
  const std::vector<std::int64_t> shape = {64, 48};
  const json codec_sets[] = {
      json::parse(R"([{"name": "bytes"}])"),
      json::parse(R"([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}])"),
      sharded_codecs({4, 4}, json::parse(R"([{"name": "bytes"}, {"name": "crc32c"}])")),
  };
  for (const auto& codecs : codec_sets) {
    SCOPED_TRACE(codecs.dump());
    store_->erase_prefix("");
    auto a = create(array_doc(shape, {8, 16}, "float32", 0, codecs));
    for (const IoOptions& options : {IoOptions{4, 1}, IoOptions{4, 100}, IoOptions{0, 1},
                                     IoOptions{3, std::size_t{1} << 30}}) {
      SCOPED_TRACE("threads " + std::to_string(options.threads) + ", budget " +
                   std::to_string(options.max_inflight_bytes));
      Bytes model = zd::test::random_bytes(64 * 48 * 4, rng());
      a->write(zd::test::full_selection(shape), model, options);
      ASSERT_EQ(read_all(*a, options), model);
      const auto sel = zd::test::random_selection(rng, shape, 2);
      ASSERT_EQ(read(*a, sel, options), zd::test::naive_select(model, shape, sel, 4));
      const Bytes values =
          zd::test::random_bytes(product(zd::test::selection_shape(sel)) * 4, rng());
      a->write(sel, values, options);
      zd::test::naive_assign(model, shape, sel, values, 4);
      ASSERT_EQ(read_all(*a, options), model);
    }
  }
}

}  // namespace
}  // namespace array_tests
