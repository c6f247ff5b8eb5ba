// The host stages of a device read, without a device: planning many arrays of mixed layouts into
// one list of leaves, routing each by what its codecs declare, batching into staging slots and
// decode regions, and the CPU stage that reads and checks a batch into (here, ordinary) memory.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "gpu/decode_share.hpp"
#include "gpu/read_batches.hpp"
#include "gpu/read_plan.hpp"
#include "gpu/read_staging.hpp"
#include "test_util.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device::gpu {
namespace {

using test::array_doc;
using test::json;

const json kZstdCrc = json::array({{{"name", "bytes"}}, {{"name", "zstd"}}, {{"name", "crc32c"}}});

json sharded(const std::vector<std::int64_t>& inner, const json& codecs) {
  return json::array({{{"name", "sharding_indexed"},
                       {"configuration", {{"chunk_shape", inner}, {"codecs", codecs}}}}});
}

DeviceDecoders all_decoders() {
  DeviceDecoders d;
  d.present.fill(true);
  d.present[static_cast<std::size_t>(DecodeKind::kChecksum)] = false;
  return d;
}

// An array in `store` at `path`, filled with 0, 1, 2, ... (as int32) where `fill` says.
std::shared_ptr<const Array> make_array(const std::shared_ptr<Store>& store,
                                        const std::string& path, std::vector<std::int64_t> shape,
                                        std::vector<std::int64_t> chunks, const json& codecs,
                                        bool fill = true) {
  auto array = Array::create(store, path, array_doc(shape, chunks, "int32", 0, codecs), false);
  if (fill) {
    std::vector<std::int32_t> values(static_cast<std::size_t>(test::product(shape)));
    std::iota(values.begin(), values.end(), 1);
    array->write(test::full_selection(shape),
                 {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4});
  }
  return array;
}

ReadTarget whole(const std::shared_ptr<const Array>& array, std::vector<std::byte>& out) {
  const auto& shape = array->metadata().shape;
  out.assign(static_cast<std::size_t>(test::product(shape)) * 4, std::byte{0});
  return {array.get(), test::full_selection(shape),
          StridedView{out.data(), shape, test::c_strides(shape, 4)}};
}

std::vector<Leaf> plan(std::span<const ReadTarget> targets, GpuDecode policy = GpuDecode::kChecked,
                       const DeviceDecoders& decoders = all_decoders()) {
  return plan_reads(targets, decoders, policy, engine::ThreadPool::shared(2), 2);
}

TEST(GpuReadPlan, RoutesByWhatCodecsDeclare) {
  auto store = make_memory_store();
  struct Case {
    json codecs;
    GpuDecode policy;
    Route route;
    int crc32c;
    std::size_t header, trailer;
  };
  const Case cases[] = {
      {json::array({{{"name", "bytes"}}}), GpuDecode::kChecked, Route::kCopy, 0, 0, 0},
      {json::array({{{"name", "bytes"}}, {{"name", "crc32c"}}}), GpuDecode::kChecked, Route::kCopy,
       1, 0, 4},
      {kZstdCrc, GpuDecode::kChecked, Route::kDeviceDecode, 1, 0, 4},
      {kZstdCrc, GpuDecode::kOff, Route::kCpuDecode, 1, 0, 4},
      {json::array({{{"name", "bytes"}}, {{"name", "zstd"}}}), GpuDecode::kChecked,
       Route::kCpuDecode, 0, 0, 0},
      {json::array({{{"name", "bytes"}}, {{"name", "zstd"}}}), GpuDecode::kTrusted,
       Route::kDeviceDecode, 0, 0, 0},
      {json::array({{{"name", "bytes"}}, {{"name", "numcodecs.zlib"}}, {{"name", "crc32c"}}}),
       GpuDecode::kChecked, Route::kDeviceDecode, 1, 2, 8},
      {json::array({{{"name", "bytes"}}, {{"name", "numcodecs.lz4"}}}), GpuDecode::kTrusted,
       Route::kDeviceDecode, 0, 4, 0},
      {json::array(
           {{{"name", "bytes"}}, {{"name", "gzip"}}, {{"name", "zstd"}}, {{"name", "crc32c"}}}),
       GpuDecode::kTrusted, Route::kCpuDecode, 1, 0, 4},
      {json::array({{{"name", "bytes"}}, {{"name", "blosc"}}, {{"name", "crc32c"}}}),
       GpuDecode::kTrusted, Route::kCpuDecode, 1, 0, 4},
  };
  int n = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.codecs.dump() + " policy " + std::to_string(static_cast<int>(c.policy)));
    auto array = make_array(store, "a" + std::to_string(n++), {8}, {8}, c.codecs);
    std::vector<std::byte> out;
    const ReadTarget target = whole(array, out);
    const auto leaves = plan({&target, 1}, c.policy);
    ASSERT_EQ(leaves.size(), 1u);
    EXPECT_EQ(leaves[0].route, c.route);
    EXPECT_EQ(leaves[0].crc32c, c.crc32c);
    if (c.route == Route::kDeviceDecode) {
      EXPECT_EQ(leaves[0].header, c.header);
      EXPECT_EQ(leaves[0].trailer, c.trailer);
    }
  }
  // No device decoder present: the CPU decodes.
  auto array = make_array(store, "none", {8}, {8}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  EXPECT_EQ(plan({&target, 1}, GpuDecode::kTrusted, DeviceDecoders{})[0].route, Route::kCpuDecode);
}

