#include "device_read/read_plan.hpp"

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "codecs/shard_layout.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::device_read {
namespace {

// (By value and moved in: a read of 65536 small chunks makes as many leaves, and a copy of each
// vector is an allocation now and a free when the read ends.)
Leaf make_leaf(const Array& array, std::size_t target, const Store& store, std::string key,
               const codecs::CodecChain& chain, std::vector<DimSlice> selection,
               StridedView destination) {
  PlannedChunk planned;
  planned.array = &array;
  planned.target = target;
  planned.store = &store;
  planned.key = std::move(key);
  planned.chain = &chain;
  if (planned.has_array_codecs()) {
    planned.selection_before_codecs = selection;
    planned.destination_before_codecs = destination;
  }
  planned.selection = std::move(selection);
  planned.destination = std::move(destination);
  planned.spec = &chain.map_to_encoded(planned.selection, planned.destination);
  return Leaf(std::move(planned));
}

// What was asked for already of a chunk of a store that answers many requests in one call: its
// stored size (nullopt: there is none) and, of a shard, its index's bytes.
struct Prefetched {
  std::optional<std::uint64_t> size;
  std::optional<Buffer> index;
};

// The leaf of a whole chunk of one target (of an array without shards). `prefetched`: what was
// asked for already with other chunks; null: ask the store, or leave it to the fetch.
Leaf plan_chunk(const read::ReadPlan& plan, std::size_t t,
                const place::GridIntersection::Item& item, const DeviceDecoders& decoders,
                GpuDecode policy, const Prefetched* prefetched, PlanSizes sizes) {
  const Array& array = plan.array(t);
  const auto& chain = array.chain();
  const Store& store = plan.store(t);
  Leaf leaf = make_leaf(array, t, store, plan.chunk_key(t, item.chunk), chain, item.within,
                        place::subview(plan.target(t).out, item.out_offset, item.count));
  if (!prefetched && sizes == PlanSizes::kAtFetch &&
      chain.max_stored_size() <= kSizedAtFetchBytes) {
    leaf.stored.length = chain.max_stored_size();
    leaf.stored.sized = false;
    leaf.decoding = choose_route(leaf.planned(), decoders, policy);
    return leaf;
  }
  // Sized for the plan only: the fetch opens the chunk and checks this size (ValueChanged).
  if (const auto size = prefetched ? prefetched->size : store.size_to_plan(leaf.planned().key)) {
    leaf.stored.length = *size;
    leaf.decoding = choose_route(leaf.planned(), decoders, policy);
  }
  return leaf;
}

// The leaves of one shard of one target, likewise.
void plan_shard(const read::ReadPlan& plan, std::size_t t,
                const place::GridIntersection::Item& item, const DeviceDecoders& decoders,
                GpuDecode policy, std::vector<Leaf>& leaves, const Prefetched* prefetched) {
  const Array& array = plan.array(t);
  const auto& chain = array.chain();
  const Store& store = plan.store(t);
  const std::string key = plan.chunk_key(t, item.chunk);
  const StridedView region = place::subview(plan.target(t).out, item.out_offset, item.count);
  const auto* shard = plan.shards(t);
  // The shard's index and its chunks come from one open version of it (of a store that cannot
  // hold one, the key, read by range).
  const auto value = !prefetched        ? store.open(key)
                     : prefetched->size ? key_reader(store, key, *prefetched->size)
                                        : nullptr;
  if (!value) {
    leaves.push_back(make_leaf(array, t, store, key, chain, item.within, region));
    return;
  }
  const ByteRange index_range =
      prefetched && prefetched->index ? shard->index_range(value->size()) : ByteRange{-1, -1};
  const RangeReader reader = [&](std::int64_t offset,
                                 std::int64_t length) -> std::optional<Buffer> {
    if (offset < 0 || length < 0) return std::nullopt;
    if (offset == index_range.offset && length == index_range.length) return *prefetched->index;
    return value->read(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(length));
  };
  const auto index = shard->read_index(reader, value->size());
  const codecs::InnerChunks chunks(*shard, item.within);
  codecs::InnerChunks::Chunk chunk;
  for (std::size_t j = 0; j < chunks.size(); ++j) {
    chunks.at(j, chunk);
    Leaf leaf = make_leaf(array, t, store, key, shard->inner(), chunk.within,
                          codecs::InnerChunks::region(region, chunk));
    if (const auto& entry = index[chunk.index]) {
      leaf.stored.value = value;
      leaf.stored.offset = entry->offset;
      leaf.stored.length = entry->nbytes;
      leaf.decoding = choose_route(leaf.planned(), decoders, policy);
    }
    leaves.push_back(std::move(leaf));
  }
}

}  // namespace

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> staged_layout(const Leaf& leaf) {
  std::vector<std::int64_t> counts;
  for (const auto& s : leaf.planned().decoded_selection()) counts.push_back(s.count);
  auto strides = place::c_strides(counts, leaf.planned().spec->dtype->size);
  return {std::move(counts), std::move(strides)};
}

