// Host reads of large chunks stored as their elements, by several threads side by side
// (engine/elements_read.hpp): whole, rows, part of a row equal the elements written, read straight
// and through Array::read; damage anywhere under a crc32c is a ChecksumError naming the chunk;
// what is not one stretch, or not stored as elements, is left to the other reads.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/elements_read.hpp"
#include "gpu_read_test_util.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device::engine {
namespace {

using device_read::test_support::make_array;
using test::json;

const std::vector<std::int64_t> kShape = {4096, 4096};  // int32: one 64 MiB chunk
const json kPlain = json::array({{{"name", "bytes"}}});
const json kPlainCrc = json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}});

// What make_array writes at the elements `sel` picks: 1, 2, 3, ... in C order.
std::vector<std::int32_t> expected(const std::vector<DimSlice>& sel) {
  std::vector<std::int32_t> want;
  for (std::int64_t i = 0; i < sel[0].count; ++i) {
    for (std::int64_t j = 0; j < sel[1].count; ++j) {
      want.push_back(static_cast<std::int32_t>((sel[0].start + i * sel[0].step) * kShape[1] +
                                               sel[1].start + j * sel[1].step + 1));
    }
  }
  return want;
}

// Reads `sel` of the array's one chunk through read_stored_elements, into `got`.
bool read_direct(const Array& array, const Store& store, const std::vector<DimSlice>& sel,
                 std::vector<std::int32_t>& got) {
  got.assign(static_cast<std::size_t>(sel[0].count * sel[1].count), -1);
  const std::vector<std::int64_t> counts = {sel[0].count, sel[1].count};
  const StridedView region{reinterpret_cast<std::byte*>(got.data()), counts,
                           test::c_strides(counts, 4)};
  ByteBudget budget(std::size_t{256} << 20);
  return read_stored_elements(array.chain(), store, array.path() + "/c/0/0", sel, region, 512,
                              ThreadPool::shared(4), 4, budget);
}

TEST(ElementsRead, StretchesOfLargeChunksAreReadSideBySide) {
  const std::vector<std::vector<DimSlice>> stretches = {
      {{0, 1, 4096}, {0, 1, 4096}},     // the whole chunk
      {{1000, 1, 2000}, {0, 1, 4096}},  // rows
      {{7, 1, 1}, {100, 1, 3000}},      // part of one row
      {{4095, 1, 1}, {4095, 1, 1}},     // the last element
  };
  auto store = make_memory_store();
  std::size_t n = 0;
  for (const auto& codecs : {kPlain, kPlainCrc}) {
    const auto array = make_array(store, "e" + std::to_string(n++), kShape, kShape, codecs);
    for (const auto& sel : stretches) {
      std::vector<std::int32_t> got;
      ASSERT_TRUE(read_direct(*array, *store, sel, got)) << array->path();
      EXPECT_EQ(got, expected(sel)) << array->path() << " from row " << sel[0].start;
      std::vector<std::int32_t> through(got.size(), -1);
      array->read(sel, {reinterpret_cast<std::byte*>(through.data()), through.size() * 4});
      EXPECT_EQ(through, expected(sel)) << array->path();
    }
    // Columns are not one stretch: left to the one-pass read.
    std::vector<std::int32_t> got;
    EXPECT_FALSE(read_direct(*array, *store, {{0, 1, 4096}, {0, 1, 100}}, got));
  }
  // Not stored as elements.
  const auto zstd = make_array(store, "z", kShape, kShape,
                               json::array({{{"name", "bytes"}}, {{"name", "zstd"}}}));
  std::vector<std::int32_t> got;
  EXPECT_FALSE(read_direct(*zstd, *store, {{0, 1, 10}, {0, 1, 4096}}, got));
  // A chunk not stored: the fill value.
  const auto empty = make_array(store, "empty", kShape, kShape, kPlainCrc, false);
  ASSERT_TRUE(read_direct(*empty, *store, {{10, 1, 2}, {0, 1, 4096}}, got));
  EXPECT_EQ(got, std::vector<std::int32_t>(got.size(), 0));
}

TEST(ElementsRead, DamageAnywhereUnderACrc32cIsAChecksumError) {
  auto store = make_memory_store();
  const std::vector<DimSlice> rows = {{2000, 1, 100}, {0, 1, 4096}};
  const std::size_t elements = std::size_t{4096} * 4096 * 4;
  std::size_t n = 0;
  // Before the rows, in them, after them, in the stored checksum.
  for (const std::size_t at :
       {std::size_t{100}, std::size_t{2050} * 4096 * 4, elements - 100, elements + 2}) {
    const auto array = make_array(store, "d" + std::to_string(n++), kShape, kShape, kPlainCrc);
    const std::string key = array->path() + "/c/0/0";
    const auto stored = store->get(key);
    std::vector<std::byte> bytes(stored->data(), stored->data() + stored->size());
    bytes[at] ^= std::byte{0x20};
    store->set(key, bytes);
    std::vector<std::int32_t> got(100 * 4096);
    try {
      array->read(rows, {reinterpret_cast<std::byte*>(got.data()), got.size() * 4});
      ADD_FAILURE() << "damage at " << at << " not found";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kChecksum) << e.what();
      EXPECT_NE(std::string(e.what()).find("chunk '" + key + "'"), std::string::npos) << e.what();
    }
  }
  // A value of another size is left to the whole decode, which says what is wrong.
  const auto short_one = make_array(store, "short", kShape, kShape, kPlainCrc);
  const auto stored = store->get("short/c/0/0");
  store->set("short/c/0/0",
             std::vector<std::byte>(stored->data(), stored->data() + stored->size() - 1));
  std::vector<std::int32_t> got;
  EXPECT_FALSE(read_direct(*short_one, *store, rows, got));
  got.assign(100 * 4096, 0);
  EXPECT_THROW(short_one->read(rows, {reinterpret_cast<std::byte*>(got.data()), got.size() * 4}),
               Error);
}

}  // namespace
}  // namespace zarr_device::engine
