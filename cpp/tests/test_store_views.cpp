// Views of stores for one operation over many keys (HeldRoot, StoreViews): a local store's view
// finds every key from its root as it was when the view was made, opened once; host reads and the
// GPU path's host stages take one view per store and read every chunk through it.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "device_read/read_staging.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

using test::array_doc;
using test::json;

std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::string text(const std::optional<Buffer>& value) {
  if (!value) return "(none)";
  return {reinterpret_cast<const char*>(value->data()), value->size()};
}

TEST(StoreViews, ALocalViewFindsKeysFromTheRootAsItWasWhenMade) {
  test::TempDir dir;
  const auto root = dir.path() / "root";
  auto store = make_local_store(root);
  store->set("a/c/0", as_bytes("old"));
  const auto view = for_one_operation(store);
  ASSERT_NE(view.get(), store.get());
  // The root is moved away and made again: the store finds the new tree, the view the one it
  // held (a read that started before sees the tree of its start, as an open file would).
  std::filesystem::rename(root, dir.path() / "moved");
  store->set("a/c/0", as_bytes("new"));
  EXPECT_EQ(text(store->get("a/c/0")), "new");
  EXPECT_EQ(text(view->get("a/c/0")), "old");
  EXPECT_EQ(view->size("a/c/0"), 3U);
  ASSERT_NE(view->open("a/c/0"), nullptr);
  EXPECT_EQ(text(view->open("a/c/0")->read(0, 3)), "old");
  EXPECT_EQ(view->list_dir("a/c"), std::vector<std::string>{"0"});
  EXPECT_EQ(view->describe(), store->describe());
  // The view only reads.
  EXPECT_TRUE(view->read_only());
  auto* writable = const_cast<Store*>(view.get());
  EXPECT_THROW(writable->set("a/c/1", as_bytes("x")), UsageError);
  // Its keys stay beneath the root it holds.
  EXPECT_THROW((void)view->get("../moved/a/c/0"), Error);
  // An absolute link into the tree the view holds (its root, as the kernel names it now) is
  // followed; one to a file outside it is refused.
  std::filesystem::create_symlink(dir.path() / "moved" / "a" / "c" / "0",
                                  dir.path() / "moved" / "a" / "c" / "in");
  EXPECT_EQ(text(view->get("a/c/in")), "old");
  {
    std::ofstream outside(dir.path() / "outside");
    outside << "secret";
  }
  std::filesystem::create_symlink(dir.path() / "outside", dir.path() / "moved" / "a" / "c" / "out");
  EXPECT_THROW((void)view->get("a/c/out"), StoreError);  // an absolute link out of the tree
}

TEST(StoreViews, AViewOfAStoreWithoutARootFindsNothing) {
  test::TempDir dir;
  auto store = make_local_store(dir.path() / "not-yet");
  const auto view = for_one_operation(store);
  EXPECT_FALSE(view->get("c/0").has_value());
  EXPECT_FALSE(view->size("c/0").has_value());
  EXPECT_EQ(view->open("c/0"), nullptr);
  EXPECT_TRUE(view->list_dir("").empty());
}

TEST(StoreViews, OtherStoresAreTheirOwnView) {
  auto store = make_memory_store();
  EXPECT_EQ(for_one_operation(store).get(), store.get());
  StoreViews views;
  EXPECT_EQ(&views.of(store), store.get());
}

// A memory store whose views count what is asked of them, and which counts what is asked of
// itself.
class ViewCountingStore final : public test::ForwardingStore, public HeldRoot {
 public:
  ViewCountingStore() : ForwardingStore(make_memory_store()) {}
  struct Counts {
    std::atomic<int> views{0};
    std::atomic<int> opens_through_views{0};
    std::atomic<int> sizes_through_views{0};
    std::atomic<int> direct_opens{0};
  };

  class View final : public Store {
   public:
    View(std::shared_ptr<Store> inner, std::shared_ptr<Counts> counts)
        : inner_(std::move(inner)), counts_(std::move(counts)) {}
    std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
      ++counts_->opens_through_views;
      return inner_->get(key, range);
    }
    std::shared_ptr<const ValueReader> open(std::string_view key) const override {
      ++counts_->opens_through_views;
      return inner_->open(key);
    }
    std::optional<std::uint64_t> size(std::string_view key) const override {
      ++counts_->sizes_through_views;
      return inner_->size(key);
    }
    void set(std::string_view, std::span<const std::byte>) override { check_writable(); }
    void erase(std::string_view) override { check_writable(); }
    void erase_prefix(std::string_view) override { check_writable(); }
    std::vector<std::string> list_dir(std::string_view prefix) const override {
      return inner_->list_dir(prefix);
    }
    std::string describe() const override { return "counting://"; }
    bool read_only() const override { return true; }

