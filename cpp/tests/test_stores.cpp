// Tests of the stores: one contract, checked on the local (directory) store and the memory store
// by a parameterised suite, plus what only a local store has (files, atomic renames).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "stores/file_io.hpp"
#include "test_util.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

using test::Bytes;
using test::bytes_of;
using test::string_of;

namespace fs = std::filesystem;

struct StoreKind {
  const char* name;
  bool local;
};

void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

class Stores : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    if (GetParam().local) {
      dir_ = std::make_unique<test::TempDir>();
      store_ = make_local_store(dir_->path());
    } else {
      store_ = make_memory_store();
    }
  }

  void set(std::string_view key, std::string_view value) { store_->set(key, bytes_of(value)); }

  std::optional<std::string> get(std::string_view key, ByteRange range = {}) {
    auto value = store_->get(key, range);
    if (!value) return std::nullopt;
    return string_of(*value);
  }

  std::unique_ptr<test::TempDir> dir_;
  std::shared_ptr<Store> store_;
};

// Runs `f`, turning an exception into a failure that names `what`, so that one failing call does
// not hide the others.
template <typename F>
void check(const char* what, F f) {
  try {
    f();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " threw: " << e.what();
  }
}

TEST_P(Stores, SetGetOverwrite) {
  EXPECT_EQ(get("a"), std::nullopt);
  EXPECT_FALSE(store_->exists("a"));
  set("a", "hello");
  EXPECT_EQ(get("a"), "hello");
  EXPECT_TRUE(store_->exists("a"));
  set("a", "bye");
  EXPECT_EQ(get("a"), "bye");
  // Nested keys, empty values and binary values.
  set("x/y/z/c/0/1", "nested");
  EXPECT_EQ(get("x/y/z/c/0/1"), "nested");
  set("empty", "");
  EXPECT_EQ(get("empty"), "");
  EXPECT_TRUE(store_->exists("empty"));
  const Bytes binary = test::random_bytes(100000, 1);
  store_->set("bin", binary);
  auto back = store_->get("bin");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(test::to_bytes(*back), binary);
  // A value is a copy: changing the source afterwards changes nothing.
  Bytes source = bytes_of("abc");
  store_->set("copy", source);
  source[0] = std::byte{'X'};
  EXPECT_EQ(get("copy"), "abc");
}

// A value given as pieces is stored as their concatenation, atomically like set(): empty pieces,
// one piece, more pieces than one writev takes, and a value replaced by a shorter one.
TEST_P(Stores, SetPiecesStoresTheJoinedValue) {
  const auto set_pieces = [&](std::string_view key, const std::vector<std::string>& parts) {
    std::vector<std::span<const std::byte>> pieces;
    for (const auto& p : parts) pieces.push_back(std::as_bytes(std::span(p.data(), p.size())));
    store_->set_pieces(key, pieces);
  };
  set_pieces("a/c/0", {"index", "", "chunk one", "", "chunk two"});
  EXPECT_EQ(get("a/c/0"), "indexchunk onechunk two");
  set_pieces("a/c/0", {"short"});
  EXPECT_EQ(get("a/c/0"), "short");
  set_pieces("a/c/1", {});
  EXPECT_EQ(get("a/c/1"), "");
  std::vector<std::string> many;
  std::string joined;
  for (int i = 0; i < 3000; ++i) {  // past IOV_MAX (1024)
    many.push_back(std::to_string(i) + (i % 7 == 0 ? "" : ","));
    joined += many.back();
  }
  set_pieces("a/c/2", many);
  EXPECT_EQ(get("a/c/2"), joined);
  EXPECT_THROW(set_pieces("../outside", {"x"}), UsageError);
}

