// A chunk's selected elements taken from its bytes in one pass (engine/selection_stream.hpp): every
// selection equals the same elements picked from the whole chunk, however the output is cut; the
// chunk's bytes are asked for in order, whole windows nobody wants passed over, the rest of the
// chunk passed over before its checks. Host reads of selections that cut a chunk of 64 MiB or
// more go this way.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/selection_stream.hpp"
#include "gpu_read_test_util.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device::engine {
namespace {

// The bytes 0, 1, 2, ... (mod 251) of a chunk, with a log of what was asked.
class CountingBytes final : public ChunkBytes {
 public:
  explicit CountingBytes(std::string& log) : log_(log) {}
  void fill(std::span<std::byte> window) override {
    for (auto& b : window) b = static_cast<std::byte>(at_++ % 251);
    log_ += "f" + std::to_string(window.size()) + " ";
  }
  void skip(std::uint64_t bytes, std::span<std::byte> /*scratch*/) override {
    at_ += bytes;
    log_ += "s" + std::to_string(bytes) + " ";
  }
  void finish() override { log_ += "end@" + std::to_string(at_); }

 private:
  std::string& log_;
  std::uint64_t at_ = 0;
};

std::vector<std::byte> picked(const std::vector<std::int64_t>& shape,
                              const std::vector<DimSlice>& sel, std::size_t es) {
  std::vector<std::byte> out;
  std::vector<std::int64_t> index(shape.size(), 0);
  const std::int64_t total =
      std::accumulate(sel.begin(), sel.end(), std::int64_t{1},
                      [](std::int64_t n, const DimSlice& s) { return n * s.count; });
  for (std::int64_t e = 0; e < total; ++e) {
    std::uint64_t offset = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      offset = offset * static_cast<std::uint64_t>(shape[d]) +
               static_cast<std::uint64_t>(sel[d].start + index[d] * sel[d].step);
    }
    for (std::size_t b = 0; b < es; ++b)
      out.push_back(static_cast<std::byte>((offset * es + b) % 251));
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < sel[d].count) break;
      index[d] = 0;
    }
  }
  return out;
}

TEST(SelectionStream, EverySelectionEqualsTheElementsPickedFromTheWholeChunk) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t dims = 1 + rng() % 3;
    const std::size_t es = std::size_t{1} << (rng() % 4);
    std::vector<std::int64_t> shape;
    std::vector<DimSlice> sel;
    for (std::size_t d = 0; d < dims; ++d) {
      const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 40);
      shape.push_back(n);
      const std::int64_t start = static_cast<std::int64_t>(rng() % n);
      const std::int64_t step = rng() % 3 == 0 ? 1 + static_cast<std::int64_t>(rng() % 4) : 1;
      const std::int64_t most = (n - start + step - 1) / step;
      sel.push_back({start, step, 1 + static_cast<std::int64_t>(rng() % most)});
      if (rng() % 3 == 0) sel.back() = {0, 1, n};  // whole dimensions after the cut
    }
    const auto expected = picked(shape, sel, es);
    std::string log;
    SelectionStream stream(shape, sel, es, std::make_unique<CountingBytes>(log), 1 + rng() % 64);
    std::vector<std::byte> got(expected.size());
    for (std::size_t at = 0; at < got.size();) {  // in pieces of any size
      const std::size_t n = std::min<std::size_t>(got.size() - at, 1 + rng() % 100);
      stream.fill({got.data() + at, n});
      at += n;
    }
    stream.finish();
    ASSERT_EQ(got, expected) << "trial " << trial;
    std::uint64_t total = es;
    for (const auto n : shape) total *= static_cast<std::uint64_t>(n);
    EXPECT_NE(log.find("end@" + std::to_string(total)), std::string::npos) << log;
  }
}

TEST(SelectionStream, WindowsNobodyWantsArePassedOver) {
  // Rows 50-51 of 100 rows of 1000 bytes, windows of 4096: 12 whole windows passed over, then
  // the windows holding the rows, then the rest passed over and the chunk's checks.
  std::string log;
  SelectionStream stream(std::vector<std::int64_t>{100, 1000},
                         std::vector<DimSlice>{{50, 1, 2}, {0, 1, 1000}}, 1,
                         std::make_unique<CountingBytes>(log), 4096);
  std::vector<std::byte> out(2000);
  stream.fill(out);
  stream.finish();
  EXPECT_EQ(log, "s49152 f4096 s46752 end@100000");
  EXPECT_EQ(out, picked({100, 1000}, {{50, 1, 2}, {0, 1, 1000}}, 1));
  EXPECT_THROW(stream.fill(std::span<std::byte>(out.data(), 1)), std::logic_error);
}

