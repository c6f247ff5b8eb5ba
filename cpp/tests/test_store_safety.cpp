// What a store must never do, whatever it is handed: leave its root (through "..", NUL bytes,
// absolute paths or symbolic links), block on a FIFO, read a directory or a FIFO as an absent
// value, write when read-only, mix two versions of a value in one read, or lose an update when
// read-modify-writes race (threads and processes).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "device_read/read_staging.hpp"
#include "stores/file_tree.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/nodes.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

namespace fs = std::filesystem;
using test::bytes_of;
using test::string_of;

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---------------------------------------------------------------------------------------------
// The path rule

TEST(PathRule, AcceptsRelativePaths) {
  for (const char* p : {"", "a", "a/b", "a/..b/c..", "c/0/1", ".zattrs", "x.y", "a b/é"}) {
    SCOPED_TRACE(p);
    EXPECT_NO_THROW(validate_path(p));
  }
  EXPECT_EQ(normalize_node_path("/a/b/"), "a/b");
  EXPECT_EQ(normalize_node_path("///"), "");
}

TEST(PathRule, RejectsPathsThatCouldLeaveOrLie) {
  const std::string with_nul("..\0x", 4);
  const std::string nul_inside("a\0b", 3);
  for (const std::string& p :
       {std::string("."), std::string(".."), std::string("a/./b"), std::string("a/../b"),
        std::string("../x"), std::string("/etc/passwd"), std::string("a//b"), std::string("a/"),
        std::string("a\\b"), std::string("..\\x"), with_nul, nul_inside, std::string(300, 'x'),
        std::string(5000, 'a')}) {
    SCOPED_TRACE(p);
    EXPECT_THROW(validate_path(p), UsageError);
  }
  EXPECT_THROW(validate_key(""), UsageError);
  EXPECT_THROW((void)normalize_node_path("/a/./b"), UsageError);
}