TEST_P(Stores, ByteRanges) {
  set("k", "0123456789");
  EXPECT_EQ(get("k", {0, -1}), "0123456789");
  EXPECT_EQ(get("k", {2, 3}), "234");
  EXPECT_EQ(get("k", {0, 10}), "0123456789");
  EXPECT_EQ(get("k", {5, -1}), "56789");
  EXPECT_EQ(get("k", {0, 0}), "");
  EXPECT_EQ(get("k", {9, 1}), "9");
  // Suffixes: a negative offset is the last -offset bytes.
  EXPECT_EQ(get("k", {-3, -1}), "789");
  EXPECT_EQ(get("k", {-3, 3}), "789");
  EXPECT_EQ(get("k", {-10, -1}), "0123456789");
  EXPECT_EQ(get("k", {-25, -1}), "0123456789");  // longer than the value: all of it
  // Past the end: cut short, never an error.
  EXPECT_EQ(get("k", {8, 5}), "89");
  EXPECT_EQ(get("k", {10, 5}), "");
  EXPECT_EQ(get("k", {25, 5}), "");
  EXPECT_EQ(get("k", {3, std::numeric_limits<std::int64_t>::max()}), "3456789");
  EXPECT_EQ(get("k", {std::numeric_limits<std::int64_t>::max(), 1}), "");
  // A missing key is missing whatever the range.
  EXPECT_EQ(get("missing", {2, 3}), std::nullopt);
  EXPECT_EQ(get("missing", {-3, -1}), std::nullopt);
}

TEST_P(Stores, GetInto) {
  set("k", "0123456789");
  Bytes exact(10, std::byte{'.'});
  EXPECT_EQ(store_->get_into("k", exact), 10u);
  EXPECT_EQ(exact, bytes_of("0123456789"));
  // Another size: the value's size comes back; the buffer holds nothing useful.
  Bytes small(4);
  EXPECT_EQ(store_->get_into("k", small), 10u);
  Bytes large(20);
  EXPECT_EQ(store_->get_into("k", large), 10u);
  EXPECT_EQ(store_->get_into("missing", exact), std::nullopt);
  set("empty", "");
  Bytes none;
  EXPECT_EQ(store_->get_into("empty", none), 0u);
}

TEST_P(Stores, GetRangeInto) {
  set("k", "0123456789");
  Bytes out(4, std::byte{'.'});
  EXPECT_EQ(store_->get_range_into("k", 0, out), 4u);
  EXPECT_EQ(out, bytes_of("0123"));
  EXPECT_EQ(store_->get_range_into("k", 5, out), 4u);
  EXPECT_EQ(out, bytes_of("5678"));
  // Cut short at the end: the count says how much is valid.
  out.assign(4, std::byte{'.'});
  EXPECT_EQ(store_->get_range_into("k", 8, out), 2u);
  EXPECT_EQ(out, bytes_of("89.."));
  EXPECT_EQ(store_->get_range_into("k", 10, out), 0u);
  EXPECT_EQ(store_->get_range_into("k", 1000, out), 0u);
  // An offset beyond any value is past the end too, never read as "the last n bytes". The span
  // sits at the start of a larger buffer so that a write past its end shows up as changed bytes
  // (instead of aborting the whole run under AddressSanitizer).
  for (const std::uint64_t offset : {std::uint64_t{1} << 63, ~std::uint64_t{0} - 3}) {
    SCOPED_TRACE(offset);
    Bytes backing(64, std::byte{'.'});
    check("huge offset", [&] {
      EXPECT_EQ(store_->get_range_into("k", offset, std::span<std::byte>(backing.data(), 4)), 0u);
    });
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(backing.data()), backing.size()),
              std::string(64, '.'));
  }
  Bytes none;
  EXPECT_EQ(store_->get_range_into("k", 3, none), 0u);
  EXPECT_EQ(store_->get_range_into("missing", 0, out), std::nullopt);
}