TEST(GpuReadPlan, ManyArraysOfMixedLayoutsAreOneList) {
  auto store = make_memory_store();
  auto plain = make_array(store, "plain", {6, 4}, {3, 4}, json::array({{{"name", "bytes"}}}));
  auto empty = make_array(store, "empty", {4}, {2}, kZstdCrc, /*fill=*/false);
  auto shards = make_array(store, "shards", {8, 8}, {8, 8}, sharded({4, 4}, kZstdCrc));
  std::vector<std::byte> a, b, c;
  const ReadTarget targets[] = {whole(plain, a), whole(empty, b), whole(shards, c)};
  const auto leaves = plan(targets);
  ASSERT_EQ(leaves.size(), 2u + 2u + 4u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(leaves[i].array, plain.get());
    EXPECT_EQ(leaves[i].route, Route::kCopy);
    EXPECT_EQ(leaves[i].length, 3u * 4 * 4);
    EXPECT_EQ(leaves[i].destination.data, a.data() + i * 48);
  }
  EXPECT_EQ(leaves[0].key, "plain/c/0/0");
  EXPECT_EQ(leaves[1].target, 0u);  // which output each lands in (copies never span two)
  EXPECT_EQ(leaves[2].target, 1u);
  EXPECT_EQ(leaves[7].target, 2u);
  for (std::size_t i = 2; i < 4; ++i) EXPECT_EQ(leaves[i].route, Route::kFill);
  for (std::size_t i = 4; i < 8; ++i) {
    const auto& leaf = leaves[i];
    EXPECT_EQ(leaf.array, shards.get());
    EXPECT_EQ(leaf.key, "shards/c/0/0");
    EXPECT_EQ(leaf.route, Route::kDeviceDecode);
    EXPECT_EQ(leaf.codec, DecodeKind::kZstd);
    ASSERT_TRUE(leaf.value);  // the shard's one open version, shared
    EXPECT_EQ(leaf.value, leaves[4].value);
  }
  // Inner chunks land in their quarter of the output: (0,0), (0,4), (4,0), (4,4).
  EXPECT_EQ(leaves[5].destination.data, c.data() + 4 * 4);
  EXPECT_EQ(leaves[6].destination.data, c.data() + 4 * 8 * 4);
}

