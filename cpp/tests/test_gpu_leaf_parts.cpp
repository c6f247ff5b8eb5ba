// Chunks staged a part at a time by a device read (device_read/leaf_parts.hpp), without a device:
// the parts planned, packed into slots, fetched into (here, ordinary) staging memory in any order
// and on several threads at once, and placed as the device stage would (one copy each), equal
// the chunks; damage, truncation and replacement fail as for whole chunks, naming the chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <vector>

#include "device_read/leaf_parts.hpp"
#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "device_read/read_staging.hpp"
#include "gpu_read_test_util.hpp"
#include "test_util.hpp"

namespace zarr_device::device_read {
namespace {

using namespace test_support;  // the helpers these files share

constexpr std::size_t kSlot = std::size_t{256} << 10;
constexpr PartSizes kSizes{{4 * kSlot, 4, kSlot, 0}, 2};
const json kZstd = json::array({{{"name", "bytes"}}, {{"name", "zstd"}}});
const json kPlainCrc = json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}});

// Each batch in staging of its own (as if the ring had a slot for each), lent as a read lends it.
struct Staged {
  std::vector<Leaf> leaves;
  std::vector<Batch> batches;
  std::vector<std::vector<std::byte>> slots;

  explicit Staged(std::vector<Leaf> planned) : leaves(std::move(planned)) {
    batches = pack_batches(leaves, kSlot, kSlot, DecodeCosts{}, 0);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      slots.emplace_back(kSlot);
      lend_part_staging(batch(b), slots[b].data());
    }
  }
  std::span<Leaf> batch(std::size_t b) {
    return {leaves.data() + batches[b].begin, batches[b].end - batches[b].begin};
  }
  void fetch(std::size_t b) {
    EXPECT_TRUE(fetch_batch(batch(b), slots[b].data(), engine::ThreadPool::shared(2), 2).empty());
  }
  // What the device stage does with parts: one copy of each into its destination.
  void place() {
    for (std::size_t b = 0; b < batches.size(); ++b) {
      for (const auto& leaf : batch(b)) {
        ASSERT_TRUE(leaf.part.chunk);
        std::memcpy(leaf.planned().destination.data, slots[b].data() + leaf.staging.offset,
                    leaf.staging.bytes);
      }
    }
  }
};

// Planned with every chunk sized (small chunks are otherwise sized by their fetch, and never cut:
// slots are at least 2 MiB, more than they can be).
std::vector<Leaf> plan_sized(std::span<const ReadTarget> targets,
                             GpuDecode policy = GpuDecode::kChecked) {
  return plan_reads(targets, all_decoders(), policy, engine::ThreadPool::shared(2), 2,
                    PlanSizes::kNow);
}

std::vector<std::int32_t> counting(std::size_t n) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), 1);
  return v;
}

std::vector<std::byte> bytes_of(const std::vector<std::int32_t>& v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  return {p, p + v.size() * 4};
}

