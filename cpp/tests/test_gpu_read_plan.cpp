// The host stages of a device read that plan it, without a device: many arrays of mixed layouts
// planned into one list of leaves, each routed by what its codecs declare, then packed into
// staging slots and decode regions.
#include <gtest/gtest.h>

#include <cstring>

#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "gpu_read_test_util.hpp"
#include "test_util.hpp"

namespace zarr_device::device_read {
namespace {

using namespace test_support;  // the helpers these files share

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
    EXPECT_EQ(leaves[0].decoding.route, c.route);
    EXPECT_EQ(leaves[0].decoding.crc32c, c.crc32c);
    if (c.route == Route::kDeviceDecode) {
      EXPECT_EQ(leaves[0].decoding.header, c.header);
      EXPECT_EQ(leaves[0].decoding.trailer, c.trailer);
    }
  }
  // No device decoder present: the CPU decodes.
  auto array = make_array(store, "none", {8}, {8}, kZstdCrc);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  EXPECT_EQ(plan({&target, 1}, GpuDecode::kTrusted, DeviceDecoders{})[0].decoding.route,
            Route::kCpuDecode);
}

// Where the decoder process is installed, the policy says which chunks go to it: under 'checked'
// those no crc32c vouches for, under 'isolated' every compressed chunk; never under 'trusted' or
// 'off', and never a chunk no device decoder takes.
TEST(GpuReadPlan, ChunksNoChecksumVouchesForGoToTheDecoderProcess) {
  auto store = make_memory_store();
  DeviceDecoders both = all_decoders();
  both.isolated = both.present;
  const json zstd = json::array({{{"name", "bytes"}}, {{"name", "zstd"}}});
  const json lz4 = json::array({{{"name", "bytes"}}, {{"name", "numcodecs.lz4"}}});
  const json blosc = json::array({{{"name", "bytes"}}, {{"name", "blosc"}}});
  const json blosclz = json::array(
      {{{"name", "bytes"}}, {{"name", "blosc"}, {"configuration", {{"cname", "blosclz"}}}}});
  const json gzip = json::array({{{"name", "bytes"}}, {{"name", "gzip"}}});
  const json shuffle = {{"name", "numcodecs.shuffle"}, {"configuration", {{"elementsize", 4}}}};
  const json shuffled = json::array({{{"name", "bytes"}}, shuffle, {{"name", "zstd"}}});
  const json shuffled_crc =
      json::array({{{"name", "bytes"}}, shuffle, {{"name", "zstd"}}, {{"name", "crc32c"}}});
  const json gzip_crc =
      json::array({{{"name", "bytes"}}, {{"name", "gzip"}}, {{"name", "crc32c"}}});
  struct Case {
    json codecs;
    GpuDecode policy;
    Route route;
  };
  const Case cases[] = {
      {zstd, GpuDecode::kChecked, Route::kIsolatedDecode},
      {lz4, GpuDecode::kChecked, Route::kIsolatedDecode},
      {kZstdCrc, GpuDecode::kChecked, Route::kDeviceDecode},
      {zstd, GpuDecode::kIsolated, Route::kIsolatedDecode},
      {kZstdCrc, GpuDecode::kIsolated, Route::kIsolatedDecode},
      {zstd, GpuDecode::kTrusted, Route::kDeviceDecode},
      {zstd, GpuDecode::kOff, Route::kCpuDecode},
      {kZstdCrc, GpuDecode::kOff, Route::kCpuDecode},
      // Blosc (zstd by default) has no checksum: its streams decode in the decoder process
      // unless the caller turns GPU decoding off; blosclz only on the CPU.
      {blosc, GpuDecode::kIsolated, Route::kIsolatedDecode},
      {blosc, GpuDecode::kChecked, Route::kIsolatedDecode},
      {blosc, GpuDecode::kTrusted, Route::kIsolatedDecode},
      {blosc, GpuDecode::kOff, Route::kCpuDecode},
      {blosclz, GpuDecode::kIsolated, Route::kCpuDecode},
      {blosclz, GpuDecode::kChecked, Route::kCpuDecode},
      // gzip's CRC-32 and zlib's Adler-32 are not verified by nvCOMP: the decoder process
      // verifies them after its decode.
      {gzip, GpuDecode::kChecked, Route::kIsolatedDecode},
      {gzip, GpuDecode::kIsolated, Route::kIsolatedDecode},
      {gzip, GpuDecode::kOff, Route::kCpuDecode},
      {json::array({{{"name", "bytes"}}, {{"name", "numcodecs.zlib"}}}), GpuDecode::kChecked,
       Route::kIsolatedDecode},
      {json::array({{{"name", "bytes"}}, {{"name", "numcodecs.zlib"}}}), GpuDecode::kIsolated,
       Route::kIsolatedDecode},
      {gzip_crc, GpuDecode::kChecked, Route::kDeviceDecode},
      {gzip_crc, GpuDecode::kIsolated, Route::kIsolatedDecode},
      {gzip, GpuDecode::kTrusted, Route::kDeviceDecode},
      {shuffled, GpuDecode::kChecked, Route::kIsolatedDecode},
      {shuffled_crc, GpuDecode::kChecked, Route::kDeviceDecode},
      {json::array({{{"name", "bytes"}}}), GpuDecode::kIsolated, Route::kCopy},
  };
  int n = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.codecs.dump() + " policy " + std::to_string(static_cast<int>(c.policy)));
    auto array = make_array(store, "a" + std::to_string(n++), {8}, {8}, c.codecs);
    std::vector<std::byte> out;
    const ReadTarget target = whole(array, out);
    EXPECT_EQ(plan({&target, 1}, c.policy, both)[0].decoding.route, c.route);
  }
  // Without the decoder process, unvouched chunks decode on the CPU (as without nvCOMP).
  auto array = make_array(store, "none", {8}, {8}, zstd);
  std::vector<std::byte> out;
  const ReadTarget target = whole(array, out);
  EXPECT_EQ(plan({&target, 1}, GpuDecode::kIsolated, all_decoders())[0].decoding.route,
            Route::kCpuDecode);
  EXPECT_EQ(plan({&target, 1}, GpuDecode::kChecked, all_decoders())[0].decoding.route,
            Route::kCpuDecode);
}