TEST(GpuReadPlan, ErrorsNameTheArrayAndChunk) {
  auto store = make_memory_store();
  auto shards = make_array(store, "bad", {8}, {8}, sharded({4}, kZstdCrc));
  auto bytes = store->get("bad/c/0");
  std::vector<std::byte> broken(bytes->data(), bytes->data() + bytes->size());
  broken.back() ^= std::byte{1};  // the index's checksum
  store->set("bad/c/0", broken);
  std::vector<std::byte> out;
  const ReadTarget target = whole(shards, out);
  try {
    (void)plan({&target, 1});
    ADD_FAILURE() << "planned a shard whose index fails its checksum";
  } catch (const ChecksumError& e) {
    EXPECT_NE(std::string(e.what()).find("array 'bad'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("chunk 'bad/c/0'"), std::string::npos) << e.what();
  }
}

TEST(GpuReadPlan, FramingChecksBeforeTheDeviceSeesBytes) {
  auto store = make_memory_store();
  auto array = make_array(store, "z", {64}, {64}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  const auto leaves = plan({&target, 1});
  auto stored = store->get("z/c/0");
  std::vector<std::byte> bytes(stored->data(), stored->data() + stored->size());
  EXPECT_TRUE(device_can_take(leaves[0], bytes));
  bytes[5] ^= std::byte{0xff};  // the frame header's content size
  EXPECT_FALSE(device_can_take(leaves[0], bytes));
  EXPECT_FALSE(device_can_take(leaves[0], std::span(bytes).first(3)));
}

Leaf sized_leaf(Route route, std::size_t length, const ChunkSpec& spec) {
  Leaf leaf;
  leaf.route = route;
  leaf.length = length;
  leaf.spec = &spec;
  leaf.key = "k";
  return leaf;
}

TEST(GpuReadBatches, SlotsAndDecodeRegionsCutBatches) {
  const auto spec = test::make_spec({1024}, "uint8");
  std::vector<Leaf> leaves;
  for (int i = 0; i < 10; ++i) leaves.push_back(sized_leaf(Route::kCopy, 1000, spec));
  auto batches = pack_batches(leaves, 4096, 4096, DecodeCosts{}, 0);
  // Leaves of 1000 bytes at 1024-byte steps (the slot alignment is 256): 4 per 4 KiB slot.
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].end, 4u);
  EXPECT_EQ(leaves[1].staging, 1024u);
  EXPECT_EQ(batches.back().end, 10u);
  // Device decodes also stop at the decode region's budget.
  std::vector<Leaf> decodes;
  for (int i = 0; i < 10; ++i) decodes.push_back(sized_leaf(Route::kDeviceDecode, 100, spec));
  DecodeCosts costs{};
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {1000, 1000};
  batches = pack_batches(decodes, 1 << 20, 1 << 20, costs, 3100);  // 3 chunks' temporary memory
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].end - batches[0].begin, 3u);
  // A leaf larger than a slot cannot be read this way: a typed error that says what to do.
  std::vector<Leaf> huge = {sized_leaf(Route::kCopy, 5000, spec)};
  auto array = Array::create(make_memory_store(), "h", array_doc({4}, {4}, "uint8"), false);
  huge[0].array = array.get();
  EXPECT_THROW((void)pack_batches(huge, 4096, 4096, DecodeCosts{}, 0), OutOfMemoryError);
}

TEST(GpuReadBatches, SmallReadsAreCutIntoSmallBatches) {
  // A read costs about a batch's fetch before its first copy and a batch's copy after its last
  // fetch: a small read is cut finer than the slots, a large one fills them.
  const auto spec = test::make_spec({1 << 20}, "uint8");
  constexpr std::size_t kSlot = std::size_t{64} << 20;
  std::vector<Leaf> small;
  for (int i = 0; i < 32; ++i) small.push_back(sized_leaf(Route::kCopy, 1 << 20, spec));
  const std::size_t target = batch_target(small, kSlot, 12);
  EXPECT_EQ(target, kMinBatchBytes);
  const auto batches = pack_batches(small, kSlot, target, DecodeCosts{}, 0);
  ASSERT_EQ(batches.size(), 8u);
  EXPECT_EQ(batches[0].end, 4u);
  std::vector<Leaf> large;
  for (int i = 0; i < 4096; ++i) large.push_back(sized_leaf(Route::kCopy, 1 << 20, spec));
  EXPECT_EQ(batch_target(large, kSlot, 12), kCopyBatchBytes);
  EXPECT_EQ(batch_target(large, 2 << 20, 12), std::size_t{2} << 20);  // never more than a slot
  // Batches with device decodes fill their slot: the decoder's speed follows its chunks in flight.
  std::vector<Leaf> decodes;
  for (int i = 0; i < 32; ++i) decodes.push_back(sized_leaf(Route::kDeviceDecode, 1 << 20, spec));
  EXPECT_EQ(pack_batches(decodes, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX).size(), 1u);
  // So do batches of chunks decoded on CPU threads: a batch's chunks are decoded at once.
  std::vector<Leaf> cpu;
  for (int i = 0; i < 32; ++i) {
    cpu.push_back(sized_leaf(Route::kCpuDecode, 1 << 19, spec));
    cpu.back().selection = test::full_selection(spec.shape);  // 1 MiB decoded each
  }
  EXPECT_EQ(pack_batches(cpu, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX).size(), 1u);
  // A chunk larger than the target still goes alone into a slot that holds it.
  const auto big_spec = test::make_spec({std::size_t{20} << 20}, "uint8");
  std::vector<Leaf> big = {sized_leaf(Route::kCopy, std::size_t{20} << 20, big_spec),
                           sized_leaf(Route::kCopy, 1 << 20, spec)};
  const auto two = pack_batches(big, kSlot, kMinBatchBytes, DecodeCosts{}, 0);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].end, 1u);
}