TEST(GpuLeafParts, ChunksAreCutInPartsThatFitASlotAndInterleave) {
  auto store = make_memory_store();
  auto plain = make_array(store, "plain", {3, 200000}, {1, 200000}, kPlainCrc);  // 800 KB chunks
  auto zstd = make_array(store, "zstd", {3, 200000}, {1, 200000}, kZstd);
  auto small = make_array(store, "small", {3, 20000}, {1, 20000}, kZstd);  // 80 KB: whole
  std::vector<std::byte> out_plain;
  std::vector<std::byte> out_zstd;
  std::vector<std::byte> out_small;
  const std::vector<ReadTarget> targets = {whole(plain, out_plain), whole(zstd, out_zstd),
                                           whole(small, out_small)};
  auto leaves = plan_sized(targets);
  ASSERT_EQ(leaves.size(), 9u);
  EXPECT_EQ(cut_into_parts(leaves, kSizes), 6u);
  // 800 KB in parts of a slot (256 KiB): 4 each; the small chunks stay whole.
  ASSERT_EQ(leaves.size(), 3u * 4 + 3u * 4 + 3u);
  for (const auto& leaf : leaves) EXPECT_LE(staged_bytes(leaf), kSlot);
  // A copied chunk's parts in order; the decoded chunks' interleaved (up to 2 x 2 threads' worth:
  // all three here).
  for (std::size_t p = 0; p < 4; ++p) EXPECT_EQ(leaves[p].part.chunk, leaves[0].part.chunk);
  EXPECT_EQ(leaves[12].decoding.route, Route::kCpuDecode);
  EXPECT_NE(leaves[12].part.chunk, leaves[13].part.chunk);
  EXPECT_NE(leaves[13].part.chunk, leaves[14].part.chunk);
  EXPECT_EQ(leaves[12].part.chunk, leaves[15].part.chunk);
  EXPECT_EQ(leaves[15].part.index, 1u);
  EXPECT_FALSE(leaves.back().part.chunk);
}

// Chunks whose decoders' memory (history and a stored piece each) would pass the window budget
// interleave in smaller groups: here two at a time instead of all three.
TEST(GpuLeafParts, GroupsKeepToTheWindowBudget) {
  auto store = make_memory_store();
  auto zstd = make_array(store, "zstd", {3, 200000}, {1, 200000}, kZstd);  // 800 KB chunks
  std::vector<std::byte> out;
  const std::vector<ReadTarget> targets = {whole(zstd, out)};
  auto leaves = plan_sized(targets);
  PartSizes tight = kSizes;
  tight.window_budget = std::size_t{6} << 20;  // two chunks' 800 KB history and 2 MiB piece each
  EXPECT_EQ(cut_into_parts(leaves, tight), 3u);
  ASSERT_EQ(leaves.size(), 12u);
  EXPECT_NE(leaves[0].part.chunk, leaves[1].part.chunk);
  EXPECT_EQ(leaves[0].part.chunk, leaves[2].part.chunk);  // A0 B0 A1 B1 ...
  EXPECT_EQ(leaves[8].part.chunk, leaves[9].part.chunk);  // ... then C0 C1 C2 C3
  EXPECT_EQ(leaves[9].part.index, 1u);
  Staged staged(std::move(leaves));
  for (std::size_t b = 0; b < staged.batches.size(); ++b) staged.fetch(b);
  staged.place();
  EXPECT_EQ(out, bytes_of(counting(600000)));
}

// Fetched last batch first, so that a decoded chunk's later parts decode its earlier ones into
// their slots, and a copied chunk's checksum is joined from parts fetched out of order.
TEST(GpuLeafParts, PartsFetchedInAnyOrderEqualTheChunks) {
  auto store = make_memory_store();
  const json zstd_crc = kZstdCrc;
  auto plain = make_array(store, "plain", {3, 200000}, {1, 200000}, kPlainCrc);
  auto zstd = make_array(store, "zstd", {3, 200000}, {1, 200000}, kZstd);
  auto both = make_array(store, "both", {2, 300001}, {1, 300001}, zstd_crc);
  const auto expected_small = counting(600000);
  for (const bool concurrently : {false, true}) {
    SCOPED_TRACE(concurrently ? "batches at once" : "last batch first");
    std::vector<std::byte> out_plain;
    std::vector<std::byte> out_zstd;
    std::vector<std::byte> out_both;
    const std::vector<ReadTarget> targets = {whole(plain, out_plain), whole(zstd, out_zstd),
                                             whole(both, out_both)};
    // Under "off" every compressed chunk decodes on the CPU (zstd + crc32c too).
    auto leaves = plan_sized(targets, GpuDecode::kOff);
    cut_into_parts(leaves, kSizes);
    Staged staged(std::move(leaves));
    if (concurrently) {
      std::vector<std::future<void>> fetches;
      for (std::size_t b = 0; b < staged.batches.size(); ++b) {
        fetches.push_back(std::async(std::launch::async, [&staged, b] { staged.fetch(b); }));
      }
      for (auto& f : fetches) f.get();
    } else {
      for (std::size_t b = staged.batches.size(); b-- > 0;) staged.fetch(b);
    }
    staged.place();
    EXPECT_EQ(out_plain, bytes_of(expected_small));
    EXPECT_EQ(out_zstd, bytes_of(expected_small));
    EXPECT_EQ(out_both, bytes_of(counting(600002)));
  }
}

