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
