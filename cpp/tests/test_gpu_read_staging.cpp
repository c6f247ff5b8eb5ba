// The CPU stage of a device read, without a device: a batch's chunks read, checked, and decoded
// where the device will not, into its (here, ordinary) staging memory.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "codecs/crc32c.hpp"
#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "device_read/read_staging.hpp"
#include "gpu_read_test_util.hpp"
#include "test_util.hpp"

namespace zarr_device::device_read {
namespace {

using namespace test_support;  // the helpers these files share

TEST(GpuReadStaging, PiecesHoldWholeAdjacentLeavesOfOneValue) {
  const auto spec = test::make_spec({4}, "uint8");
  std::vector<Leaf> batch;
  std::size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    // The last of another value: a piece of its own.
    Leaf leaf = sized_leaf(Route::kCopy, 256, spec, {.key = i == 3 ? "other" : "k"});
    leaf.stored.offset = static_cast<std::uint64_t>(i) * 256;
    leaf.staging.offset = at;
    at += 256;
    batch.push_back(leaf);
  }
  batch.push_back(sized_leaf(Route::kCopy, kPieceBytes * 2 + 5, spec));
  batch.back().staging.offset = at;
  const auto pieces = plan_pieces(batch);
  ASSERT_EQ(pieces.size(), 2u + 3u);
  EXPECT_EQ(pieces[0].first, 0u);
  EXPECT_EQ(pieces[0].end, 3u);
  EXPECT_EQ(pieces[0].length, 768u);
  EXPECT_TRUE(pieces[0].whole_leaves);
  EXPECT_EQ(pieces[1].first, 3u);
  EXPECT_FALSE(pieces[2].whole_leaves);  // the long leaf, in parts
  EXPECT_EQ(pieces[4].length, 5u);
}

TEST(GpuReadStaging, FetchReadsChecksAndNamesTheChunk) {
  auto store = make_memory_store();
  auto good = make_array(store, "good", {16}, {8},
                         json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}}));
  std::vector<std::byte> out;
  const ReadTarget target = whole(good, out);
  auto leaves = plan({&target, 1});
  const auto batches = pack_batches(leaves, 1 << 20, 1 << 20, DecodeCosts{}, 0);
  ASSERT_EQ(batches.size(), 1u);
  std::vector<std::byte> host(1 << 20);
  EXPECT_TRUE(fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2).empty());
  std::int32_t second = 0;
  std::memcpy(&second, host.data() + leaves[1].staging.offset, 4);
  EXPECT_EQ(second, 9);                  // the first element of chunk 1
  EXPECT_FALSE(leaves[0].stored.value);  // whole chunks' versions are let go with the batch

  // A checksum that fails is a ChecksumError naming the array and the chunk.
  auto stored = store->get("good/c/1");
  std::vector<std::byte> bad(stored->data(), stored->data() + stored->size());
  bad[0] ^= std::byte{1};
  store->set("good/c/1", bad);
  try {
    (void)fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2);
    ADD_FAILURE() << "a failing checksum passed";
  } catch (const ChecksumError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 'good/c/1'"), std::string::npos) << e.what();
  }
  // A chunk replaced by one of another size since the plan: the read must start again.
  store->set("good/c/1", test::bytes_of("short"));
  EXPECT_THROW((void)fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2),
               ValueChanged);
}