// A device decode larger than the whole ring, which no slot can hold: decoded on the CPU in parts.
TEST(GpuLeafParts, DeviceDecodesNoSlotHoldsAreDecodedOnTheCpuInParts) {
  auto store = make_memory_store();
  auto big = make_array(store, "big", {1, 1000000}, {1, 1000000}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(big, out);
  auto leaves = plan_sized({&target, 1});
  ASSERT_EQ(leaves.size(), 1u);
  ASSERT_EQ(leaves[0].decoding.route, Route::kDeviceDecode);
  PartSizes roomy = kSizes;
  roomy.staging.bytes = leaves[0].stored.length;
  EXPECT_FALSE(staged_in_parts(leaves[0], roomy));  // a ring that holds it: the device's
  PartSizes tight = kSizes;
  tight.staging.bytes = leaves[0].stored.length - 1;
  EXPECT_EQ(cut_into_parts(leaves, tight), 1u);
  EXPECT_EQ(leaves[0].decoding.route, Route::kCpuDecode);
  Staged staged(std::move(leaves));
  for (std::size_t b = 0; b < staged.batches.size(); ++b) staged.fetch(b);
  staged.place();
  EXPECT_EQ(out, bytes_of(counting(1000000)));
}

// The values 1, 2, ... of an int32 array of `shape` at `selection`, in C order.
std::vector<std::int32_t> selected_counting(const std::vector<std::int64_t>& shape,
                                            const std::vector<DimSlice>& selection) {
  std::vector<std::int32_t> out;
  const std::int64_t cols = shape[1];
  for (std::int64_t i = 0; i < selection[0].count; ++i) {
    for (std::int64_t j = 0; j < selection[1].count; ++j) {
      const std::int64_t r = selection[0].start + i * selection[0].step;
      const std::int64_t c = selection[1].start + j * selection[1].step;
      out.push_back(static_cast<std::int32_t>(r * cols + c + 1));
    }
  }
  return out;
}

// A selection that cuts a chunk larger than the whole staging (refused before) is staged in parts
// of its selected elements, taken from the chunk in one pass: rows, columns, steps, a single
// element; decoded (zstd, zstd + crc32c: checked on the CPU, or a device decode no slot holds) or
// stored as they are (with and without a crc32c). Only where the chunk passes the staging.
// (Chunks replaced since the plan fail as whole chunks do: FailuresNameTheChunk.)
TEST(GpuLeafParts, SelectionsOfChunksLargerThanTheStagingAreReadInParts) {
  const std::vector<std::int64_t> shape = {600, 1000};  // one chunk of 2.4 MB
  const std::vector<std::vector<DimSlice>> selections = {
      {{100, 1, 400}, {0, 1, 1000}},  // rows: one stretch of the chunk
      {{0, 1, 600}, {250, 1, 500}},   // columns: a run per row
      {{3, 7, 80}, {1, 3, 300}},      // steps: an element per run
      {{599, 1, 1}, {999, 1, 1}},     // the last element
      {{0, 1, 600}, {0, 1, 999}},     // all but the last column
  };
  const json kPlain = json::array({{{"name", "bytes"}}});
  auto store = make_memory_store();
  std::size_t n = 0;
  for (const auto& [codecs, policy] :
       {std::pair{kZstd, GpuDecode::kChecked}, std::pair{kZstdCrc, GpuDecode::kChecked},
        std::pair{kZstdCrc, GpuDecode::kTrusted}, std::pair{kPlainCrc, GpuDecode::kChecked},
        std::pair{kPlain, GpuDecode::kChecked}}) {
    auto array = make_array(store, "a" + std::to_string(n++), shape, shape, codecs);
    for (const auto& selection : selections) {
      const auto expected = selected_counting(shape, selection);
      std::vector<std::byte> out(expected.size() * 4);
      const std::vector<std::int64_t> counts = {selection[0].count, selection[1].count};
      const ReadTarget target{array.get(), selection,
                              StridedView{out.data(), counts, test::c_strides(counts, 4)}};
      auto leaves = plan_sized({&target, 1}, policy);
      ASSERT_EQ(leaves.size(), 1u);
      PartSizes roomy = kSizes;
      roomy.staging.bytes = std::size_t{8} << 20;
      EXPECT_FALSE(staged_in_parts(leaves[0], roomy));  // a ring that holds the chunk
      EXPECT_EQ(cut_into_parts(leaves, kSizes), 1u) << array->path();
      // Rows (or part of one) of a chunk stored as it is: copies of that stretch alone (the
      // rest of the chunk read only where a crc32c covers it); anything else taken from the
      // whole chunk in one pass.
      const bool stretch = (codecs == kPlain || codecs == kPlainCrc) &&
                           (selection[1].count == 1000 || selection[0].count == 1);
      EXPECT_EQ(leaves.front().decoding.route, stretch ? Route::kCopy : Route::kCpuDecode);
      if (stretch) {
        std::size_t read = 0;
        for (const auto& leaf : leaves) read += leaf.stored.length;
        EXPECT_EQ(read, expected.size() * 4);
      }
      // A stretch under a crc32c: its parts' fetches checksum the bytes around it, CPU work
      // fetched as far ahead as CPU decodes are (a plain stretch's copies half the ring).
      const bool around = stretch && codecs == kPlainCrc;
      EXPECT_EQ(checks_around(leaves.front()), around) << array->path();
      EXPECT_EQ(fetch_ahead({leaves.data(), 1}, 12), around || !stretch ? 11u : 6u)
          << array->path();
      Staged staged(std::move(leaves));
      for (std::size_t b = staged.batches.size(); b-- > 0;) staged.fetch(b);  // last part first
      staged.place();
      EXPECT_EQ(out, bytes_of(expected)) << array->path() << " " << selection[0].start;
    }
  }
}

// Damage anywhere in a chunk cut by a selection fails its read (its checksum covers the bytes
// the selection passes over), naming the chunk: before the selected rows or after them, the
// selection one part or several (whose fetches each check a share of the rest).
TEST(GpuLeafParts, DamageOutsideASelectionIsFound) {
  const std::vector<std::int64_t> shape = {600, 1000};
  auto store = make_memory_store();
  std::size_t n = 0;
  for (const auto& codecs : {kPlainCrc, kZstdCrc}) {
    for (const std::int64_t rows : {10, 200}) {
      for (const bool damage_after : {true, false}) {
        auto array = make_array(store, "d" + std::to_string(n++), shape, shape, codecs);
        const std::string key = array->path() + "/c/0/0";
        auto stored = store->get(key);
        std::vector<std::byte> bytes(stored->data(), stored->data() + stored->size());
        // In the last rows or the first, neither selected (zstd: its last block or its first).
        bytes[damage_after ? bytes.size() - 100 : 100] ^= std::byte{1};
        store->set(key, bytes);
        const std::vector<DimSlice> selection = {{300, 1, rows}, {0, 1, 1000}};
        std::vector<std::byte> out(static_cast<std::size_t>(rows) * 1000 * 4);
        const std::vector<std::int64_t> counts = {rows, 1000};
        const ReadTarget target{array.get(), selection,
                                StridedView{out.data(), counts, test::c_strides(counts, 4)}};
        auto leaves = plan_sized({&target, 1});
        ASSERT_EQ(cut_into_parts(leaves, kSizes), 1u);
        Staged staged(std::move(leaves));
        EXPECT_EQ(staged.batches.size() > 1, rows == 200);
        std::vector<std::string> errors;
        for (std::size_t b = 0; b < staged.batches.size(); ++b) {
          try {
            (void)fetch_batch(staged.batch(b), staged.slots[b].data(),
                              engine::ThreadPool::shared(2), 2);
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kChecksum) << e.what();
            errors.emplace_back(e.what());
          }
        }
        ASSERT_FALSE(errors.empty()) << "damage not found in " << key;
        EXPECT_NE(errors[0].find("chunk '" + key + "'"), std::string::npos) << errors[0];
      }
    }
  }
}