TEST_P(Stores, Size) {
  EXPECT_EQ(store_->size("k"), std::nullopt);
  set("k", "0123456789");
  EXPECT_EQ(store_->size("k"), 10u);
  set("k", "abc");
  EXPECT_EQ(store_->size("k"), 3u);
  set("empty", "");
  EXPECT_EQ(store_->size("empty"), 0u);
  set("d/e/f", "xy");
  EXPECT_EQ(store_->size("d/e/f"), 2u);
  // A key below a value: a local store reports the damage (a file where a directory should
  // be), a memory store has no such thing.
  if (GetParam().local) {
    EXPECT_THROW((void)store_->size("d/e/f/g"), StoreError);
  } else {
    EXPECT_EQ(store_->size("d/e/f/g"), std::nullopt);
  }
  EXPECT_FALSE(store_->exists("d/e/f/g"));
  store_->erase("k");
  EXPECT_EQ(store_->size("k"), std::nullopt);
}

TEST_P(Stores, Erase) {
  set("a/b", "1");
  set("a/c", "2");
  store_->erase("a/b");
  EXPECT_EQ(get("a/b"), std::nullopt);
  EXPECT_EQ(get("a/c"), "2");
  EXPECT_NO_THROW(store_->erase("a/b"));  // already gone
  EXPECT_NO_THROW(store_->erase("never/was/here"));
  EXPECT_NO_THROW(store_->erase("a/c/deeper"));  // below a value
}

TEST_P(Stores, ErasePrefix) {
  for (const char* key :
       {"arr/zarr.json", "arr/c/0/0", "arr/c/1/0", "arr2/zarr.json", "ar", "other/arr/x", "top"}) {
    set(key, key);
  }
  store_->erase_prefix("arr");
  EXPECT_EQ(get("arr/zarr.json"), std::nullopt);
  EXPECT_EQ(get("arr/c/0/0"), std::nullopt);
  EXPECT_EQ(get("arr/c/1/0"), std::nullopt);
  // Only whole path components match.
  EXPECT_EQ(get("arr2/zarr.json"), "arr2/zarr.json");
  EXPECT_EQ(get("ar"), "ar");
  EXPECT_EQ(get("other/arr/x"), "other/arr/x");
  store_->erase_prefix("other/arr");
  EXPECT_EQ(get("other/arr/x"), std::nullopt);
  EXPECT_NO_THROW(store_->erase_prefix("not/there"));
  // A prefix that is a value removes that value.
  store_->erase_prefix("top");
  EXPECT_EQ(get("top"), std::nullopt);
  // "" is everything.
  store_->erase_prefix("");
  EXPECT_EQ(get("arr2/zarr.json"), std::nullopt);
  EXPECT_EQ(get("ar"), std::nullopt);
  EXPECT_TRUE(store_->list_dir("").empty());
}