std::size_t selection_bytes(const Leaf& leaf) {
  std::size_t n = leaf.planned().spec->dtype->size;
  for (const auto& s : leaf.planned().selection) n *= static_cast<std::size_t>(s.count);
  return n;
}

std::size_t staged_bytes(const Leaf& leaf) {
  switch (leaf.decoding.route) {
    case Route::kFill:
      return leaf.planned().spec->dtype->size;
    case Route::kCopy:
    case Route::kDeviceDecode:
    case Route::kIsolatedDecode:
      return leaf.stored.length;
    case Route::kCpuDecode:
      return selection_bytes(leaf);
  }
  return 0;
}

bool placed_by_copy(const Leaf& leaf) {
  return !leaf.decoding.swap &&
         place::is_full(leaf.planned().selection, leaf.planned().spec->shape) &&
         place::is_c_contiguous(leaf.planned().destination, leaf.planned().spec->dtype->size);
}

bool decodes_in_place(const Leaf& leaf, std::size_t alignment) {
  return leaf.decoding.unshuffle <= 1 && placed_by_copy(leaf) &&
         reinterpret_cast<std::uintptr_t>(leaf.planned().destination.data) % alignment == 0;
}

bool unshuffles_in_place(const Leaf& leaf) {
  return leaf.decoding.unshuffle > 1 && placed_by_copy(leaf);
}

std::size_t decode_scratch_bytes(const Leaf& leaf) {
  const std::size_t decoded = align_up(leaf.planned().spec->nbytes(), kStagingAlignment);
  return leaf.decoding.unshuffle > 1 && !unshuffles_in_place(leaf) ? 2 * decoded : decoded;
}