TEST(SelectionStream, ContiguousStretchesAreRowsOrPartOfOne) {
  const std::vector<std::int64_t> shape = {10, 20, 30};
  auto stretch = [&](std::vector<DimSlice> sel) { return contiguous_stretch(shape, sel, 4); };
  const auto whole = stretch({{0, 1, 10}, {0, 1, 20}, {0, 1, 30}});
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->offset, 0u);
  EXPECT_EQ(whole->bytes, 10u * 20 * 30 * 4);
  const auto rows = stretch({{3, 1, 4}, {0, 1, 20}, {0, 1, 30}});
  ASSERT_TRUE(rows);
  EXPECT_EQ(rows->offset, 3u * 20 * 30 * 4);
  EXPECT_EQ(rows->bytes, 4u * 20 * 30 * 4);
  const auto inner = stretch({{2, 1, 1}, {5, 1, 3}, {0, 1, 30}});
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->offset, (2u * 20 * 30 + 5 * 30) * 4);
  EXPECT_EQ(inner->bytes, 3u * 30 * 4);
  const auto element = stretch({{9, 1, 1}, {19, 5, 1}, {7, 1, 1}});
  ASSERT_TRUE(element);
  EXPECT_EQ(element->offset, (9u * 20 * 30 + 19 * 30 + 7) * 4);
  EXPECT_EQ(element->bytes, 4u);
  EXPECT_FALSE(stretch({{3, 1, 2}, {5, 1, 3}, {0, 1, 30}}));    // rows of two blocks
  EXPECT_FALSE(stretch({{0, 1, 10}, {0, 1, 20}, {0, 1, 29}}));  // a column short
  EXPECT_FALSE(stretch({{0, 2, 5}, {0, 1, 20}, {0, 1, 30}}));   // every other block
}

// Host reads of selections that cut one 64 MiB chunk (rows, a box, steps, one element), into a
// whole output and into a box of a larger one: equal the elements written, for zstd, zstd +
// crc32c and chunks stored as they are; damage in rows not selected is still found.
TEST(SelectionStream, HostReadsOfLargeChunksCutBySelections) {
  using device_read::test_support::make_array;
  using test::json;
  const std::vector<std::int64_t> shape = {4096, 4096};  // int32: one 64 MiB chunk
  const std::vector<std::vector<DimSlice>> selections = {
      {{1024, 1, 1024}, {0, 1, 4096}},
      {{5, 1, 4000}, {100, 1, 3000}},
      {{3, 7, 500}, {1, 9, 400}},
      {{4095, 1, 1}, {4095, 1, 1}},
  };
  const json kPlain = json::array({{{"name", "bytes"}}});
  auto store = make_memory_store();
  std::size_t n = 0;
  for (const auto& codecs : {device_read::test_support::kZstdCrc, kPlain,
                             json::array({{{"name", "bytes"}}, {{"name", "zstd"}}})}) {
    const auto array = make_array(store, "h" + std::to_string(n++), shape, shape, codecs);
    for (const auto& sel : selections) {
      std::vector<std::int32_t> want;
      for (std::int64_t i = 0; i < sel[0].count; ++i) {
        for (std::int64_t j = 0; j < sel[1].count; ++j) {
          want.push_back(static_cast<std::int32_t>((sel[0].start + i * sel[0].step) * shape[1] +
                                                   sel[1].start + j * sel[1].step + 1));
        }
      }
      std::vector<std::int32_t> got(want.size(), -1);
      array->read(sel, {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
      EXPECT_EQ(got, want) << array->path() << " rows from " << sel[0].start;
    }
  }
  // A flipped byte near the end, under a crc32c, in rows a read of the first rows passes over.
  const auto array =
      make_array(store, "damaged", shape, shape, device_read::test_support::kZstdCrc);
  const std::string key = "damaged/c/0/0";
  const auto stored = store->get(key);
  std::vector<std::byte> bytes(stored->data(), stored->data() + stored->size());
  bytes[bytes.size() - 100] ^= std::byte{1};
  store->set(key, bytes);
  std::vector<std::int32_t> got(10 * 4096);
  try {
    array->read(std::vector<DimSlice>{{0, 1, 10}, {0, 1, 4096}},
                {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
    ADD_FAILURE() << "damage not found";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kChecksum) << e.what();
    EXPECT_NE(std::string(e.what()).find("chunk 'damaged/c/0/0'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zarr_device::engine
