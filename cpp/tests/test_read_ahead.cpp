// Announcing a read's chunks ahead of its threads once its data turn out to be cold
// (engine/read_ahead.hpp), and the count of reads that waited for the disk it starts from
// (stores::reads_from_disk).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/read_ahead.hpp"
#include "stores/file_io.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device {
namespace {

// What a ReadAhead announced, in order, from its thread.
struct Announced {
  std::mutex mutex;
  std::vector<std::size_t> items;
  void add(std::size_t i) {
    const std::lock_guard lock(mutex);
    items.push_back(i);
  }
  std::vector<std::size_t> get() {
    const std::lock_guard lock(mutex);
    return items;
  }
};

// Waits (up to a few seconds) for `ahead` to have announced or passed over `count` items.
void wait_for(engine::ReadAhead& ahead, std::size_t count) {
  for (int i = 0; i < 5000 && ahead.announced() < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(ReadAhead, WarmReadsAnnounceNothing) {
  std::atomic<std::uint64_t> disk{7};
  Announced announced;
  {
    engine::ReadAhead ahead(
        100, 1 << 20, [&](std::size_t i) { announced.add(i); }, std::uint64_t{8} << 20,
        [&] { return disk.load(); });
    for (std::size_t i = 0; i < 100; ++i) ahead.read(i);
    EXPECT_EQ(ahead.announced(), 0u);
  }
  EXPECT_TRUE(announced.get().empty());
}

TEST(ReadAhead, ColdReadsAnnounceTheWindowAheadOnce) {
  std::atomic<std::uint64_t> disk{7};
  Announced announced;
  {
    // 8 MiB ahead of items of 1 MiB: 8 items past the furthest read.
    engine::ReadAhead ahead(
        20, 1 << 20, [&](std::size_t i) { announced.add(i); }, std::uint64_t{8} << 20,
        [&] { return disk.load(); });
    ahead.read(0);
    ahead.read(1);
    EXPECT_EQ(ahead.announced(), 0u);  // warm so far
    disk = 8;                          // a read waited for the disk
    ahead.read(2);
    wait_for(ahead, 11);
    EXPECT_EQ(announced.get(), (std::vector<std::size_t>{3, 4, 5, 6, 7, 8, 9, 10}));
    ahead.read(5);  // read out of order by another thread: nothing announced twice
    ahead.read(4);
    wait_for(ahead, 14);
    EXPECT_EQ(announced.get(), (std::vector<std::size_t>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
    // Threads take items in order: those before the furthest read are being read already, and
    // are passed over.
    ahead.read(16);
    wait_for(ahead, 20);
    EXPECT_EQ(announced.get(),
              (std::vector<std::size_t>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 17, 18, 19}));
    EXPECT_EQ(ahead.announced(), 20u);
  }
}

TEST(ReadAhead, StopsWhenTheReadEnds) {
  std::atomic<std::uint64_t> disk{0};
  std::atomic<int> calls{0};
  {
    engine::ReadAhead ahead(
        1'000'000, 1,
        [&](std::size_t) {
          ++calls;
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        },
        1'000'000, [&] { return disk.load(); });
    disk = 1;
    ahead.read(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }  // joins at once, far from the end of the window
  EXPECT_GT(calls.load(), 0);
  EXPECT_LT(calls.load(), 100'000);
}

// A file's pages, dropped from the page cache where the file system lets them go.
bool dropped_from_cache(const std::filesystem::path& path, std::size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return false;
  std::vector<unsigned char> resident((size + 4095) / 4096);
  const bool known = ::mincore(map, size, resident.data()) == 0;
  ::munmap(map, size);
  if (!known) return false;
  for (const auto r : resident) {
    if ((r & 1) != 0) return false;
  }
  return true;
}

TEST(ReadsFromDisk, CountsReadsThePageCacheDidNotHold) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("zd_disk_reads_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "value";
  constexpr std::size_t kSize = std::size_t{1} << 20;
  std::vector<std::byte> data(kSize);
  for (std::size_t i = 0; i < kSize; ++i) data[i] = static_cast<std::byte>(i * 7);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(kSize));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> got(kSize);
  // Just written, so in the page cache: read without waiting, not counted.
  const auto before = stores::reads_from_disk();
  EXPECT_EQ(stores::read_at(fd, got, 0, path.string()), kSize);
  EXPECT_EQ(got, data);
  const std::span<std::byte> halves[2] = {std::span(got).first(kSize / 2),
                                          std::span(got).subspan(kSize / 2)};
  EXPECT_EQ(stores::read_pieces(fd, false, halves, path.string()), kSize);
  EXPECT_EQ(stores::reads_from_disk(), before);
  // Dropped from the cache, where the file system lets its pages go (not tmpfs): the same bytes,
  // read from the disk, and counted once a read (RWF_NOWAIT tells them apart: Linux 4.14 on).
  if (dropped_from_cache(path, kSize)) {
    std::fill(got.begin(), got.end(), std::byte{0});
    EXPECT_EQ(stores::read_at(fd, got, 0, path.string()), kSize);
    EXPECT_EQ(got, data);
    EXPECT_EQ(stores::reads_from_disk(), before + 1);
    ASSERT_TRUE(dropped_from_cache(path, kSize));
    std::fill(got.begin(), got.end(), std::byte{0});
    EXPECT_EQ(stores::read_pieces(fd, false, halves, path.string()), kSize);
    EXPECT_EQ(got, data);
    EXPECT_EQ(stores::reads_from_disk(), before + 2);
  }
  const bool dropped = dropped_from_cache(path, kSize);
  ::close(fd);
  std::filesystem::remove_all(dir);
  if (!dropped) GTEST_SKIP() << "the file system keeps the file's pages (tmpfs?)";
}

// A local store that records the keys announced to it (Store::will_need).
class AnnounceRecordingStore final : public test::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void will_need(std::string_view key, std::uint64_t offset, std::uint64_t length) const override {
    {
      const std::lock_guard lock(mutex_);
      announced_.emplace_back(key);
    }
    inner_->will_need(key, offset, length);
  }
  // Whole chunks are read straight into place, by the local store (which counts its waits).
  using Store::get_into;
  std::optional<std::size_t> get_into(std::string_view key,
                                      std::span<const std::span<std::byte>> pieces) const override {
    return inner_->get_into(key, pieces);
  }
  std::vector<std::string> announced() const {
    const std::lock_guard lock(mutex_);
    return announced_;
  }
  void forget() {
    const std::lock_guard lock(mutex_);
    announced_.clear();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::vector<std::string> announced_;
};

TEST(ReadAhead, ColdHostReadsAnnounceTheirChunkFiles) {
  const test::TempDir dir;
  auto store = std::make_shared<AnnounceRecordingStore>(make_local_store(dir.path()));
  // 256 chunk files of 64 KiB.
  const std::vector<std::int64_t> shape = {256, 65536};
  auto array = Array::create(store, "a", test::array_doc(shape, {1, 65536}, "uint8"), false);
  std::vector<std::byte> values(256 * 65536);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::byte>(i * 13 + 1);
  const auto all = test::full_selection(shape);
  array->write(all, values);
  std::vector<std::byte> out(values.size());
  const IoOptions two{2, IoOptions{}.max_inflight_bytes};
  array->read(all, out, two);  // warm: nothing announced
  EXPECT_EQ(out, values);
  EXPECT_TRUE(store->announced().empty());
  bool dropped = true;
  for (std::int64_t c = 0; c < 256; ++c) {
    dropped =
        dropped_from_cache(dir.path() / "a" / "c" / std::to_string(c) / "0", 65536) && dropped;
  }
  if (!dropped) GTEST_SKIP() << "the file system keeps the files' pages (tmpfs?)";
  std::fill(out.begin(), out.end(), std::byte{0});
  array->read(all, out, two);
  EXPECT_EQ(out, values);
  // Chunk files ahead of those read, each at most once, all of them the array's.
  const auto announced = store->announced();
  EXPECT_FALSE(announced.empty());
  const std::set<std::string> distinct(announced.begin(), announced.end());
  EXPECT_EQ(distinct.size(), announced.size());
  for (const auto& key : announced) {
    EXPECT_EQ(key.rfind("a/c/", 0), 0u) << key;
  }
  EXPECT_EQ(distinct.count("a/c/0/0"),
            0u);  // the first chunk is read before the data are known cold
}

}  // namespace
}  // namespace zarr_device