// numcodecs' shuffle before a device codec is undone on the device, by its element size (which
// need not be the array's); alone, after the compressor or twice, it leaves the chunk to the CPU.
TEST(GpuReadPlan, AByteShuffleBeforeTheCompressorIsUndoneOnTheDevice) {
  auto store = make_memory_store();
  auto shuffle = [](int size) {
    return json{{"name", "numcodecs.shuffle"}, {"configuration", {{"elementsize", size}}}};
  };
  const json zstd = {{"name", "zstd"}};
  const json bytes = {{"name", "bytes"}};
  struct Case {
    json codecs;
    Route route;
    std::size_t unshuffle;
  };
  const Case cases[] = {
      {json::array({bytes, shuffle(4), zstd}), Route::kDeviceDecode, 4},
      {json::array({bytes, shuffle(2), zstd, {{"name", "crc32c"}}}), Route::kDeviceDecode, 2},
      {json::array({bytes, shuffle(8), zstd}), Route::kDeviceDecode, 8},
      {json::array({bytes, shuffle(4)}), Route::kCpuDecode, 1},
      {json::array({bytes, zstd, shuffle(1)}), Route::kCpuDecode, 1},
      {json::array({bytes, shuffle(4), shuffle(4), zstd}), Route::kCpuDecode, 1},
  };
  int n = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.codecs.dump());
    auto array = make_array(store, "s" + std::to_string(n++), {8}, {8}, c.codecs);
    std::vector<std::byte> out;
    const ReadTarget target = whole(array, out);
    const auto leaves = plan({&target, 1}, GpuDecode::kTrusted);
    EXPECT_EQ(leaves[0].decoding.route, c.route);
    if (c.route == Route::kDeviceDecode) EXPECT_EQ(leaves[0].decoding.unshuffle, c.unshuffle);
  }
}