// Chunks a device read decodes on the CPU (zstd without a checksum, under "checked") that are
// stored in 8 MiB or more are read in pieces and decoded into their staging, as host reads do:
// no buffer of the stored chunk for each of them.
TEST(GpuReadStaging, LargeChunksDecodedOnTheCpuAreReadInPieces) {
  auto recording = std::make_shared<test::ReadRecordingStore>(make_memory_store());
  const std::vector<std::int64_t> shape = {2, 3000, 2000};  // 2 chunks of 12 MB (uint16)
  const std::vector<std::int64_t> chunks = {1, 3000, 2000};
  auto array =
      Array::create(recording, "big",
                    test::array_doc(shape, chunks, "uint16", 0,
                                    json::array({{{"name", "bytes"}}, {{"name", "zstd"}}})),
                    false);
  std::vector<std::uint16_t> values(static_cast<std::size_t>(test::product(shape)));
  std::mt19937 rng(9);
  for (auto& v : values) v = static_cast<std::uint16_t>(rng() % 65536);  // 12 MB stored a chunk
  array->write(test::full_selection(shape),
               {reinterpret_cast<const std::byte*>(values.data()), values.size() * 2});
  std::vector<std::byte> out(values.size() * 2);
  const ReadTarget target{array.get(), test::full_selection(shape),
                          StridedView{out.data(), shape, test::c_strides(shape, 2)}};
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 2u);
  for (const auto& leaf : leaves) ASSERT_EQ(leaf.decoding.route, Route::kCpuDecode);
  constexpr std::size_t kSlot = std::size_t{32} << 20;
  ASSERT_EQ(pack_batches(leaves, kSlot, kSlot, DecodeCosts{}, 0).size(), 1u);
  std::vector<std::byte> host(kSlot);
  recording->largest_read = 0;
  EXPECT_TRUE(fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2).empty());
  EXPECT_LE(recording->largest_read.load(), std::size_t{2} << 20);
  EXPECT_GT(recording->largest_read.load(), 0u);
  const std::size_t chunk_bytes = values.size();  // half the values, two bytes each
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(std::memcmp(host.data() + leaves[c].staging.offset,
                          reinterpret_cast<const std::byte*>(values.data()) + c * chunk_bytes,
                          chunk_bytes),
              0)
        << "chunk " << c;
  }
}

// Small chunks are planned without asking the store for their sizes: the fetch opens each anyway
// and sizes it there. One not stored becomes a fill; one stored in more bytes than its codecs can
// write (here a skippable frame after its data) is refused as a host read refuses it; a chunk
// stored as its elements in the wrong number of bytes is an error naming it.
void small_chunks_are_sized_when_opened(bool through_view) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  auto z = make_array(store, "z", {12}, {4}, kZstdCrc);
  store->erase("z/c/1");
  const auto view = dynamic_cast<const HeldRoot&>(*store).with_root_held();
  const Store* via = through_view ? view.get() : nullptr;
  std::vector<std::byte> out;
  ReadTarget target = whole(z, out);
  target.store = via;
  const std::size_t bound = z->chain().max_stored_size();
  auto planned = [&](const ReadTarget& t) {
    auto leaves = plan({&t, 1});
    for (const auto& leaf : leaves) EXPECT_FALSE(leaf.stored.sized);
    EXPECT_EQ(pack_batches(leaves, 1 << 20, 1 << 20, DecodeCosts{}, 0).size(), 1u);
    return leaves;
  };
  auto leaves = planned(target);
  ASSERT_EQ(leaves.size(), 3u);
  for (const auto& leaf : leaves) {
    EXPECT_EQ(leaf.stored.length, bound);
    EXPECT_EQ(leaf.decoding.route, Route::kDeviceDecode);
  }
  std::vector<std::byte> host(1 << 20);
  EXPECT_TRUE(fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2).empty());
  EXPECT_TRUE(leaves[0].stored.sized);
  EXPECT_EQ(leaves[0].stored.length, store->get("z/c/0")->size());
  EXPECT_EQ(leaves[0].decoding.route, Route::kDeviceDecode);
  const auto stored = store->get("z/c/0");
  EXPECT_EQ(std::memcmp(host.data() + leaves[0].staging.offset, stored->data(), stored->size()), 0);
  EXPECT_EQ(leaves[1].decoding.route, Route::kFill);
  std::int32_t fill = -1;
  std::memcpy(&fill, host.data() + leaves[1].staging.offset, 4);
  EXPECT_EQ(fill, 0);
  EXPECT_EQ(leaves[2].stored.length, store->get("z/c/2")->size());

  auto expect_refused = [&](const ReadTarget& t, const std::string& chunk,
                            const std::string& says) {
    auto leaves = planned(t);
    try {
      (void)fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2);
      ADD_FAILURE() << chunk << " was read";
    } catch (const CodecError& e) {
      EXPECT_NE(std::string(e.what()).find("chunk '" + chunk + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const auto original = store->get("z/c/2");
  std::vector<std::byte> padded(original->data(), original->data() + original->size() - 4);
  auto put32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) padded.push_back(static_cast<std::byte>(v >> (8 * i)));
  };
  constexpr std::uint32_t kSkippable = 0x184D2A50;
  put32(kSkippable);
  put32(static_cast<std::uint32_t>(bound));
  padded.resize(padded.size() + bound, std::byte{0});
  put32(codecs::crc32c(padded));
  store->set("z/c/2", padded);
  expect_refused(target, "z/c/2", "more than the");
  store->set("z/c/2", {original->data(), original->size()});
  std::vector<std::byte> damaged(stored->data(), stored->data() + stored->size());
  damaged[damaged.size() / 2] ^= std::byte{1};
  store->set("z/c/0", damaged);
  expect_refused(target, "z/c/0", "crc32c mismatch");

  auto p =
      make_array(store, "p", {8}, {4}, json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}}));
  store->set("p/c/1", test::bytes_of("short"));
  ReadTarget copies = whole(p, out);
  copies.store = via;
  expect_refused(copies, "p/c/1", "holds 5 bytes, expected 20");
}