TEST(GpuReadBatches, DecodeRegionsFollowTheData) {
  const auto spec = test::make_spec({1 << 18}, "uint8");
  std::vector<Leaf> leaves;
  for (int i = 0; i < 8; ++i) {
    Leaf leaf = sized_leaf(Route::kDeviceDecode, 1 << 17, spec);
    leaf.selection = test::full_selection(spec.shape);
    // A destination the decoder's output cannot start at (misaligned): decoded into scratch.
    leaf.destination = {reinterpret_cast<std::byte*>(std::uintptr_t{1}), spec.shape, {1}};
    leaves.push_back(leaf);
  }
  DecodeCosts costs{};
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {1 << 20, 1 << 18};
  PerKind alignment{};
  alignment.fill(8);
  // Not in place (no destination): each needs a chunk of scratch, 512 KiB of decode memory per
  // chunk after the first's 1.25 MiB. Slots of 256 KiB hold two chunks each; 4 MiB of decode
  // memory holds six chunks in one region, two in each of two, one in each of three: two regions
  // put four in flight, the most.
  constexpr std::size_t kSlot = std::size_t{1} << 18;
  constexpr std::size_t kMemory = std::size_t{4} << 20;
  EXPECT_EQ(plan_decode_regions(leaves, costs, alignment, 12, kSlot, kMemory), 2u);
  EXPECT_EQ(leaves[0].decode_scratch, std::size_t{1} << 18);
  EXPECT_EQ(plan_decode_regions(leaves, costs, alignment, 1, kSlot, kMemory), 1u);  // the slots
  // Plenty of memory and slots that hold every chunk: one region, one call for all of them.
  EXPECT_EQ(plan_decode_regions(leaves, costs, alignment, 12, kSlot * 8, kMemory * 64), 1u);
  // Large chunks: a slot holds one, so the regions bound what decodes at once, as many as
  // memory allows (here 8 of 512 KiB, the most streams), not the 3 the staging's size would give.
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {1 << 18, 1 << 18};
  std::vector<Leaf> large(16, leaves[0]);
  EXPECT_EQ(plan_decode_regions(large, costs, alignment, 12, std::size_t{1} << 17, kMemory), 8u);
  // Memory for one chunk only: one region.
  EXPECT_EQ(plan_decode_regions(large, costs, alignment, 12, std::size_t{1} << 17, 1 << 18), 1u);
}

TEST(GpuReadBatches, DecodesCanBeKeptOutOfPlace) {
  // Chunks that could be decoded straight into their output go through scratch when asked.
  const auto spec = test::make_spec({1 << 18}, "uint8");
  alignas(256) static std::byte output[1 << 18];
  std::vector<Leaf> leaves;
  for (int i = 0; i < 4; ++i) {
    Leaf leaf = sized_leaf(Route::kDeviceDecode, 1 << 17, spec);
    leaf.selection = test::full_selection(spec.shape);
    leaf.destination = {output, spec.shape, {1}};
    leaves.push_back(leaf);
  }
  DecodeCosts costs{};
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {1 << 20, 1 << 18};
  PerKind alignment{};
  alignment.fill(8);
  constexpr std::size_t kSlot = std::size_t{1} << 20;
  constexpr std::size_t kMemory = std::size_t{4} << 20;
  plan_decode_regions(leaves, costs, alignment, 12, kSlot, kMemory);
  EXPECT_EQ(leaves[0].decode_scratch, 0u);  // in place
  plan_decode_regions(leaves, costs, alignment, 12, kSlot, kMemory, false);
  EXPECT_EQ(leaves[0].decode_scratch, std::size_t{1} << 18);
}