// A leaf keeps its selection and destination as they were before array->array codecs only where
// its chain has any (a transpose): otherwise they are the ones after, which no codec changed.
TEST(GpuReadPlan, LeavesKeepTheirPlaceBeforeArrayCodecsWhereThereAreAny) {
  auto store = make_memory_store();
  auto plain = make_array(store, "plain", {4, 6}, {2, 3}, kZstdCrc);
  json turned_codecs = kZstdCrc;
  turned_codecs.insert(
      turned_codecs.begin(),
      json::object({{"name", "transpose"}, {"configuration", {{"order", {1, 0}}}}}));
  auto turned = make_array(store, "turned", {4, 6}, {2, 3}, turned_codecs);
  std::vector<std::byte> a, b;
  const ReadTarget targets[] = {whole(plain, a), whole(turned, b)};
  const auto leaves = plan(targets);
  ASSERT_EQ(leaves.size(), 8u);
  for (const auto& leaf : leaves) {
    SCOPED_TRACE(leaf.planned().where());
    const bool is_turned = leaf.planned().array == turned.get();
    EXPECT_EQ(leaf.planned().has_array_codecs(), is_turned);
    ASSERT_EQ(leaf.planned().decoded_selection().size(), 2u);
    EXPECT_EQ(leaf.planned().decoded_selection()[0].count, 2);
    EXPECT_EQ(leaf.planned().decoded_selection()[1].count, 3);
    EXPECT_EQ(leaf.planned().decoded_destination().shape, (std::vector<std::int64_t>{2, 3}));
    if (!is_turned) {
      EXPECT_TRUE(leaf.planned().selection_before_codecs.empty());
      EXPECT_EQ(&leaf.planned().decoded_selection(), &leaf.planned().selection);
      continue;
    }
    // After the transpose: the chunk's axes swapped.
    EXPECT_EQ(leaf.planned().selection[0].count, 3);
    EXPECT_EQ(leaf.planned().selection[1].count, 2);
    EXPECT_EQ(leaf.planned().destination.shape, (std::vector<std::int64_t>{3, 2}));
    EXPECT_EQ(leaf.planned().destination.byte_strides,
              (std::vector<std::int64_t>{4, 24}));  // the output's, swapped
  }
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
    EXPECT_EQ(leaves[i].planned().array, plain.get());
    EXPECT_EQ(leaves[i].decoding.route, Route::kCopy);
    EXPECT_EQ(leaves[i].stored.length, 3u * 4 * 4);
    EXPECT_EQ(leaves[i].planned().destination.data, a.data() + i * 48);
  }
  EXPECT_EQ(leaves[0].planned().key, "plain/c/0/0");
  EXPECT_EQ(leaves[1].planned().target, 0u);  // which output each lands in (copies never span two)
  EXPECT_EQ(leaves[2].planned().target, 1u);
  EXPECT_EQ(leaves[7].planned().target, 2u);
  // Chunks this small are sized by their fetch, which finds these not stored (see
  // GpuReadStaging.SmallChunksAreSizedWhenOpened): planned as stored, in their bound.
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_FALSE(leaves[i].stored.sized);
    EXPECT_EQ(leaves[i].stored.length, empty->chain().max_stored_size());
  }
  for (std::size_t i = 0; i < 2; ++i) EXPECT_FALSE(leaves[i].stored.sized);  // exact: no compressor
  for (std::size_t i = 4; i < 8; ++i) {
    const auto& leaf = leaves[i];
    EXPECT_EQ(leaf.planned().array, shards.get());
    EXPECT_EQ(leaf.planned().key, "shards/c/0/0");
    EXPECT_EQ(leaf.decoding.route, Route::kDeviceDecode);
    EXPECT_EQ(leaf.decoding.codec, DecodeKind::kZstd);
    ASSERT_TRUE(leaf.stored.value);  // the shard's one open version, shared
    EXPECT_EQ(leaf.stored.value, leaves[4].stored.value);
  }
  // Inner chunks land in their quarter of the output: (0,0), (0,4), (4,0), (4,4).
  EXPECT_EQ(leaves[5].planned().destination.data, c.data() + 4 * 4);
  EXPECT_EQ(leaves[6].planned().destination.data, c.data() + 4 * 8 * 4);
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