TEST(PathRule, EveryStoreEntryChecksItsKey) {
  test::TempDir dir;
  const std::string with_nul("..\0x", 4);
  for (auto store : {make_local_store(dir.path() / "root"), make_memory_store()}) {
    for (const std::string& key : {with_nul, std::string("a/./b"), std::string("a//b")}) {
      EXPECT_THROW((void)store->get(key), UsageError);
      EXPECT_THROW((void)store->open(key), UsageError);
      EXPECT_THROW((void)store->exists(key), UsageError);
      EXPECT_THROW(store->set(key, bytes_of("x")), UsageError);
      EXPECT_THROW(store->erase(key), UsageError);
      EXPECT_THROW(store->erase_prefix(key), UsageError);
      EXPECT_THROW((void)store->list_dir(key), UsageError);
      EXPECT_THROW((void)store->lock_chunk("", key), UsageError);
    }
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(PathRule, ArraysRefuseBadNodePaths) {
  test::TempDir dir;
  write_file(dir.path() / "sibling" / "keep.txt", "keep");
  auto store = make_local_store(dir.path() / "store");
  const nlohmann::json doc = {
      {"zarr_format", 3},
      {"node_type", "array"},
      {"shape", {4}},
      {"data_type", "uint8"},
      {"fill_value", 0},
      {"codecs", {{{"name", "bytes"}}}},
      {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", {2}}}}}},
      {"chunk_key_encoding", {{"name", "default"}}}};
  for (const std::string& path :
       {std::string("..\0x", 4), std::string("."), std::string(".."), std::string("a/../..")}) {
    EXPECT_THROW((void)Array::create(store, path, doc, true), UsageError);
    EXPECT_THROW((void)Array::open(store, path), UsageError);
    EXPECT_THROW(erase_node(*store, path), UsageError);
  }
  EXPECT_EQ(read_file(dir.path() / "sibling" / "keep.txt"), "keep");
}

// ---------------------------------------------------------------------------------------------
// Resolution beneath the root, by both resolvers

class Beneath : public ::testing::TestWithParam<stores::Resolver> {
 protected:
  void SetUp() override {
    if (GetParam() == stores::Resolver::kOpenat2 &&
        stores::FileTree::best_resolver() != stores::Resolver::kOpenat2) {
      GTEST_SKIP() << "this kernel has no openat2";
    }
    root_ = dir_.path() / "root";
    outside_ = dir_.path() / "outside";
    write_file(outside_ / "secret", "secret");
    write_file(root_ / "inside" / "value", "inside");
  }
  [[nodiscard]] stores::FileTree tree() const { return stores::FileTree(root_, GetParam()); }
  // errno of opening `path` for reading (0 when it opened).
  [[nodiscard]] int open_error(const std::string& path, int flags = O_RDONLY) const {
    const stores::FileHandle fd(tree().open(path, flags));
    return fd.valid() ? 0 : errno;
  }

  test::TempDir dir_;
  fs::path root_;
  fs::path outside_;
};

TEST_P(Beneath, LinksInsideTheTreeAreFollowed) {
  fs::create_symlink("inside", root_ / "alias");
  fs::create_symlink("../inside/value", root_ / "inside" / "up_and_back");
  EXPECT_EQ(open_error("alias/value"), 0);
  EXPECT_EQ(open_error("inside/up_and_back"), 0);
  EXPECT_EQ(open_error("missing"), ENOENT);
}

TEST_P(Beneath, LinksOutOfTheTreeAreRefused) {
  fs::create_symlink(outside_, root_ / "absolute");
  fs::create_symlink("../outside", root_ / "relative");
  fs::create_symlink("../../outside/secret", root_ / "inside" / "deep");
  fs::create_symlink("/etc/passwd", root_ / "passwd");
  EXPECT_EQ(open_error("absolute/secret"), EXDEV);
  EXPECT_EQ(open_error("relative/secret"), EXDEV);
  EXPECT_EQ(open_error("inside/deep"), EXDEV);
  EXPECT_EQ(open_error("passwd"), EXDEV);
  EXPECT_EQ(stores::FileHandle(tree().open_dir_creating("relative/new/dir")).valid(), false);
  EXPECT_FALSE(fs::exists(outside_ / "new"));
}

TEST_P(Beneath, AbsoluteLinksIntoTheTreeAreFollowed) {
  fs::create_symlink(root_ / "inside", root_ / "absolute");
  fs::create_symlink(root_ / "inside" / "value", root_ / "inside" / "to_value");
  fs::create_symlink(root_, root_ / "inside" / "to_root");
  fs::create_symlink(root_.string() + "//./inside/", root_ / "untidy");
  EXPECT_EQ(open_error("absolute/value"), 0);
  EXPECT_EQ(open_error("inside/to_value"), 0);
  EXPECT_EQ(open_error("inside/to_root/inside/value"), 0);
  EXPECT_EQ(open_error("untidy/value"), 0);
  EXPECT_EQ(open_error("absolute/missing"), ENOENT);
  // Written through, too: the file lands inside.
  const stores::FileHandle made(tree().open("absolute/new", O_WRONLY | O_CREAT | O_EXCL, 0644));
  EXPECT_TRUE(made.valid());
  EXPECT_TRUE(fs::exists(root_ / "inside" / "new"));
  // From a held root as well.
  const auto held = tree().with_root_held();
  ASSERT_TRUE(held);
  EXPECT_TRUE(stores::FileHandle(held->open("inside/to_value", O_RDONLY)).valid());
}

TEST_P(Beneath, AbsoluteLinksThatLeaveAreRefused) {
  write_file(dir_.path() / "root2" / "secret", "next door");
  fs::create_symlink(root_.string() + "/../outside/secret", root_ / "climbs");
  fs::create_symlink(root_.string() + "/inside/../../outside/secret", root_ / "climbs_later");
  fs::create_symlink(dir_.path() / "root2" / "secret", root_ / "sibling");  // a longer name
  fs::create_symlink(dir_.path(), root_ / "parent");
  EXPECT_EQ(open_error("climbs"), EXDEV);
  EXPECT_EQ(open_error("climbs_later"), EXDEV);
  EXPECT_EQ(open_error("sibling"), EXDEV);
  EXPECT_EQ(open_error("parent/outside/secret"), EXDEV);
  EXPECT_EQ(stores::FileHandle(tree().open_dir_creating("parent/new")).valid(), false);
  EXPECT_FALSE(fs::exists(dir_.path() / "new"));
}

TEST_P(Beneath, AbsoluteLinksNameTheRootAsGivenOrAsItIs) {
  // A root reached through a link: absolute links inside may use either path.
  fs::create_symlink(root_, dir_.path() / "alias");
  fs::create_symlink(dir_.path() / "alias" / "inside" / "value", root_ / "by_alias");
  fs::create_symlink(root_ / "inside" / "value", root_ / "by_real");
  const stores::FileTree aliased(dir_.path() / "alias", GetParam());
  EXPECT_TRUE(stores::FileHandle(aliased.open("by_alias", O_RDONLY)).valid());
  EXPECT_TRUE(stores::FileHandle(aliased.open("by_real", O_RDONLY)).valid());
  // The tree rooted at the real path knows nothing of the alias: that link leads elsewhere.
  EXPECT_EQ(open_error("by_alias"), EXDEV);
}

TEST_P(Beneath, LinkLoopsEnd) {
  fs::create_symlink("b", root_ / "a");
  fs::create_symlink("a", root_ / "b");
  EXPECT_EQ(open_error("a"), ELOOP);
}

INSTANTIATE_TEST_SUITE_P(, Beneath,
                         ::testing::Values(stores::Resolver::kOpenat2, stores::Resolver::kWalk),
                         [](const auto& info) {
                           return info.param == stores::Resolver::kOpenat2 ? "openat2" : "walk";
                         });

// ---------------------------------------------------------------------------------------------
// The local store's files

TEST(LocalStoreFiles, SymlinksOutOfTheRootAreNeverFollowed) {
  test::TempDir dir;
  const fs::path root = dir.path() / "root";
  const fs::path outside = dir.path() / "outside";
  write_file(outside / "c" / "0", "outside");
  write_file(root / "zarr.json", "{}");
  fs::create_symlink(outside, root / "arr");
  fs::create_symlink(outside / "c" / "0", root / "chunk");
  auto store = make_local_store(root);
  EXPECT_THROW((void)store->get("arr/c/0"), StoreError);
  EXPECT_THROW((void)store->get("chunk"), StoreError);
  EXPECT_THROW((void)store->size("chunk"), StoreError);
  EXPECT_THROW(store->set("arr/c/1", bytes_of("x")), StoreError);
  EXPECT_THROW((void)store->list_dir("arr"), StoreError);
  EXPECT_FALSE(fs::exists(outside / "c" / "1"));
  // Removing through the store removes the link, never what it points to.
  store->erase_prefix("arr");
  store->erase("chunk");
  EXPECT_EQ(read_file(outside / "c" / "0"), "outside");
  EXPECT_FALSE(fs::exists(fs::symlink_status(root / "arr")));
}

TEST(LocalStoreFiles, OnlyRegularFilesAreValues) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0644), 0);
  fs::create_directories(dir.path() / "arr" / "c" / "0" / "0");  // a directory as a chunk
  write_file(dir.path() / "file_as_dir" / "c", "a file where a directory should be");
  test::run_with_deadline(std::chrono::seconds(20), [&] {
    EXPECT_THROW((void)store->get("fifo"), StoreError);  // and returns at once: no blocking
    EXPECT_THROW((void)store->open("fifo"), StoreError);
    EXPECT_FALSE(store->exists("fifo"));
  });
  EXPECT_THROW((void)store->get("arr/c/0/0"), StoreError);
  EXPECT_THROW((void)store->get("file_as_dir/c/0/0"), StoreError);
  EXPECT_FALSE(store->exists("arr/c/0/0"));
  EXPECT_FALSE(store->exists("file_as_dir/c/0"));
  EXPECT_EQ(store->get("arr/c/0/1"), std::nullopt);  // simply absent
}