// Damage to a copied chunk's bytes is a checksum error naming the chunk once all its parts are
// in; a truncated decoded chunk a codec error naming it, raised by each of its parts fetched
// after the failure; a chunk replaced since the plan, ValueChanged.
TEST(GpuLeafParts, FailuresNameTheChunk) {
  auto store = make_memory_store();
  auto plain = make_array(store, "plain", {1, 200000}, {1, 200000}, kPlainCrc);
  auto zstd = make_array(store, "zstd", {1, 200000}, {1, 200000}, kZstd);
  auto damage = [&](const std::string& key, auto&& change) {
    auto stored = store->get(key);
    std::vector<std::byte> bytes(stored->data(), stored->data() + stored->size());
    change(bytes);
    store->set(key, bytes);
  };
  damage("plain/c/0/0", [](std::vector<std::byte>& b) { b[b.size() / 2] ^= std::byte{4}; });
  damage("zstd/c/0/0", [](std::vector<std::byte>& b) { b.resize(b.size() - 40); });
  for (const auto& [array, kind] :
       {std::pair{plain, ErrorKind::kChecksum}, std::pair{zstd, ErrorKind::kCodec}}) {
    std::vector<std::byte> out;
    const ReadTarget target = whole(array, out);
    auto leaves = plan_sized({&target, 1});
    cut_into_parts(leaves, kSizes);
    Staged staged(std::move(leaves));
    std::vector<std::string> errors;
    for (std::size_t b = staged.batches.size(); b-- > 0;) {  // the last part first
      try {
        (void)fetch_batch(staged.batch(b), staged.slots[b].data(), engine::ThreadPool::shared(2),
                          2);
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << e.what();
        EXPECT_NE(std::string(e.what()).find("chunk '" + array->path() + "/c/0/0'"),
                  std::string::npos)
            << e.what();
        errors.emplace_back(e.what());
      }
    }
    ASSERT_FALSE(errors.empty()) << array->path();
    if (kind == ErrorKind::kCodec) {
      // The last part, fetched first, decodes the chunk's parts up to it and finds its data
      // short; each part fetched after raises too.
      ASSERT_EQ(errors.size(), staged.batches.size());
      EXPECT_NE(errors.front().find("truncated"), std::string::npos) << errors.front();
      EXPECT_NE(errors.back().find("an earlier part of the chunk failed"), std::string::npos)
          << errors.back();
    } else {
      EXPECT_EQ(errors.size(), 1u);  // checked once all its parts are in
    }
  }
  // Replaced by a chunk of another size since the plan.
  std::vector<std::byte> out;
  auto fresh = make_array(store, "fresh", {1, 200000}, {1, 200000}, kPlainCrc);
  const ReadTarget target = whole(fresh, out);
  auto leaves = plan_sized({&target, 1});
  cut_into_parts(leaves, kSizes);
  Staged staged(std::move(leaves));
  store->set("fresh/c/0/0", test::bytes_of("short"));
  EXPECT_THROW(staged.fetch(0), ValueChanged);
}

}  // namespace
}  // namespace zarr_device::device_read