TEST_P(Stores, ListDir) {
  EXPECT_TRUE(store_->list_dir("").empty());
  for (const char* key : {"b/zarr.json", "b/c/0", "b/c/1", "a", "c/d/e/f", "b/.zattrs"}) {
    set(key, "v");
  }
  EXPECT_EQ(store_->list_dir(""), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(store_->list_dir("b"), (std::vector<std::string>{".zattrs", "c", "zarr.json"}));
  EXPECT_EQ(store_->list_dir("b/c"), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(store_->list_dir("c"), (std::vector<std::string>{"d"}));
  EXPECT_EQ(store_->list_dir("c/d/e"), (std::vector<std::string>{"f"}));
  EXPECT_TRUE(store_->list_dir("nothing").empty());
  EXPECT_TRUE(store_->list_dir("b/c/0").empty());  // a value, not a prefix
  // Overwrites leave no visible trace (temporary files are not listed).
  for (int i = 0; i < 5; ++i) set("b/c/0", std::to_string(i));
  EXPECT_EQ(store_->list_dir("b/c"), (std::vector<std::string>{"0", "1"}));
}

TEST_P(Stores, APrefixIsNotAValue) {
  set("group/array/zarr.json", "{}");
  check("exists", [&] { EXPECT_FALSE(store_->exists("group/array")); });
  if (GetParam().local) {
    // A directory where a value is asked for is damage (a chunk key that is a directory): an
    // error, never an absent value that would read as the fill value.
    check("get(group)", [&] { EXPECT_THROW((void)get("group"), StoreError); });
    check("ranged get", [&] { EXPECT_THROW((void)get("group/array", {0, 1}), StoreError); });
    check("size", [&] { EXPECT_THROW((void)store_->size("group/array"), StoreError); });
    check("open", [&] { EXPECT_THROW((void)store_->open("group/array"), StoreError); });
    return;
  }
  check("get(group)", [&] { EXPECT_EQ(get("group"), std::nullopt); });
  check("get(group/array)", [&] { EXPECT_EQ(get("group/array"), std::nullopt); });
  check("ranged get", [&] { EXPECT_EQ(get("group/array", {0, 1}), std::nullopt); });
  check("size", [&] { EXPECT_EQ(store_->size("group/array"), std::nullopt); });
  check("get_into", [&] {
    Bytes out(2);
    EXPECT_EQ(store_->get_into("group/array", out), std::nullopt);
  });
}

TEST_P(Stores, ErasingAPrefixAsAKeyIsANoOp) {
  // Like erasing any key that holds no value: nothing happens, and nothing below it goes.
  set("group/array/zarr.json", "{}");
  check("erase(group/array)", [&] { store_->erase("group/array"); });
  check("erase(group)", [&] { store_->erase("group"); });
  EXPECT_EQ(get("group/array/zarr.json"), "{}");
}

TEST_P(Stores, KeysLeavingTheStoreAreRejected) {
  for (const char* key : {"..", "../x", "a/../../x", "a/..", "/etc/passwd"}) {
    SCOPED_TRACE(key);
    EXPECT_THROW((void)store_->get(key), UsageError);
    EXPECT_THROW((void)store_->size(key), UsageError);
    EXPECT_THROW(store_->set(key, bytes_of("x")), UsageError);
    EXPECT_THROW(store_->erase(key), UsageError);
    EXPECT_THROW(store_->erase_prefix(key), UsageError);
    EXPECT_THROW((void)store_->list_dir(key), UsageError);
  }
  // Dots inside a name are fine.
  set("a/..b/c..", "ok");
  EXPECT_EQ(get("a/..b/c.."), "ok");
}

TEST_P(Stores, ConcurrentReadersSeeWholeValues) {
  // A writer replaces a value again and again; readers always see one whole version.
  const std::size_t size = 64 * 1024;
  const Bytes a(size, std::byte{'a'});
  const Bytes b(size, std::byte{'b'});
  store_->set("v", a);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        auto value = store_->get("v");
        ++reads;
        if (!value || value->size() != size) {
          ++torn;
          continue;
        }
        const std::byte first = value->data()[0];
        for (std::size_t i = 0; i < size; i += 512) {
          if (value->data()[i] != first) {
            ++torn;
            break;
          }
        }
      }
    });
  }
  for (int i = 0; i < 60; ++i) store_->set("v", i % 2 ? a : b);
  while (reads < 20) std::this_thread::yield();
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn, 0);
}

TEST_P(Stores, JoinKeyAndDescribe) {
  EXPECT_EQ(join_key("", "zarr.json"), "zarr.json");
  EXPECT_EQ(join_key("a/b", "zarr.json"), "a/b/zarr.json");
  EXPECT_EQ(join_key("a", ""), "a");
  EXPECT_EQ(join_key("", ""), "");
  if (GetParam().local) {
    EXPECT_EQ(store_->describe(), "file://" + dir_->path().string());
  } else {
    EXPECT_EQ(store_->describe(), "memory://");
  }
}

// ---------------------------------------------------------------------------------------------
// Local store only