// Sizes for planning a read come from a stat, not an open beneath the root: they may pass through
// a link out of the tree, but what they find is never read (the read's open refuses it), and
// every case but a regular file is answered as size() answers it.
TEST(LocalStoreFiles, SizesToPlanAreCheckedByTheOpenThatFollows) {
  test::TempDir dir;
  const fs::path root = dir.path() / "root";
  const fs::path outside = dir.path() / "outside";
  write_file(outside / "c" / "0", "outside");
  write_file(root / "a" / "c" / "0", "inside!!");
  fs::create_symlink(outside, root / "arr");
  fs::create_symlink(outside / "c" / "0", root / "chunk");
  fs::create_symlink("0", root / "a" / "c" / "1");  // a link inside the tree
  ASSERT_EQ(::mkfifo((root / "fifo").c_str(), 0644), 0);
  auto store = make_local_store(root);
  for (const auto& view : {std::shared_ptr<const Store>(store), for_one_operation(store)}) {
    EXPECT_EQ(view->size_to_plan("a/c/0"), 8U);
    EXPECT_EQ(view->size_to_plan("a/c/1"), 8U);
    EXPECT_EQ(view->size_to_plan("a/c/2"), std::nullopt);
    EXPECT_THROW((void)view->size_to_plan("chunk"), StoreError);  // a link at the end
    EXPECT_THROW((void)view->size_to_plan("fifo"), StoreError);
    EXPECT_THROW((void)view->size_to_plan("a"), StoreError);  // a directory
    EXPECT_THROW((void)view->size_to_plan("../outside/c/0"), Error);
    // Through a link out of the tree inside the path: the stat finds the file, the open that
    // reads it refuses it.
    EXPECT_EQ(view->size_to_plan("arr/c/0"), 7U);
    EXPECT_THROW((void)view->open("arr/c/0"), StoreError);
  }
}