// Read through the store itself and through a read's view of it (its root held, as a read does):
// the same sizes, fills and errors either way.
TEST(GpuReadStaging, SmallChunksAreSizedWhenOpened) {
  for (const bool through_view : {false, true}) {
    SCOPED_TRACE(through_view ? "through a read's view" : "through the store");
    small_chunks_are_sized_when_opened(through_view);
  }
}

// A batch of many small chunk files keeps few of them open at once: each is opened by the task
// that reads it and closed once read, so a read of thousands of small chunks stays within the
// process's limit on open files (a 64 MiB slot of 16 KiB chunks held 4096 files open, and several
// batches are fetched at once: "Too many open files").
TEST(GpuReadStaging, ManySmallChunkFilesKeepFewOpen) {
  test::TempDir dir;
  auto store = make_local_store(dir.path());
  constexpr std::int64_t kChunks = 1024;
  int n = 0;
  for (const auto& codecs : {json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}}), kZstdCrc,
                             json::array({{{"name", "bytes"}}, {{"name", "zstd"}}})}) {
    auto array = make_array(store, "a" + std::to_string(n++), {kChunks * 4}, {4}, codecs);
    std::vector<std::byte> out;
    const ReadTarget target = whole(array, out);
    auto leaves = plan({&target, 1});
    // (The plan leaves chunks this small to be sized by the fetch: a slot holds their bounds.)
    const auto batches = pack_batches(leaves, 4 << 20, 4 << 20, DecodeCosts{}, 0);
    ASSERT_EQ(batches.size(), 1u);
    std::size_t open_now = 0;
    for ([[maybe_unused]] const auto& entry :
         std::filesystem::directory_iterator("/proc/self/fd")) {
      ++open_now;
    }
    rlimit before{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
    rlimit lowered = before;
    lowered.rlim_cur = std::min<rlim_t>(before.rlim_cur, open_now + 64);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
    std::vector<std::byte> host(4 << 20);
    std::vector<CpuDecoded> decoded;
    try {
      decoded = fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2);
    } catch (...) {
      setrlimit(RLIMIT_NOFILE, &before);
      throw;
    }
    rlimit after{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
    // Within the lowered limit: not raised (which the store does when an open reaches it).
    EXPECT_EQ(after.rlim_cur, lowered.rlim_cur);
    // Every chunk was read: the last one's first element, staged as stored or decoded on the CPU
    // (compressed chunks for the device are checked by their crc32c).
    EXPECT_TRUE(decoded.empty());
    const auto& last = leaves.back();
    if (last.decoding.route != Route::kDeviceDecode) {
      std::int32_t first = 0;
      std::memcpy(&first, host.data() + last.staging.offset, 4);
      EXPECT_EQ(first, (kChunks - 1) * 4 + 1);
    }
    for (const auto& leaf : leaves) EXPECT_FALSE(leaf.stored.value);
  }
}

}  // namespace
}  // namespace zarr_device::device_read
