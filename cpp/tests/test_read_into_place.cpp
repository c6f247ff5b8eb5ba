// Reading stored chunks straight into their place: vectored store reads and the runs of a region.
#include <gtest/gtest.h>

#include <numeric>

#include "place/strided_copy.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

std::vector<std::shared_ptr<Store>> stores(const std::filesystem::path& dir) {
  return {make_memory_store(), make_local_store(dir)};
}

TEST(ReadIntoPlace, VectoredGetFillsPiecesInOrder) {
  test::TempDir dir;
  for (const auto& store : stores(dir.path())) {
    std::vector<std::byte> value(10000);
    for (std::size_t i = 0; i < value.size(); ++i) value[i] = std::byte(i * 7 % 251);
    store->set("a/b", value);
    std::vector<std::byte> out(10000, std::byte{0});
    std::vector<std::span<std::byte>> pieces;
    const std::size_t cuts[] = {0, 1, 513, 4096, 4097, 9000, 10000};
    for (std::size_t i = 0; i + 1 < std::size(cuts); ++i) {
      pieces.emplace_back(out.data() + cuts[i], cuts[i + 1] - cuts[i]);
    }
    auto got = store->get_into("a/b", std::span<const std::span<std::byte>>(pieces));
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(*got, 10000U);
    EXPECT_EQ(out, value) << store->describe();
    // A size that does not match the pieces is reported, not read.
    pieces.pop_back();
    EXPECT_EQ(store->get_into("a/b", std::span<const std::span<std::byte>>(pieces)), 10000U);
    EXPECT_FALSE(store->get_into("a/missing", std::span<const std::span<std::byte>>(pieces)));
  }
}

TEST(ReadIntoPlace, RunsOfARegionFollowItsElementOrder) {
  std::vector<std::byte> memory(8 * 300 * 4);
  // rows 2..5 of an (8, 300) float32 array, columns 10..210: 4 runs of 800 bytes
  StridedView region{memory.data() + (2 * 300 + 10) * 4, {4, 200}, {300 * 4, 4}};
  std::vector<std::span<std::byte>> runs;
  ASSERT_TRUE(place::contiguous_runs(region, 4, 512, runs));
  ASSERT_EQ(runs.size(), 4U);
  for (std::size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].data(), memory.data() + ((2 + r) * 300 + 10) * 4);
    EXPECT_EQ(runs[r].size(), 800U);
  }
  // Short runs are refused; a contiguous block is one run.
  EXPECT_FALSE(place::contiguous_runs(region, 4, 1024, runs));
  StridedView block{memory.data(), {8, 300}, {1200, 4}};
  ASSERT_TRUE(place::contiguous_runs(block, 4, 1 << 20, runs));
  ASSERT_EQ(runs.size(), 1U);
  EXPECT_EQ(runs[0].size(), memory.size());
}

TEST(ReadIntoPlace, UncompressedChunksLandInTheRowsOfTheOutput) {
  test::TempDir dir;
  for (const auto& store : stores(dir.path())) {
    const nlohmann::json doc = {
        {"zarr_format", 3},
        {"node_type", "array"},
        {"shape", {40, 300}},
        {"data_type", "float64"},
        {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", {16, 128}}}}}},
        {"chunk_key_encoding", {{"name", "default"}}},
        {"fill_value", -1.0},
        {"codecs", {{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}}}};
    auto array = Array::create(store, "x", doc, true);
    std::vector<double> data(40 * 300);
    std::iota(data.begin(), data.end(), 0.0);
    std::vector<DimSlice> all = {{0, 1, 40}, {0, 1, 300}};
    array->write(all, std::as_bytes(std::span(data)));
    std::vector<double> out(40 * 300, 0.0);
    array->read(all, std::as_writable_bytes(std::span(out)));
    EXPECT_EQ(out, data) << store->describe();
    // A truncated chunk read this way is an error naming the chunk.
    store->set("x/c/0/1", std::vector<std::byte>(100));
    try {
      array->read(all, std::as_writable_bytes(std::span(out)));
      FAIL() << "no error";
    } catch (const CodecError& e) {
      EXPECT_NE(std::string(e.what()).find("chunk 'x/c/0/1'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zarr_device

namespace zarr_device {
namespace {

// Direct (O_DIRECT) reads return exactly what buffered reads return, at any offset and length,
// across the 4 KiB blocks and the 4 MiB bounce buffer, for every read entry point.
TEST(ReadIntoPlace, DirectReadsMatchBufferedOnes) {
  test::TempDir dir;
  auto buffered = make_local_store(dir.path());
  auto direct = make_local_store(dir.path(), {.io = LocalIo::kDirect});
  std::vector<std::byte> value((std::size_t{9} << 20) + 12345);
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = std::byte((i * 131 + i / 4099) % 256);
  buffered->set("v", value);
  const std::pair<std::int64_t, std::int64_t> ranges[] = {
      {0, -1},
      {1, 10},
      {4095, 2},
      {4096, 4096},
      {5000, (4 << 20) + 7},
      {-100, -1},
      {(9 << 20), 12345},
      {static_cast<std::int64_t>(value.size()) - 1, 5}};
  for (const auto& [offset, length] : ranges) {
    auto a = buffered->get("v", {offset, length});
    auto b = direct->get("v", {offset, length});
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->size(), b->size()) << offset;
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size()), 0) << offset;
  }
  std::vector<std::byte> out(value.size());
  ASSERT_EQ(direct->get_into("v", std::span<std::byte>(out)), value.size());
  EXPECT_EQ(out, value);
  std::vector<std::span<std::byte>> rows;
  for (std::size_t at = 0; at < out.size(); at += 3000) {
    rows.emplace_back(out.data() + at, std::min<std::size_t>(3000, out.size() - at));
  }
  std::fill(out.begin(), out.end(), std::byte{0});
  ASSERT_EQ(direct->get_into("v", std::span<const std::span<std::byte>>(rows)), value.size());
  EXPECT_EQ(out, value);
  std::vector<std::byte> part(70000);
  ASSERT_EQ(direct->get_range_into("v", 123457, part), part.size());
  EXPECT_EQ(std::memcmp(part.data(), value.data() + 123457, part.size()), 0);
  EXPECT_EQ(direct->get_range_into("v", value.size() - 10, part), 10U);
  EXPECT_FALSE(direct->get("missing"));
}

}  // namespace
}  // namespace zarr_device