// The GPU path's host stages read nothing from outside the tree: a chunk directory that is a
// link out of it is planned from its stat and refused when its batch opens it.
TEST(LocalStoreFiles, AGpuReadRefusesChunksBehindALinkOutOfTheTree) {
  test::TempDir dir;
  const fs::path root = dir.path() / "root";
  auto store = make_local_store(root);
  auto array = Array::create(store, "a", test::array_doc({4}, {2}, "int32"), false);
  const std::vector<std::int32_t> values{1, 2, 3, 4};
  array->write(test::full_selection(std::vector<std::int64_t>{4}),
               {reinterpret_cast<const std::byte*>(values.data()), 16});
  fs::rename(root / "a" / "c", dir.path() / "elsewhere");
  fs::create_symlink(dir.path() / "elsewhere", root / "a" / "c");
  std::vector<std::byte> out(16);
  device_read::ReadTarget target{array.get(), {{0, 1, 4}}, StridedView{out.data(), {4}, {4}}};
  StoreViews views;
  target.store = &views.of(array->store());
  auto leaves = device_read::plan_reads({&target, 1}, device_read::DeviceDecoders{},
                                        GpuDecode::kChecked, engine::ThreadPool::shared(2), 2);
  ASSERT_EQ(leaves.size(), 2U);
  (void)device_read::pack_batches(leaves, 1 << 20, 1 << 20, device_read::DecodeCosts{}, 0);
  std::vector<std::byte> host(std::size_t{1} << 20);
  try {
    (void)device_read::fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2);
    ADD_FAILURE() << "the chunks behind the link were read";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("leads out of the store"), std::string::npos) << e.what();
  }
  for (const auto b : host) ASSERT_EQ(b, std::byte{0});
}

TEST(LocalStoreFiles, WritesLeaveNoTemporaryFiles) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        store->set("a/c/" + std::to_string(i % 5), bytes_of("v" + std::to_string(t)));
    });
  }
  for (auto& w : writers) w.join();
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file()) names.push_back(fs::relative(e.path(), dir.path()).string());
  }
  EXPECT_EQ(names.size(), 5u);
}

TEST(LocalStoreFiles, LeftoversOfKilledWritesAreHidden) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  store->set("a/c/0", bytes_of("x"));
  write_file(dir.path() / "a" / "c" / ".0.zdtmp-123-456", "half");
  write_file(dir.path() / "a" / "c" / ".0.tmp123.456", "half, of an earlier release");
  EXPECT_EQ(store->list_dir("a/c"), (std::vector<std::string>{"0"}));
  EXPECT_TRUE(stores::is_temporary_name(".0.zdtmp-1-2"));
  EXPECT_TRUE(stores::is_temporary_name(".zarr.json.tmp77.3"));
  EXPECT_FALSE(stores::is_temporary_name(".zattrs"));
  EXPECT_FALSE(stores::is_temporary_name(".notes.tmpl"));
  EXPECT_FALSE(stores::is_temporary_name("x.tmp1.2"));
}

// ---------------------------------------------------------------------------------------------
// Read-only stores, versions, locks (both kinds of store)

struct Kind {
  const char* name;
  bool local;
};
void PrintTo(const Kind& kind, std::ostream* os) { *os << kind.name; }

class StoreContract : public ::testing::TestWithParam<Kind> {
 protected:
  std::shared_ptr<Store> make(bool read_only = false) {
    if (!GetParam().local) {
      if (!memory_) memory_ = make_memory_store();
      return read_only ? make_memory_store(true) : memory_;
    }
    return make_local_store(dir_.path(), {.read_only = read_only});
  }
  test::TempDir dir_;
  std::shared_ptr<Store> memory_;
};

TEST_P(StoreContract, ReadOnlyStoresRefuseEveryWrite) {
  auto writable = make();
  writable->set("arr/zarr.json", bytes_of("{}"));
  auto store = make(true);
  EXPECT_TRUE(store->read_only());
  EXPECT_THROW(store->set("arr/zarr.json", bytes_of("[]")), UsageError);
  EXPECT_THROW(store->erase("arr/zarr.json"), UsageError);
  EXPECT_THROW(store->erase_prefix("arr"), UsageError);
  EXPECT_THROW((void)store->lock_chunk("arr", "arr/c/0"), UsageError);
  EXPECT_THROW((void)store->lock_document("arr/zarr.json"), UsageError);
  if (GetParam().local) EXPECT_EQ(string_of(*store->get("arr/zarr.json")), "{}");
}