std::vector<std::string> all_files(const fs::path& root) {
  std::vector<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file()) files.push_back(fs::relative(entry.path(), root).string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST_P(Stores, LocalStoreWritesPlainFilesAtomically) {
  if (!GetParam().local) GTEST_SKIP() << "local store only";
  const test::TempDir& dir = *dir_;
  auto& store = store_;
  store->set("arr/zarr.json", bytes_of("{}"));
  for (int i = 0; i < 10; ++i) store->set("arr/c/0/1", bytes_of("chunk" + std::to_string(i)));
  // Values are files at their key's path; no temporary file is left behind.
  EXPECT_EQ(all_files(dir.path()), (std::vector<std::string>{"arr/c/0/1", "arr/zarr.json"}));
  std::ifstream file(dir.path() / "arr/c/0/1", std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "chunk9");
  // Files written by others are values too.
  std::ofstream(dir.path() / "arr/c/0/2", std::ios::binary) << "external";
  auto value = store->get("arr/c/0/2");
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(string_of(*value), "external");
  // Concurrent writers of one key: the file ends up holding one of the values, whole.
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i)
        store->set("race", Bytes(10000, static_cast<std::byte>('a' + t)));
    });
  }
  for (auto& w : writers) w.join();
  auto raced = store->get("race");
  ASSERT_TRUE(raced.has_value());
  ASSERT_EQ(raced->size(), 10000u);
  EXPECT_TRUE(std::all_of(raced->data(), raced->data() + raced->size(),
                          [&](std::byte b) { return b == raced->data()[0]; }));
  EXPECT_EQ(all_files(dir.path()).size(), 4u);  // zarr.json, c/0/1, c/0/2, race
}

TEST_P(Stores, LocalStoreRootMayNotExistYet) {
  if (!GetParam().local) GTEST_SKIP() << "local store only";
  const test::TempDir& dir = *dir_;
  auto store = make_local_store(dir.path() / "new" / "root.zarr");
  EXPECT_EQ(store->get("zarr.json"), std::nullopt);
  EXPECT_TRUE(store->list_dir("").empty());
  EXPECT_NO_THROW(store->erase_prefix(""));
  store->set("zarr.json", bytes_of("{}"));
  EXPECT_TRUE(fs::exists(dir.path() / "new" / "root.zarr" / "zarr.json"));
}

TEST_P(Stores, ALowLimitOnOpenFilesIsRaisedWhenReached) {
  if (!GetParam().local) GTEST_SKIP() << "local store only";
  auto store = make_local_store(dir_->path());
  store->set("c/0", bytes_of("chunk"));
  // The lowest free descriptor: a soft limit there makes the next open fail with EMFILE.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max != RLIM_INFINITY && before.rlim_max <= static_cast<rlim_t>(lowest_free) + 1) {
    GTEST_SKIP() << "the hard limit leaves no room to raise";
  }
  rlimit lowered = before;
  lowered.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  std::optional<Buffer> got;
  std::string error;
  try {
    got = store->get("c/0");
  } catch (const StoreError& e) {
    error = e.what();
  }
  rlimit after{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  ASSERT_TRUE(got.has_value()) << error;
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got->data()), got->size()), "chunk");
  EXPECT_GT(after.rlim_cur, lowered.rlim_cur);
}

TEST(StoreErrors, TooManyOpenFilesSaysWhatToDo) {
  const std::string text = stores::errno_text(EMFILE);
  EXPECT_NE(text.find("ulimit -n"), std::string::npos) << text;
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur != RLIM_INFINITY) {
    EXPECT_NE(text.find("may open " + std::to_string(limit.rlim_cur)), std::string::npos) << text;
  }
}

// No instantiation prefix, so the tests are named Stores.<Test>/<store> and match "Stores.*".
INSTANTIATE_TEST_SUITE_P(, Stores,
                         ::testing::Values(StoreKind{"local", true}, StoreKind{"memory", false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace zarr_device