Decoding choose_route(const PlannedChunk& planned, const DeviceDecoders& decoders,
                      GpuDecode policy) {
  Decoding decoding;
  const auto& chain = *planned.chain;
  const auto layout = chain.array_to_bytes().plain_layout();
  if (!layout) {
    decoding.route = Route::kCpuDecode;
    return decoding;
  }
  decoding.swap = *layout == Endian::kBig && planned.spec->dtype->swap_unit > 1;
  // Checksums at the end are verified on the CPU; what is left must be one codec the device
  // decodes (by its own declaration: no codec is recognised here by name).
  auto b2b = chain.bytes_to_bytes();
  std::size_t n = b2b.size();
  for (; n > 0; --n) {
    const auto d = b2b[n - 1]->device_decoding();
    if (!d || d->kind != DecodeKind::kChecksum) break;
    ++decoding.crc32c;
    decoding.trailer += d->trailer;
  }
  if (n == 0) {
    decoding.route = Route::kCopy;
    return decoding;
  }
  // A byte shuffle before the compressor is undone on the device after it (where the chunk is
  // whole elements of it: otherwise the CPU's codec reports the chunk).
  if (n == 2 && b2b[0]->device_unshuffle() > 0 &&
      planned.spec->nbytes() % b2b[0]->device_unshuffle() == 0) {
    decoding.unshuffle = b2b[0]->device_unshuffle();
    b2b = b2b.subspan(1);
    n = 1;
  }
  const auto d = b2b[0]->device_decoding();
  if (n != 1 || !d || d->kind == DecodeKind::kChecksum) {
    decoding.route = Route::kCpuDecode;
    return decoding;
  }
  decoding.codec = d->kind;
  decoding.accepts = d->accepts;
  decoding.header = d->header;
  decoding.trailer += d->trailer;
  decoding.streams = d->streams;
  decoding.check = d->check;
  decoding.check_value = d->check_value;
  if (d->streams != nullptr) {
    // Chunks of many streams decode on the device only in the decoder process, whatever vouches
    // for them (and not after a numcodecs shuffle of their own): sooner than c-blosc on the
    // host's cores (BENCHMARKS.md, One GPU).
    decoding.route =
        policy != GpuDecode::kOff && decoding.unshuffle == 1 && decoders.has_isolated(d->kind)
            ? Route::kIsolatedDecode
            : Route::kCpuDecode;
    return decoding;
  }
  const bool vouched = decoding.crc32c > 0;
  const bool in_process =
      policy == GpuDecode::kTrusted || (policy == GpuDecode::kChecked && vouched);
  // (A check the device skips leaves the CPU's the only one: such chunks stay there, unless the
  // decoder process verifies it after its decode, as it does gzip's and zlib's.)
  const bool checked_in_process = d->check != DeviceCheck::kNone && d->check_value != nullptr;
  const bool isolated =
      (vouched || !d->skips_check || checked_in_process) &&
      (policy == GpuDecode::kIsolated || (policy == GpuDecode::kChecked && !vouched));
  if (in_process && decoders.has(d->kind)) {
    decoding.route = Route::kDeviceDecode;
  } else if (isolated && decoders.has_isolated(d->kind)) {
    decoding.route = Route::kIsolatedDecode;
  } else {
    decoding.route = Route::kCpuDecode;
  }
  return decoding;
}

bool device_can_take(const Leaf& leaf, std::span<const std::byte> stored) {
  const std::size_t checksums = 4 * static_cast<std::size_t>(leaf.decoding.crc32c);
  if (stored.size() < leaf.decoding.header + leaf.decoding.trailer || !leaf.decoding.accepts) {
    return false;
  }
  return leaf.decoding.accepts(stored.first(stored.size() - checksums),
                               leaf.planned().spec->nbytes());
}