TEST_P(StoreContract, AnOpenValueKeepsItsVersion) {
  auto store = make();
  const std::string old_value(100000, 'o');
  store->set("shard", bytes_of(old_value));
  auto reader = store->open("shard");
  ASSERT_TRUE(reader);
  store->set("shard", bytes_of(std::string(5000, 'n')));
  EXPECT_EQ(reader->size(), old_value.size());
  EXPECT_EQ(string_of(reader->read(0, old_value.size())), old_value);
  EXPECT_EQ(string_of(reader->read(99990, 100)), std::string(10, 'o'));
  EXPECT_EQ(store->open("missing"), nullptr);
}

// Read-modify-write of one counter from many threads, each through its own store object.
TEST_P(StoreContract, ChunkLocksSerialiseThreads) {
  auto first = make();
  first->set("arr/c/0", bytes_of("0"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto store = make();
      for (int i = 0; i < 100; ++i) {
        const auto lock = store->lock_chunk("arr", "arr/c/0");
        const int n = std::stoi(string_of(*store->get("arr/c/0")));
        store->set("arr/c/0", bytes_of(std::to_string(n + 1)));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(string_of(*first->get("arr/c/0")), "800");
}

TEST_P(StoreContract, DocumentLocksSerialiseThreads) {
  auto first = make();
  first->set("g/zarr.json", bytes_of("0"));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto store = make();
      for (int i = 0; i < 100; ++i) {
        const auto lock = store->lock_document("g/zarr.json");
        const int n = std::stoi(string_of(*store->get("g/zarr.json")));
        store->set("g/zarr.json", bytes_of(std::to_string(n + 1)));  // replaced, not rewritten
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(string_of(*first->get("g/zarr.json")), "400");
}

INSTANTIATE_TEST_SUITE_P(, StoreContract,
                         ::testing::Values(Kind{"local", true}, Kind{"memory", false}),
                         [](const auto& info) { return std::string(info.param.name); });

// Two processes, and stores rooted at different levels above the same array: one lock file.
TEST(LocalStoreLocks, SerialiseProcesses) {
  test::TempDir dir;
  make_local_store(dir.path())->set("g/arr/c/0", bytes_of("0"));
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        // One child sees the array at "g/arr", the other at "arr" below a deeper root.
        auto store = p == 0 ? make_local_store(dir.path()) : make_local_store(dir.path() / "g");
        const std::string node = p == 0 ? "g/arr" : "arr";
        const std::string key = node + "/c/0";
        for (int i = 0; i < 200; ++i) {
          const auto lock = store->lock_chunk(node, key);
          const int n = std::stoi(string_of(*store->get(key)));
          store->set(key, bytes_of(std::to_string(n + 1)));
        }
      } catch (...) {
        status = 1;
      }
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(string_of(*make_local_store(dir.path())->get("g/arr/c/0")), "400");
}

// ---------------------------------------------------------------------------------------------
// Removing nodes removes Zarr data only

TEST(EraseNode, RemovesOnlyZarrData) {
  test::TempDir dir;
  const fs::path root = dir.path() / "store";
  write_file(dir.path() / "sibling.txt", "sibling");
  write_file(root / "notes.txt", "a user's file");
  write_file(root / "zarr.json", R"({"zarr_format": 3, "node_type": "group"})");
  write_file(root / "a" / "zarr.json",
             R"({"zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "uint8",
                 "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
                 "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
                 "codecs": [{"name": "bytes"}]})");
  write_file(root / "a" / "c" / "0" / "1", "chunk");
  write_file(root / "a" / "c" / "1" / "1", "chunk");
  write_file(root / "a" / "c" / "README", "not a chunk key");
  write_file(root / "plain" / "data.bin", "not a node");
  write_file(root / "sub" / ".zgroup", R"({"zarr_format": 2})");
  write_file(root / "sub" / ".zattrs", "{}");
  write_file(root / "sub" / "v2" / ".zarray",
             R"({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "|u1", "fill_value": 0,
                 "order": "C", "compressor": null, "filters": null})");
  write_file(root / "sub" / "v2" / "0", "chunk");
  write_file(root / "sub" / "v2" / "1.x", "not a chunk key");
  auto store = make_local_store(root);
  erase_node(*store, "");
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file()) left.push_back(fs::relative(e.path(), dir.path()).string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"sibling.txt", "store/a/c/README", "store/notes.txt",
                                            "store/plain/data.bin", "store/sub/v2/1.x"}));
}

}  // namespace
}  // namespace zarr_device
