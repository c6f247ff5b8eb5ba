// Many small values read whole in one call by a local store's view (io_uring): every value read is
// the whole of one file beneath the root; anything else (empty, too large for its room, a
// directory, a FIFO, a link out of the tree) is left to the caller, and nothing is a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "stores/whole_file_reads.hpp"
#include "test_util.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

std::vector<WholeReadResult> read_whole(const Store& store, const std::vector<std::string>& keys,
                                        std::vector<std::vector<std::byte>>& rooms) {
  const auto& reads = dynamic_cast<const WholeValueReads&>(store);
  std::vector<WholeValueReads::Read> asked;
  for (std::size_t i = 0; i < keys.size(); ++i) asked.push_back({keys[i], rooms[i]});
  std::vector<WholeReadResult> results(keys.size());
  reads.read_whole(asked, results);
  return results;
}

TEST(WholeFileReads, ReadsWholeRegularFilesAndLeavesTheRest) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  const auto view = dynamic_cast<const HeldRoot&>(*store).with_root_held();
  if (!stores::whole_file_reads_available()) {
    std::vector<std::vector<std::byte>> rooms(1, std::vector<std::byte>(8));
    store->set("a", test::bytes_of("x"));
    EXPECT_EQ(read_whole(*view, {"a"}, rooms)[0].outcome, WholeRead::kNotRead);
    GTEST_SKIP() << "no io_uring here: every value is left to the caller";
  }
  // More values than one submission holds, of sizes from empty to the room exactly.
  std::vector<std::string> keys;
  std::vector<test::Bytes> values;
  for (int i = 0; i < 100; ++i) {
    keys.push_back("g/c/" + std::to_string(i));
    values.push_back(
        test::random_bytes(static_cast<std::size_t>(i * 41 % 257), static_cast<std::uint32_t>(i)));
    store->set(keys.back(), values.back());
  }
  std::vector<std::vector<std::byte>> rooms(keys.size(), std::vector<std::byte>(256));
  const auto results = read_whole(*view, keys, rooms);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE(keys[i]);
    if (values[i].empty() || values[i].size() > 256) {
      EXPECT_EQ(results[i].outcome, WholeRead::kNotRead);  // the caller's to open
      continue;
    }
    ASSERT_EQ(results[i].outcome, WholeRead::kRead);
    ASSERT_EQ(results[i].size, values[i].size());
    EXPECT_EQ(std::memcmp(rooms[i].data(), values[i].data(), values[i].size()), 0);
  }

  // The store itself holds no root open: it leaves every value to the caller.
  EXPECT_EQ(read_whole(*store, {keys[0]}, rooms)[0].outcome, WholeRead::kNotRead);

  // Not values: nothing there, a directory, a FIFO (whose open must not block), a link out of
  // the tree, a file where a directory is on the path.
  const auto root = dir.path();
  std::filesystem::create_directories(root / "d");
  ASSERT_EQ(::mkfifo((root / "fifo").c_str(), 0644), 0);
  const test::TempDir outside;
  std::ofstream(outside.path() / "secret") << "secret";
  std::filesystem::create_symlink(outside.path() / "secret", root / "out");
  std::filesystem::create_symlink("g/c/1", root / "in");
  const std::vector<std::string> odd = {"missing", "d", "fifo", "out", "g/c/1/x", "in"};
  std::vector<std::vector<std::byte>> odd_rooms(odd.size(), std::vector<std::byte>(256));
  const auto odd_results = read_whole(*view, odd, odd_rooms);
  EXPECT_EQ(odd_results[0].outcome, WholeRead::kAbsent);
  EXPECT_EQ(odd_results[1].outcome, WholeRead::kNotRead);
  EXPECT_EQ(odd_results[2].outcome, WholeRead::kNotRead);
  EXPECT_EQ(odd_results[3].outcome, WholeRead::kNotRead);
  EXPECT_EQ(odd_results[4].outcome, WholeRead::kAbsent);  // ENOTDIR: as open() finds nothing
  // A link that stays inside the tree is followed, as an open beneath the root follows it.
  ASSERT_EQ(odd_results[5].outcome, WholeRead::kRead);
  ASSERT_EQ(odd_results[5].size, values[1].size());
  EXPECT_EQ(std::memcmp(odd_rooms[5].data(), values[1].data(), values[1].size()), 0);
  // What the caller's own read then says of the link out of the tree.
  EXPECT_THROW((void)view->get("out"), StoreError);
}

TEST(WholeFileReads, ManyThreadsAtOnce) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  const auto view = dynamic_cast<const HeldRoot&>(*store).with_root_held();
  if (!stores::whole_file_reads_available()) GTEST_SKIP() << "no io_uring here";
  constexpr int kValues = 400;
  std::vector<std::string> keys;
  for (int i = 0; i < kValues; ++i) {
    keys.push_back("c/" + std::to_string(i));
    store->set(keys.back(), test::random_bytes(100 + static_cast<std::size_t>(i),
                                               static_cast<std::uint32_t>(i)));
  }
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) {
        std::vector<std::vector<std::byte>> rooms(keys.size(), std::vector<std::byte>(1024));
        const auto results = read_whole(*view, keys, rooms);
        for (int i = 0; i < kValues; ++i) {
          const auto want =
              test::random_bytes(100 + static_cast<std::size_t>(i), static_cast<std::uint32_t>(i));
          if (results[i].outcome != WholeRead::kRead || results[i].size != want.size() ||
              std::memcmp(rooms[i].data(), want.data(), want.size()) != 0) {
            ++wrong[t];
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace zarr_device