std::vector<Leaf> plan_reads(std::span<const ReadTarget> targets, const DeviceDecoders& decoders,
                             GpuDecode policy, engine::ThreadPool& pool, std::size_t workers,
                             PlanSizes sizes) {
  // One index space over every target's chunks, so one parallel loop lays them all out.
  const read::ReadPlan plan(targets);
  // Chunks of stores that answer many requests in one call: their sizes, and the indexes of
  // shards, asked for together (per store, a call for up to kKeysPerCall of them), not one
  // request per chunk from each worker thread.
  std::vector<Prefetched> prefetched;  // by chunk; empty when no target's store batches
  std::vector<bool> fetched;           // which entries of `prefetched` hold an answer
  constexpr std::size_t kKeysPerCall = 4096;
  for (std::size_t t = 0; t < plan.targets(); ++t) {
    const auto* gets = plan.batched_gets(t);
    if (!gets) continue;
    const auto* shard = plan.shards(t);
    std::vector<std::string> keys;
    keys.reserve(plan.grid(t).size());
    place::GridIntersection::Item item;
    for (std::size_t j = 0; j < plan.grid(t).size(); ++j) {
      plan.grid(t).at(j, item);
      keys.push_back(plan.chunk_key(t, item.chunk));
    }
    if (prefetched.empty()) {
      prefetched.resize(plan.chunks());
      fetched.resize(plan.chunks(), false);
    }
    for (std::size_t begin = 0; begin < keys.size(); begin += kKeysPerCall) {
      const std::span<const std::string> asked(keys.data() + begin,
                                               std::min(kKeysPerCall, keys.size() - begin));
      auto in_context = [&](auto call) {
        try {
          return call();
        } catch (Error& e) {
          e.add_context(plan.array(t).describe() + ", chunks '" + asked.front() + "' to '" +
                        asked.back() + "'");
          throw;
        }
      };
      const auto got = in_context([&] { return gets->sizes_many(asked); });
      if (got.size() != asked.size()) {
        throw StoreError(plan.array(t).describe() + ": the store returned " +
                         std::to_string(got.size()) + " sizes for " + std::to_string(asked.size()) +
                         " keys");
      }
      std::vector<KeyRanges> indexes;  // of the shards stored
      std::vector<std::size_t> of;
      for (std::size_t j = 0; j < got.size(); ++j) {
        const std::size_t i = plan.first_chunk(t) + begin + j;
        prefetched[i].size = got[j];
        fetched[i] = true;
        if (!shard || !got[j]) continue;
        try {
          indexes.push_back({asked[j], {shard->index_range(*got[j])}});
          of.push_back(i);
        } catch (const CodecError&) {  // NOLINT(bugprone-empty-catch)
          // Too small for its index: plan_chunk reads it and says so, naming it.
        }
      }
      if (indexes.empty()) continue;
      auto answers = in_context([&] { return gets->get_ranges(indexes); });
      if (answers.size() != indexes.size()) {
        throw StoreError(plan.array(t).describe() + ": the store answered " +
                         std::to_string(answers.size()) + " keys for " +
                         std::to_string(indexes.size()));
      }
      for (std::size_t j = 0; j < answers.size(); ++j) {
        // A shard gone meanwhile: plan_chunk reads its index again and finds it gone.
        if (answers[j] && answers[j]->size() == 1) {
          prefetched[of[j]].index = std::move(answers[j]->front());
        }
      }
    }
  }
  // Each chunk of an array without shards is one leaf, planned into its place; a shard's leaves
  // are gathered per shard, then joined in order.
  bool sharded = false;
  for (std::size_t t = 0; t < plan.targets(); ++t) sharded = sharded || plan.shards(t) != nullptr;
  std::vector<Leaf> leaves(sharded ? 0 : plan.chunks());
  std::vector<std::vector<Leaf>> per_chunk(sharded ? plan.chunks() : 0);
  pool.parallel_for(plan.chunks(), workers, [&](std::size_t i) {
    // One item per thread, refilled for each chunk: four vectors allocated and freed per chunk
    // otherwise. (Nothing a chunk's plan calls plans another read on this thread.)
    thread_local place::GridIntersection::Item item;
    const std::size_t t = plan.locate(i, item);
    const Prefetched* known = !fetched.empty() && fetched[i] ? &prefetched[i] : nullptr;
    try {
      if (!plan.shards(t)) {
        Leaf leaf = plan_chunk(plan, t, item, decoders, policy, known, sizes);
        if (sharded) {
          per_chunk[i].push_back(std::move(leaf));
        } else {
          leaves[i] = std::move(leaf);
        }
        return;
      }
      plan_shard(plan, t, item, decoders, policy, per_chunk[i], known);
    } catch (Error& e) {
      e.add_context(plan.where(t, plan.chunk_key(t, item.chunk)));
      throw;
    }
  });
  if (!sharded) return leaves;
  std::size_t total = 0;
  for (const auto& chunk : per_chunk) total += chunk.size();
  leaves.reserve(total);
  for (auto& chunk : per_chunk) {
    for (auto& leaf : chunk) leaves.push_back(std::move(leaf));
  }
  return leaves;
}

}  // namespace zarr_device::device_read