   private:
    std::shared_ptr<Store> inner_;
    std::shared_ptr<Counts> counts_;
  };

  std::shared_ptr<const Store> with_root_held() const override {
    ++counts->views;
    return std::make_shared<View>(inner_, counts);
  }
  std::shared_ptr<const ValueReader> open(std::string_view key) const override {
    ++counts->direct_opens;
    return inner_->open(key);
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    ++counts->direct_opens;
    return inner_->size(key);
  }
  std::string describe() const override { return "counting://"; }

  std::shared_ptr<Counts> counts = std::make_shared<Counts>();
};

const json kZstd = json::array({{{"name", "bytes"}}, {{"name", "zstd"}}});

std::vector<std::int32_t> counting(std::size_t n) {
  std::vector<std::int32_t> values(n);
  std::iota(values.begin(), values.end(), 1);
  return values;
}

const std::vector<DimSlice> kAll{{0, 1, 1000}};

std::span<const std::byte> bytes_of(const std::vector<std::int32_t>& values) {
  return {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4};
}

std::span<std::byte> bytes_of(std::vector<std::int32_t>& values) {
  return {reinterpret_cast<std::byte*>(values.data()), values.size() * 4};
}

// A host read of two arrays of one store (unsharded, and sharded read by range) takes one view of
// it and opens every chunk through that view, none through the store itself.
TEST(StoreViews, AHostReadOpensEveryChunkThroughOneView) {
  auto store = std::make_shared<ViewCountingStore>();
  auto plain = Array::create(store, "plain", array_doc({1000}, {100}, "int32", 0, kZstd), false);
  const json sharded =
      json::array({{{"name", "sharding_indexed"},
                    {"configuration", {{"chunk_shape", {50}}, {"codecs", kZstd}}}}});
  auto shards =
      Array::create(store, "shards", array_doc({1000}, {500}, "int32", 0, sharded), false);
  const auto values = counting(1000);
  plain->write(kAll, bytes_of(values));
  shards->write(kAll, bytes_of(values));
  store->counts = std::make_shared<ViewCountingStore::Counts>();

  std::vector<std::int32_t> a(1000);
  std::vector<std::int32_t> b(1000);
  const ReadRequest requests[] = {{plain.get(), {{0, 1, 1000}}, bytes_of(a)},
                                  {shards.get(), {{0, 1, 1000}}, bytes_of(b)}};
  read_many(requests, IoOptions{});
  EXPECT_EQ(a, values);
  EXPECT_EQ(b, values);
  EXPECT_EQ(store->counts->views.load(), 1);
  EXPECT_EQ(store->counts->opens_through_views.load(), 10 + 2);  // 10 chunks, 2 shards
  EXPECT_EQ(store->counts->direct_opens.load(), 0);
}

// The GPU path's host stages: leaves planned from targets viewed for the read are sized and
// fetched through the view.
TEST(StoreViews, TheGpuPlanAndFetchReadThroughTheReadsView) {
  auto store = std::make_shared<ViewCountingStore>();
  auto array = Array::create(store, "a", array_doc({1000}, {100}, "int32", 0, kZstd), false);
  const auto values = counting(1000);
  array->write(kAll, bytes_of(values));
  store->counts = std::make_shared<ViewCountingStore::Counts>();

  std::vector<std::byte> out(4000);
  device_read::ReadTarget target{array.get(), {{0, 1, 1000}}, StridedView{out.data(), {1000}, {4}}};
  StoreViews views;
  target.store = &views.of(array->store());
  auto leaves = device_read::plan_reads({&target, 1}, device_read::DeviceDecoders{},
                                        GpuDecode::kChecked, engine::ThreadPool::shared(2), 2);
  ASSERT_EQ(leaves.size(), 10U);
  for (const auto& leaf : leaves) EXPECT_EQ(&leaf.planned().source(), target.store);
  // Chunks this small are sized as their fetch opens them: the plan asks for no size.
  EXPECT_EQ(store->counts->sizes_through_views.load(), 0);
  (void)device_read::pack_batches(leaves, 1 << 20, 1 << 20, device_read::DecodeCosts{}, 0);
  std::vector<std::byte> host(std::size_t{1} << 20);
  (void)device_read::fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2);
  EXPECT_EQ(store->counts->opens_through_views.load(), 10);
  EXPECT_EQ(store->counts->views.load(), 1);
  EXPECT_EQ(store->counts->direct_opens.load(), 0);
}

}  // namespace
}  // namespace zarr_device