TEST(GpuReadBatches, SlotsAndDecodeRegionsCutBatches) {
  const auto spec = test::make_spec({1024}, "uint8");
  std::vector<Leaf> leaves(10, sized_leaf(Route::kCopy, 1000, spec));
  auto batches = pack_batches(leaves, 4096, 4096, DecodeCosts{}, 0);
  // Leaves of 1000 bytes at 1024-byte steps (the slot alignment is 256): 4 per 4 KiB slot.
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].end, 4u);
  EXPECT_EQ(leaves[1].staging.offset, 1024u);
  EXPECT_EQ(batches.back().end, 10u);
  // Device decodes also stop at the decode region's budget.
  std::vector<Leaf> decodes(10, sized_leaf(Route::kDeviceDecode, 100, spec));
  DecodeCosts costs{};
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {1000, 1000};
  batches = pack_batches(decodes, 1 << 20, 1 << 20, costs, 3100);  // 3 chunks' temporary memory
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].end - batches[0].begin, 3u);
  // A leaf larger than a slot cannot be read this way: a typed error that says what to do.
  auto array = Array::create(make_memory_store(), "h", test::array_doc({4}, {4}, "uint8"), false);
  std::vector<Leaf> huge = {sized_leaf(Route::kCopy, 5000, spec, {.array = array.get()})};
  EXPECT_THROW((void)pack_batches(huge, 4096, 4096, DecodeCosts{}, 0), OutOfMemoryError);
}

TEST(GpuReadBatches, SmallReadsAreCutIntoSmallBatches) {
  // A read costs about a batch's fetch before its first copy and a batch's copy after its last
  // fetch: a small read is cut finer than the slots, a large one fills them.
  const auto spec = test::make_spec({1 << 20}, "uint8");
  constexpr std::size_t kSlot = std::size_t{64} << 20;
  std::vector<Leaf> small(32, sized_leaf(Route::kCopy, 1 << 20, spec));
  const std::size_t target = batch_target(staging_need(small), kSlot, 12);
  EXPECT_EQ(target, kMinBatchBytes);
  const auto batches = pack_batches(small, kSlot, target, DecodeCosts{}, 0);
  ASSERT_EQ(batches.size(), 8u);
  EXPECT_EQ(batches[0].end, 4u);
  std::vector<Leaf> large(4096, sized_leaf(Route::kCopy, 1 << 20, spec));
  EXPECT_EQ(batch_target(staging_need(large), kSlot, 12), kCopyBatchBytes);
  EXPECT_EQ(batch_target(staging_need(large), 2 << 20, 12),
            std::size_t{2} << 20);  // never more than a slot
  // Batches with device decodes fill their slot: the decoder's speed follows its chunks in flight.
  std::vector<Leaf> decodes(32, sized_leaf(Route::kDeviceDecode, 1 << 20, spec));
  EXPECT_EQ(pack_batches(decodes, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX).size(), 1u);
  // So do batches of chunks decoded on CPU threads (1 MiB decoded each): a batch's chunks are
  // decoded at once.
  std::vector<Leaf> cpu(32, sized_leaf(Route::kCpuDecode, 1 << 19, spec,
                                       {.selection = test::full_selection(spec.shape)}));
  EXPECT_EQ(pack_batches(cpu, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX).size(), 1u);
  // A chunk larger than the target still goes alone into a slot that holds it.
  const auto big_spec = test::make_spec({std::size_t{20} << 20}, "uint8");
  std::vector<Leaf> big = {sized_leaf(Route::kCopy, std::size_t{20} << 20, big_spec),
                           sized_leaf(Route::kCopy, 1 << 20, spec)};
  const auto two = pack_batches(big, kSlot, kMinBatchBytes, DecodeCosts{}, 0);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].end, 1u);
}