TEST(GpuReadStaging, PiecesHoldWholeAdjacentLeavesOfOneValue) {
  const auto spec = test::make_spec({4}, "uint8");
  std::vector<Leaf> batch;
  std::size_t at = 0;
  for (int i = 0; i < 4; ++i) {
    Leaf leaf = sized_leaf(Route::kCopy, 256, spec);
    leaf.offset = static_cast<std::uint64_t>(i) * 256;
    leaf.staging = at;
    at += 256;
    batch.push_back(leaf);
  }
  batch[3].key = "other";  // another value: a piece of its own
  batch.push_back(sized_leaf(Route::kCopy, kPieceBytes * 2 + 5, spec));
  batch.back().staging = at;
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
  std::memcpy(&second, host.data() + leaves[1].staging, 4);
  EXPECT_EQ(second, 9);           // the first element of chunk 1
  EXPECT_FALSE(leaves[0].value);  // whole chunks' versions are let go with the batch

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
  for (const auto& leaf : leaves) ASSERT_EQ(leaf.route, Route::kCpuDecode);
  constexpr std::size_t kSlot = std::size_t{32} << 20;
  ASSERT_EQ(pack_batches(leaves, kSlot, kSlot, DecodeCosts{}, 0).size(), 1u);
  std::vector<std::byte> host(kSlot);
  recording->largest_read = 0;
  EXPECT_TRUE(fetch_batch(leaves, host.data(), engine::ThreadPool::shared(2), 2).empty());
  EXPECT_LE(recording->largest_read.load(), std::size_t{2} << 20);
  EXPECT_GT(recording->largest_read.load(), 0u);
  const std::size_t chunk_bytes = values.size();  // half the values, two bytes each
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_EQ(std::memcmp(host.data() + leaves[c].staging,
                          reinterpret_cast<const std::byte*>(values.data()) + c * chunk_bytes,
                          chunk_bytes),
              0)
        << "chunk " << c;
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
    const auto batches = pack_batches(leaves, 1 << 20, 1 << 20, DecodeCosts{}, 0);
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
    std::vector<std::byte> host(1 << 20);
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
    if (last.route != Route::kDeviceDecode) {
      std::int32_t first = 0;
      std::memcpy(&first, host.data() + last.staging, 4);
      EXPECT_EQ(first, (kChunks - 1) * 4 + 1);
    }
    for (const auto& leaf : leaves) EXPECT_FALSE(leaf.value);
  }
}

// Rates scaled to small test chunks (4 KiB): a device chunk takes 4 ms, a CPU thread 1 ms.
DecodeRates scaled_rates(std::size_t threads, std::size_t lanes) {
  DecodeRates rates;
  rates.device_chunk = 1e6;
  rates.cpu_thread = 4e6;
  rates.cpu_fetch = 64e6;
  rates.cpu_threads = threads;
  rates.device_lanes = lanes;
  rates.staging_bytes = std::size_t{64} << 20;
  rates.slots = 12;
  return rates;
}

std::size_t on_cpu(std::span<const Leaf> leaves) {
  return static_cast<std::size_t>(std::count_if(
      leaves.begin(), leaves.end(), [](const Leaf& l) { return l.route == Route::kCpuDecode; }));
}

TEST(GpuDecodeShare, AFewChunksDecodeOnTheCpu) {
  // Eight chunks: the device takes one chunk's time for all of them, eight threads a quarter.
  auto store = make_memory_store();
  auto array = make_array(store, "few", {8 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 8U);
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, scaled_rates(8, 132)), 8U);
  EXPECT_EQ(on_cpu(leaves), 8U);
  // Other kinds of decode are left alone.
  auto again = plan({&target, 1});
  EXPECT_EQ(share_decodes(again, DecodeKind::kLz4, scaled_rates(8, 132)), 0U);
  EXPECT_EQ(on_cpu(again), 0U);
}