TEST(GpuReadBatches, ReadsThatWaitForTheirDecodesCutThemFiner) {
  // A tensor of 32 chunks of 2 MiB stored in 1.5 MiB each: one 64 MiB slot would hold it all, and
  // a read that waits would fetch, copy and decode it one after another. Cut in four, its first
  // batch decodes while the others are fetched.
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  constexpr std::size_t kSlot = 64 * kMiB;
  const auto spec = test::make_spec({2 * kMiB}, "uint8");
  std::vector<Leaf> tensor(32, sized_leaf(Route::kDeviceDecode, 3 * kMiB / 2, spec,
                                          {.selection = test::full_selection(spec.shape)}));
  const auto need = staging_need(tensor);
  // A read that does not wait (non_blocking) is overlapped by the next one: not cut.
  EXPECT_EQ(decode_batch_target(need, kSlot, false), kSlot);
  EXPECT_EQ(decode_batch_target(need, kSlot, true), 12 * kMiB);
  auto batches = pack_batches(tensor, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX,
                              decode_batch_target(need, kSlot, true));
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].end, 8u);
  EXPECT_EQ(tensor[8].staging.offset, 0u);  // each batch starts its own slot
  EXPECT_EQ(pack_batches(tensor, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX,
                         decode_batch_target(need, kSlot, false))
                .size(),
            1u);
  // Never below kMinDecodeBatchBytes, nor finer than the slots for a read that fills them.
  std::vector<Leaf> small(tensor.begin(), tensor.begin() + 4);
  EXPECT_EQ(decode_batch_target(staging_need(small), kSlot, true), kMinDecodeBatchBytes);
  std::vector<Leaf> large(400, tensor[0]);
  EXPECT_EQ(decode_batch_target(staging_need(large), kSlot, true), kSlot);
  // Chunks decoded on CPU threads still fill their slot, waiting or not.
  std::vector<Leaf> cpu = tensor;
  for (auto& leaf : cpu) leaf.decoding.route = Route::kCpuDecode;
  EXPECT_EQ(pack_batches(cpu, kSlot, kMinBatchBytes, DecodeCosts{}, SIZE_MAX, 12 * kMiB).size(),
            1u);
  // The decode regions follow the batches: four of eight chunks decode at once, not one of 32.
  DecodeCosts costs{};
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {kMiB, kMiB};
  PerKind alignment{};
  alignment.fill(8);
  EXPECT_EQ(plan_decode_regions(tensor, costs, alignment, 12, kSlot, 2048 * kMiB), 1u);
  EXPECT_EQ(plan_decode_regions(tensor, costs, alignment, 12, 12 * kMiB, 2048 * kMiB), 4u);
}

TEST(GpuReadBatches, BatchesDecodedOnTheCpuAreFetchedFurtherAhead) {
  // Half the ring ahead for batches that copy or decode on the device; every slot but one for
  // batches whose chunks decode on CPU threads, whose fetch is their decode.
  const auto spec = test::make_spec({1 << 20}, "uint8");
  const std::vector<Leaf> copies = {sized_leaf(Route::kCopy, 1 << 20, spec)};
  const std::vector<Leaf> device = {sized_leaf(Route::kDeviceDecode, 1 << 19, spec)};
  const std::vector<Leaf> cpu = {sized_leaf(Route::kCopy, 1 << 20, spec),
                                 sized_leaf(Route::kCpuDecode, 1 << 19, spec)};
  const std::vector<Leaf> both = {sized_leaf(Route::kCpuDecode, 1 << 19, spec),
                                  sized_leaf(Route::kDeviceDecode, 1 << 19, spec)};
  EXPECT_EQ(fetch_ahead(copies, 12), 6U);
  EXPECT_EQ(fetch_ahead(device, 12), 6U);
  EXPECT_EQ(fetch_ahead(cpu, 12), 11U);
  EXPECT_EQ(fetch_ahead(both, 12), 6U);  // its device decodes hold the slot
  EXPECT_EQ(fetch_ahead(cpu, 2), 1U);
  EXPECT_EQ(fetch_ahead(cpu, 1), 0U);  // one slot: fetched when it is free
  EXPECT_EQ(fetch_ahead(copies, 3), 1U);
}

TEST(GpuReadBatches, DecodeRegionsFollowTheData) {
  const auto spec = test::make_spec({1 << 18}, "uint8");
  // A destination the decoder's output cannot start at (misaligned): decoded into scratch.
  std::vector<Leaf> leaves(
      8, sized_leaf(
             Route::kDeviceDecode, 1 << 17, spec,
             {.selection = test::full_selection(spec.shape),
              .destination = {reinterpret_cast<std::byte*>(std::uintptr_t{1}), spec.shape, {1}}}));
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
  EXPECT_EQ(leaves[0].staging.scratch_bytes, std::size_t{1} << 18);
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
  // More slots of one chunk each and the memory for them: more regions than CUDA's 8 hardware
  // queues, which streams then share (worth it for large chunks: 1.5x, 4x in flight).
  std::vector<Leaf> many(64, leaves[0]);
  EXPECT_EQ(plan_decode_regions(many, costs, alignment, 12, std::size_t{1} << 17, kMemory * 4),
            12u);
  EXPECT_EQ(plan_decode_regions(many, costs, alignment, 64, std::size_t{1} << 17, kMemory * 4),
            32u);
  // Smaller chunks, several to a slot: no more regions than queues, though memory would hold 12.
  EXPECT_EQ(plan_decode_regions(many, costs, alignment, 12, std::size_t{1} << 19, kMemory * 64),
            8u);
}

TEST(GpuReadBatches, DecodesCanBeKeptOutOfPlace) {
  // Chunks that could be decoded straight into their output go through scratch when asked.
  const auto spec = test::make_spec({1 << 18}, "uint8");
  alignas(256) static std::byte output[1 << 18];
  std::vector<Leaf> leaves(4, sized_leaf(Route::kDeviceDecode, 1 << 17, spec,
                                         {.selection = test::full_selection(spec.shape),
                                          .destination = {output, spec.shape, {1}}}));
  DecodeCosts costs{};
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {1 << 20, 1 << 18};
  PerKind alignment{};
  alignment.fill(8);
  constexpr std::size_t kSlot = std::size_t{1} << 20;
  constexpr std::size_t kMemory = std::size_t{4} << 20;
  plan_decode_regions(leaves, costs, alignment, 12, kSlot, kMemory);
  EXPECT_EQ(leaves[0].staging.scratch_bytes, 0u);  // in place
  plan_decode_regions(leaves, costs, alignment, 12, kSlot, kMemory, false);
  EXPECT_EQ(leaves[0].staging.scratch_bytes, std::size_t{1} << 18);
}

TEST(GpuReadBatches, ChunksASlotHoldsFewOfDecodeOffTheirSlots) {
  // 64 MiB chunks of which a slot holds one (stored in 50 MiB, as bf16 weights): off their slots
  // in an arena as large as the default decode memory; chunks four to a slot stay in regions.
  const auto spec = test::make_spec({std::int64_t{1} << 26}, "uint8");
  const std::size_t stored = std::size_t{50} << 20;
  std::vector<Leaf> large(8, sized_leaf(Route::kDeviceDecode, stored, spec));
  DecodeCosts costs{};
  const std::size_t planned = spec.nbytes() * 305 / 100;  // nvCOMP's 3.05 per decoded byte
  costs[static_cast<std::size_t>(DecodeKind::kZstd)] = {planned, planned};
  constexpr std::size_t kSlot = std::size_t{64} << 20;
  constexpr std::size_t kMemory = (std::size_t{2} << 30) - (std::size_t{16} << 20);
  EXPECT_EQ(device_decodes_per_slot(large, kSlot), 1.0);
  EXPECT_TRUE(decodes_off_slots(large, kSlot, kMemory, costs));
  // A batch's bytes and twice its decode budget fit the arena (wherever the ring stands, its
  // second range cannot overlap its first), and one chunk fits the budget.
  const std::size_t budget = off_slot_decode_budget(kSlot, kMemory);
  EXPECT_LE(kSlot + 2 * budget, kMemory);
  EXPECT_GE(budget, planned);
  // An arena too small for one chunk's planned memory beside its bytes: regions, as before.
  EXPECT_FALSE(decodes_off_slots(large, kSlot, kSlot + planned, costs));
  // Chunks four to a slot (their calls gather many) stay in regions.
  std::vector<Leaf> smaller(8, sized_leaf(Route::kDeviceDecode, stored / 4, spec));
  EXPECT_EQ(device_decodes_per_slot(smaller, kSlot), 5.0);
  EXPECT_FALSE(decodes_off_slots(smaller, kSlot, kMemory, costs));
  // No device decodes: nothing to move.
  std::vector<Leaf> copies(8, sized_leaf(Route::kCopy, stored, spec));
  EXPECT_FALSE(decodes_off_slots(copies, kSlot, kMemory, costs));
  // Streams for as many as the arena holds at a decoded byte of working memory per decoded byte
  // (50 + 64 MiB each: 18 in 2032 MiB), at most kMaxDecodeRegions, at least one.
  EXPECT_EQ(off_slot_streams(large, kMemory), 18u);
  EXPECT_EQ(off_slot_streams(large, kMemory * 4), kMaxDecodeRegions);
  EXPECT_EQ(off_slot_streams(large, kSlot), 1u);
}

}  // namespace
}  // namespace zarr_device::device_read