TEST(GpuDecodeShare, ReadsAtOnceWeighTheirShareOfEach) {
  // Thirty-two chunks: alone, sixteen threads decode them in two rounds (2 ms), sooner than the
  // device's one chunk time (4 ms). Four reads at once each have four threads (8 ms) and a quarter
  // of the device's lanes, still more than the chunks: the device is sooner.
  auto store = make_memory_store();
  auto array = make_array(store, "at-once", {32 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto alone = plan({&target, 1});
  EXPECT_EQ(share_decodes(alone, DecodeKind::kZstd, scaled_rates(16, 132)), 32U);
  auto four = plan({&target, 1});
  EXPECT_EQ(share_decodes(four, DecodeKind::kZstd, scaled_rates(16 / 4, 132 / 4)), 0U);
}

TEST(GpuDecodeShare, ManyChunksStayOnTheDeviceUnlessTheCpuIsFaster) {
  auto store = make_memory_store();
  auto array = make_array(store, "many", {2048 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 2048U);
  // 64 lanes at 1 MB/s against 8 threads at 4 MB/s: the device.
  auto rates = scaled_rates(8, 64);
  const double bytes = 2048.0 * 4096;
  EXPECT_LT(decode_seconds(bytes, 0, 4096, bytes, rates),
            decode_seconds(0, bytes, 4096, bytes, rates));
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  EXPECT_EQ(on_cpu(leaves), 0U);
  // 64 threads: the CPU, for every chunk.
  rates = scaled_rates(64, 64);
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 2048U);
  EXPECT_EQ(on_cpu(leaves), 2048U);
}

TEST(GpuDecodeShare, NothingMovesWhereTheCpuIsSlower) {
  auto store = make_memory_store();
  auto array = make_array(store, "busy", {2048 * 1024}, {1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  // One thread, busy fetching: the device decodes everything.
  auto rates = scaled_rates(1, 512);
  rates.cpu_fetch = 8e6;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  // Chunks larger than the staging's slots: one CPU decode at a time at most.
  const double big = 16.0 * 4096;
  rates = scaled_rates(16, 132);
  rates.staging_bytes = 2 * 16 * 4096;
  EXPECT_GT(decode_seconds(0, 64 * big, big, 64 * big, rates), 64 * big / rates.cpu_thread / 3);
}

TEST(GpuDecodeShare, HardwareQueuesComeFromCudaDeviceMaxConnections) {
  EXPECT_EQ(hardware_queues(nullptr), 8U);  // CUDA's default
  EXPECT_EQ(hardware_queues("1"), 1U);
  EXPECT_EQ(hardware_queues("4"), 4U);
  EXPECT_EQ(hardware_queues("32"), 32U);
  // What the driver would not take leaves its default.
  for (const char* ignored : {"", "0", "33", "-1", "2x", " 2", "abc", "99999999999999999999"}) {
    EXPECT_EQ(hardware_queues(ignored), 8U) << "'" << ignored << "'";
  }
}

TEST(GpuDecodeShare, ChunksThatFillASlotDecodeOnFewThreads) {
  // Chunks as large as a slot: each CPU batch holds one, and only the batches being filled (half
  // the slots, and one) decode at once, however many threads. Sixteen such chunks, 16 threads,
  // 12 slots: 7 at a time on the CPU.
  auto store = make_memory_store();
  auto array = make_array(store, "large", {16 * 32 * 1024}, {32 * 1024}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  ASSERT_EQ(leaves.size(), 16U);
  auto rates = scaled_rates(16, 132);
  const double chunk = 32.0 * 1024 * 4;
  rates.staging_bytes = static_cast<std::size_t>(12 * chunk);
  const double total = 16 * chunk;
  EXPECT_DOUBLE_EQ(decode_seconds(0, total, chunk, 0, rates), total / (7 * rates.cpu_thread));
  // The device decodes all 16 at once: it wins at half a thread's rate per chunk, not a quarter.
  rates.device_chunk = rates.cpu_thread / 2;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  rates.device_chunk = rates.cpu_thread / 4;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 16U);
}

TEST(GpuDecodeShare, LargeChunksStayOnTheDevice) {
  // Where the rates favour the CPU, chunks larger than `largest_shared` are not moved: a large
  // chunk decodes faster on the device than on a CPU thread.
  auto store = make_memory_store();
  auto array = make_array(store, "few-large", {8 * 4096}, {4096}, kZstdCrc);  // 16 KiB chunks
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  auto leaves = plan({&target, 1});
  auto rates = scaled_rates(8, 132);
  rates.largest_shared = 8 * 1024;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 0U);
  EXPECT_EQ(on_cpu(leaves), 0U);
  rates.largest_shared = 16 * 1024;
  EXPECT_EQ(share_decodes(leaves, DecodeKind::kZstd, rates), 8U);
}

}  // namespace
}  // namespace zarr_device::gpu
