// Reads of arrays on the host: the chunks of one or many selections decoded into their places
// by the thread pool, and, for stores whose requests wait on a round trip (BatchedGets), windows
// of chunks and of shards wanted in part fetched in a few calls each.
#include <algorithm>
#include <array>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "engine/elements_read.hpp"
#include "engine/piece_decode.hpp"
#include "engine/read_ahead.hpp"
#include "engine/selection_stream.hpp"
#include "engine/thread_pool.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device {
namespace {

// Below this length, reading a chunk row by row costs more than reading it whole and copying.
constexpr std::size_t kMinRunBytes = 512;

// A stored chunk larger than any encoding of it can be is refused before it is read: a hostile
// value (or shard index) would otherwise make a read allocate whatever it claims.
void refuse_oversized(std::uint64_t stored, const codecs::CodecChain& chain) {
  if (stored > chain.max_stored_size()) {
    throw CodecError("stored as " + std::to_string(stored) +
                     " bytes, more than any encoding of it can take (" +
                     std::to_string(chain.max_stored_size()) + ")");
  }
}

// A chunk stored without codecs holds exactly its elements.
void check_plain_size(std::uint64_t stored, std::size_t chunk_bytes) {
  if (stored != chunk_bytes) {
    throw CodecError("chunk holds " + std::to_string(stored) + " bytes, expected " +
                     std::to_string(chunk_bytes) + " for its shape and data type");
  }
}

// Chunks at least this large, cut by a selection, are read in one pass a window at a time
// (engine/selection_stream.hpp) rather than decoded whole in memory: the host memory of a read of
// rows of a 1-2 GiB chunk (a tensor-parallel rank's share of an embedding stored whole) is the
// window, and an uncompressed chunk's bytes between its runs are not read.
constexpr std::size_t kStreamedCutBytes = std::size_t{64} << 20;

// Reads a selection (`within`) of a large chunk into `region` in one pass; false, having done
// nothing, where it cannot (the caller reads the chunk whole): codecs other than a decompressor
// that decodes in windows and checksums after it, or an output whose runs are too short.
bool read_cut_in_one_pass(const codecs::CodecChain& chain, const Store& store,
                          const std::string& key, std::span<const DimSlice> within,
                          const StridedView& region, engine::ByteBudget& budget) {
  const ChunkSpec& spec = chain.spec();
  const std::size_t es = spec.dtype->size;
  std::vector<std::span<std::byte>> runs;
  if ((!chain.is_plain() && !chain.decodes_in_windows()) ||
      !place::contiguous_runs(region, es, kMinRunBytes, runs)) {
    return false;
  }
  const std::shared_ptr<const ValueReader> value = store.open(key);
  if (!value) {
    place::fill_strided(region, spec.fill_value);
    return true;
  }
  const std::uint64_t stored = value->size();
  refuse_oversized(stored, chain);
  std::unique_ptr<engine::ChunkBytes> bytes;
  std::size_t memory = 2 * engine::kDecodePieceBytes;  // a window of the chunk, a piece stored
  if (chain.is_plain()) {
    check_plain_size(stored, spec.nbytes());
    bytes = engine::stored_bytes(value, 0, stored, false);
  } else {
    std::array<std::byte, 32> head{};
    memory += chain.window_memory(
        {head.data(),
         value->read_into(0, {head.data(), std::min<std::size_t>(head.size(), stored)})});
    bytes = engine::decoded_bytes(chain.window_decoder(
        stored,
        [value](std::uint64_t at, std::span<std::byte> into) { return value->read_into(at, into); },
        engine::kDecodePieceBytes));
  }
  const engine::BudgetLease lease(budget, memory);
  engine::SelectionStream stream(spec.shape, within, es, std::move(bytes),
                                 engine::kDecodePieceBytes);
  for (const auto run : runs) stream.fill(run);
  stream.finish();
  return true;
}

// Ranges of one open version of a value.
RangeReader ranges_of(const ValueReader& value) {
  return [&value](std::int64_t offset, std::int64_t length) -> std::optional<Buffer> {
    if (offset < 0 || length < 0) return std::nullopt;
    return value.read(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(length));
  };
}

// One target of a host read, prepared: its output as a strided view, its chunks as a grid.
struct PreparedRead {
  const Array* array;
  StridedView out;
  place::GridIntersection grid;
  const Store* store;  // the read's view of the array's store (StoreViews)
};

// Reads one chunk of a target (item of its grid) into its place in the output. `fetched`: its
// value, already fetched with others (nullopt inside: there is none); null: ask the store.
void read_chunk(const PreparedRead& read, const place::GridIntersection::Item& item,
                engine::ByteBudget& budget, engine::ThreadPool& pool, std::size_t workers,
                const std::optional<Buffer>* fetched = nullptr) {
  const Array& array = *read.array;
  const StridedView& out = read.out;
  const auto& meta = array.metadata();
  const auto& chain = array.chain();
  const Store& store = *read.store;
  const std::size_t es = meta.dtype->size;
  const std::size_t chunk_bytes = chain.spec().nbytes();
  const std::string key = join_key(array.path(), meta.chunk_key_encoding.key(item.chunk));
  const StridedView region = place::subview(out, item.out_offset, item.count);
  try {
    if (fetched) {
      if (!*fetched) {
        place::fill_strided(region, meta.fill_value);
        return;
      }
      const engine::BudgetLease lease(
          budget, (*fetched)->size() + chain.decode_scratch(item.within, region));
      chain.decode_into(**fetched, item.within, region);
      return;
    }
    // A large chunk stored as its elements: read (and checked) by the threads side by side.
    if (chunk_bytes >= engine::kElementsReadBytes &&
        engine::read_stored_elements(chain, store, key, item.within, region, kMinRunBytes, pool,
                                     workers, budget)) {
      return;
    }
    std::vector<std::span<std::byte>> rows;
    if (chain.is_plain() && place::is_full(item.within, meta.chunk_shape) &&
        place::contiguous_runs(region, es, kMinRunBytes, rows)) {
      // Stored bytes are the elements as the output wants them: read straight into place (into
      // the rows of the region when it is not one block: no intermediate buffer, no copy).
      auto size = store.get_into(key, std::span<const std::span<std::byte>>(rows));
      if (!size) {
        place::fill_strided(region, meta.fill_value);
      } else {
        check_plain_size(*size, chunk_bytes);
      }
      return;
    }
    if (chunk_bytes >= kStreamedCutBytes && !place::is_full(item.within, meta.chunk_shape) &&
        read_cut_in_one_pass(chain, store, key, item.within, region, budget)) {
      return;
    }
    if (chain.supports_partial_decode()) {
      engine::BudgetLease lease(budget, chunk_bytes);
      // One open version of the shard for its index and its chunks: a rewrite of the shard
      // meanwhile is not seen at all, rather than seen in part.
      const auto value = store.open(key);
      if (!value) {
        place::fill_strided(region, meta.fill_value);
        return;
      }
      chain.decode_partial(ranges_of(*value), value->size(), item.within, region);
      return;
    }
    // The stored chunk, whose size is known before it is read, and the buffers its decode makes
    // (none for a chunk decompressed straight into place): large chunks decode side by side
    // within the budget instead of one at a time under a bound of three times the chunk.
    const auto value = store.open(key);
    if (!value) {
      place::fill_strided(region, meta.fill_value);
      return;
    }
    const std::uint64_t stored = value->size();
    refuse_oversized(stored, chain);
    const auto pieces =
        engine::decode_from_pieces(chain, *value, 0, stored, item.within, region, &budget);
    if (pieces == engine::PieceDecode::kValueEnded) {
      throw StoreError("the stored value ended before its " + std::to_string(stored) +
                       " bytes were read (was it changed in place while read?)");
    }
    if (pieces == engine::PieceDecode::kDecoded) return;
    const engine::BudgetLease lease(
        budget, static_cast<std::size_t>(stored) + chain.decode_scratch(item.within, region));
    chain.decode_into(value->read(0, stored), item.within, region);
  } catch (Error& e) {
    e.add_context(array.describe() + ", chunk '" + key + "'");
    throw;
  }
}

// Chunk i of the targets of a read (one index space over every target's chunks): its target and
// its item.
std::size_t locate(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                   std::size_t i, place::GridIntersection::Item& item) {
  const auto t =
      static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin()) - 1;
  reads[t].grid.at(i - first[t], item);
  return t;
}

// The store of a target when it fetches many values in one call; null otherwise.
const BatchedGets* batched_gets(const PreparedRead& read) {
  return dynamic_cast<const BatchedGets*>(read.array->store().get());
}

// Whether a chunk of such a store is fetched whole with others: a chunk always, a shard when the
// read wants all of it (else its index and the inner chunks wanted are read by range, which
// reads nothing unwanted).
bool fetched_whole(const PreparedRead& read, const place::GridIntersection::Item& item) {
  return !read.array->chain().supports_partial_decode() ||
         place::is_full(item.within, read.array->metadata().chunk_shape);
}

// What was fetched of a shard a read wants in part: its size (nullopt: not stored) and the ranges
// read of it (its index, then the inner chunks wanted, neighbours merged), by offset.
struct FetchedShard {
  std::optional<std::uint64_t> size;
  std::vector<std::pair<ByteRange, Buffer>> ranges;

  // Bytes [offset, offset + length) when a fetched range holds them all (a slice of it).
  [[nodiscard]] std::optional<Buffer> find(std::int64_t offset, std::int64_t length) const {
    auto it = std::upper_bound(
        ranges.begin(), ranges.end(), offset,
        [](std::int64_t at, const std::pair<ByteRange, Buffer>& r) { return at < r.first.offset; });
    if (it == ranges.begin() || length < 0) return std::nullopt;
    --it;
    const auto start = static_cast<std::size_t>(offset - it->first.offset);
    const auto n = static_cast<std::size_t>(length);
    if (start > it->second.size() || n > it->second.size() - start) return std::nullopt;
    return it->second.slice(start, n);
  }
};

// `ranges` in order of offset, those at most kMergeGap apart merged while the merged range stays
// within kMergedMost: a store that makes each range a request of its own (fsspec's) would
// otherwise make one per inner chunk, and a few ranges of a large shard still go out at once.
std::vector<ByteRange> merged(std::vector<ByteRange> ranges) {
  constexpr std::int64_t kMergeGap = std::int64_t{1} << 20;
  constexpr std::int64_t kMergedMost = std::int64_t{16} << 20;
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> out;
  for (const auto& r : ranges) {
    if (!out.empty()) {
      auto& last = out.back();
      const std::int64_t end = std::max(last.offset + last.length, r.offset + r.length);
      if (r.offset <= last.offset + last.length + kMergeGap && end - last.offset <= kMergedMost) {
        last.length = end - last.offset;
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

// Reads ranges of a fetched shard from what was fetched, and anything else (nothing, unless a
// codec asks for more than its index named) from the store.
// The bytes are in memory already: a range at a time costs nothing more than many at once.
RangeReader reader_of(const FetchedShard& shard, const Store& store, const std::string& key) {
  return [&shard, &store, &key](std::int64_t offset, std::int64_t length) {
    if (auto fetched = shard.find(offset, length)) return fetched;
    return store.get(key, {offset, length});
  };
}

// A shard a read wants in part, as a window fetches it.
struct ShardInPart {
  const Array* array;
  std::string key;
  std::vector<DimSlice> within;
};

// Fetches `shards` (of one store) in three calls, however many: their sizes, their indexes, then
// the inner chunks wanted of all of them. One shard at a time would wait three round trips each.
std::vector<FetchedShard> fetch_shards_in_part(const BatchedGets& gets,
                                               std::span<const ShardInPart> shards) {
  std::vector<std::string> keys;
  keys.reserve(shards.size());
  for (const auto& shard : shards) keys.push_back(shard.key);
  // A call for them all fails naming them all.
  auto for_all = [&](auto call) {
    try {
      return call();
    } catch (Error& e) {
      e.add_context(shards.front().array->describe() + ", shards '" + keys.front() + "' to '" +
                    keys.back() + "'");
      throw;
    }
  };
  const auto sizes = for_all([&] { return gets.sizes_many(keys); });
  if (sizes.size() != keys.size()) {
    throw StoreError("the store returned " + std::to_string(sizes.size()) + " sizes for " +
                     std::to_string(keys.size()) + " keys");
  }
  std::vector<FetchedShard> fetched(shards.size());
  auto in_context = [&](std::size_t i, auto step) {
    try {
      step();
    } catch (Error& e) {
      e.add_context(shards[i].array->describe() + ", chunk '" + keys[i] + "'");
      throw;
    }
  };
  // `asked[j]` of shard `of[j]`, in one call.
  auto get_ranges = [&](const std::vector<KeyRanges>& asked, const std::vector<std::size_t>& of) {
    if (asked.empty()) return;
    auto got = for_all([&] { return gets.get_ranges(asked); });
    if (got.size() != asked.size()) {
      throw StoreError("the store answered " + std::to_string(got.size()) + " keys for " +
                       std::to_string(asked.size()));
    }
    for (std::size_t j = 0; j < asked.size(); ++j) {
      const std::size_t i = of[j];
      in_context(i, [&] {
        if (!got[j]) throw StoreError("'" + keys[i] + "' vanished while it was read");
        for (std::size_t r = 0; r < asked[j].ranges.size(); ++r) {
          fetched[i].ranges.emplace_back(asked[j].ranges[r], std::move((*got[j])[r]));
        }
        std::sort(fetched[i].ranges.begin(), fetched[i].ranges.end(),
                  [](const auto& a, const auto& b) { return a.first.offset < b.first.offset; });
      });
    }
  };
  std::vector<KeyRanges> asked;
  std::vector<std::size_t> of;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    fetched[i].size = sizes[i];
    if (!sizes[i]) continue;
    in_context(i, [&] {
      asked.push_back({keys[i], {shards[i].array->chain().shard_layout()->index_range(*sizes[i])}});
      of.push_back(i);
    });
  }
  get_ranges(asked, of);
  std::vector<KeyRanges> wanted;
  std::vector<std::size_t> wanted_of;
  for (const std::size_t i : of) {
    in_context(i, [&] {
      const auto* layout = shards[i].array->chain().shard_layout();
      const auto index = layout->read_index(
          reader_of(fetched[i], *shards[i].array->store(), keys[i]), *fetched[i].size);
      auto ranges = merged(layout->wanted_ranges(index, shards[i].within));
      if (ranges.empty()) return;
      wanted.push_back({keys[i], std::move(ranges)});
      wanted_of.push_back(i);
    });
  }
  get_ranges(wanted, wanted_of);
  return fetched;
}

// Decodes a shard a read wants in part (item of its array's grid) from what was fetched of it.
void read_shard_in_part(const Array& array, const place::GridIntersection::Item& item,
                        const StridedView& out, engine::ByteBudget& budget,
                        const FetchedShard& fetched) {
  const auto& meta = array.metadata();
  const std::string key = join_key(array.path(), meta.chunk_key_encoding.key(item.chunk));
  const StridedView region = place::subview(out, item.out_offset, item.count);
  try {
    if (!fetched.size) {
      place::fill_strided(region, meta.fill_value);
      return;
    }
    const engine::BudgetLease lease(budget, array.chain().spec().nbytes());
    array.chain().decode_partial(reader_of(fetched, *array.store(), key), *fetched.size,
                                 item.within, region);
  } catch (Error& e) {
    e.add_context(array.describe() + ", chunk '" + key + "'");
    throw;
  }
}

// The store of a target when its chunks are shards read by range from it (not fetched in
// batches): its shards' layout; null otherwise.
const codecs::ShardLayout* shards_by_range(const PreparedRead& read) {
  return batched_gets(read) ? nullptr : read.array->chain().shard_layout();
}

// Reads `chunks` (indices as for locate()) of targets whose chunks are shards read by range: the
// indexes of a window of shards, then every inner chunk wanted of them in one parallel loop. A
// shard decoded by one thread, as the sharding codec does, held a read of a few large shards
// (tensorstore writes them of hundreds of MiB) to as many cores, and its lease of the whole
// shard's decoded size let shards as large as the budget decode one at a time.
void read_sharded(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                  std::span<const std::size_t> chunks, engine::ByteBudget& budget,
                  engine::ThreadPool& pool, std::size_t workers) {
  constexpr std::size_t kShardWindow = 64;  // shards open at once (a file each) with their indexes
  struct OpenShard {
    std::size_t target = 0;
    const codecs::ShardLayout* layout = nullptr;
    place::GridIntersection::Item item;  // the shard in its array's grid
    std::string key;
    std::shared_ptr<const ValueReader> value;  // null: not stored
    std::vector<std::optional<codecs::ShardLayout::Entry>> index;
  };
  for (std::size_t begin = 0; begin < chunks.size(); begin += kShardWindow) {
    std::vector<OpenShard> shards(std::min(kShardWindow, chunks.size() - begin));
    pool.parallel_for(shards.size(), workers, [&](std::size_t k) {
      auto& shard = shards[k];
      shard.target = locate(reads, first, chunks[begin + k], shard.item);
      shard.layout = shards_by_range(reads[shard.target]);
      const Array& array = *reads[shard.target].array;
      shard.key = join_key(array.path(), array.metadata().chunk_key_encoding.key(shard.item.chunk));
      try {
        shard.value = reads[shard.target].store->open(shard.key);
        if (shard.value) {
          shard.index = shard.layout->read_index(ranges_of(*shard.value), shard.value->size());
        }
      } catch (Error& e) {
        e.add_context(array.describe() + ", chunk '" + shard.key + "'");
        throw;
      }
    });
    // One index space over the inner chunks wanted of the window's shards (a shard not stored:
    // one fill of its region).
    std::vector<place::GridIntersection> grids;
    grids.reserve(shards.size());
    std::vector<std::size_t> inner_first{0};
    for (const auto& shard : shards) {
      grids.emplace_back(shard.item.within, shard.layout->inner().spec().shape);
      inner_first.push_back(inner_first.back() + (shard.value ? grids.back().size() : 1));
    }
    pool.parallel_for(inner_first.back(), workers, [&](std::size_t i) {
      const auto k = static_cast<std::size_t>(
          std::upper_bound(inner_first.begin(), inner_first.end(), i) - inner_first.begin() - 1);
      const auto& shard = shards[k];
      const PreparedRead& read = reads[shard.target];
      const StridedView region = place::subview(read.out, shard.item.out_offset, shard.item.count);
      if (!shard.value) {
        place::fill_strided(region, read.array->metadata().fill_value);
        return;
      }
      place::GridIntersection::Item item;
      grids[k].at(i - inner_first[k], item);
      const std::size_t linear = place::c_order_index(item.chunk, shard.layout->chunks_per_shard());
      const StridedView part = place::subview(region, item.out_offset, item.count);
      try {
        try {
          const auto& entry = shard.index.at(linear);
          if (!entry) {
            place::fill_strided(part, read.array->chain().spec().fill_value);
            return;
          }
          const auto& inner = shard.layout->inner();
          refuse_oversized(entry->nbytes, inner);
          const auto truncated = [&] {
            return CodecError("shard is truncated: inner chunk at byte " +
                              std::to_string(entry->offset) + " of length " +
                              std::to_string(entry->nbytes) + " is past its end");
          };
          const auto pieces = engine::decode_from_pieces(inner, *shard.value, entry->offset,
                                                         entry->nbytes, item.within, part, &budget);
          if (pieces == engine::PieceDecode::kValueEnded) throw truncated();
          if (pieces == engine::PieceDecode::kDecoded) return;
          const engine::BudgetLease lease(budget, static_cast<std::size_t>(entry->nbytes) +
                                                      inner.decode_scratch(item.within, part));
          const Buffer bytes = shard.value->read(entry->offset, entry->nbytes);
          if (bytes.size() != entry->nbytes) throw truncated();
          inner.decode_into(bytes, item.within, part);
        } catch (Error& e) {
          e.add_context("inner chunk " + std::to_string(linear));
          throw;
        }
      } catch (Error& e) {
        e.add_context(read.array->describe() + ", chunk '" + shard.key + "'");
        throw;
      }
    });
  }
}

// Reads `chunks` (indices as for locate()) of targets whose stores fetch in batches: windows of
// them fetched by one call each, the next window fetched while this one decodes. A window holds
// values of one store, at most kBatchKeys of them and at most half of max_inflight_bytes decoded
// (the other half is the window being fetched), and past 4 values at most kWindowBytes: small
// enough that decoding starts soon and overlaps the fetching of the rest, with some requests at
// once however large the values (whole shards).
void read_batched(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                  std::span<const std::size_t> chunks, engine::ByteBudget& budget,
                  std::size_t inflight_bytes, engine::ThreadPool& pool, std::size_t workers) {
  constexpr std::size_t kBatchKeys = 1024;
  constexpr std::size_t kWindowBytes = std::size_t{32} << 20;
  constexpr std::size_t kFewValues = 4;
  struct Window {
    std::size_t begin = 0;
    std::size_t end = 0;
    std::vector<std::optional<Buffer>> values;  // of the chunks fetched whole, by k - begin
    std::vector<FetchedShard> shards;           // of the shards wanted in part, by k - begin
    std::vector<bool> whole;
  };
  place::GridIntersection::Item item;
  auto target_of = [&](std::size_t k) { return locate(reads, first, chunks[k], item); };
  auto window_from = [&](std::size_t begin) {
    Window w{begin, begin, {}, {}, {}};
    if (begin >= chunks.size()) return w;
    const BatchedGets* store = batched_gets(reads[target_of(begin)]);
    std::size_t bytes = 0;
    while (w.end < chunks.size() && w.end - begin < kBatchKeys) {
      const std::size_t t = target_of(w.end);
      const std::size_t chunk_bytes = reads[t].array->chain().spec().nbytes();
      const std::size_t after = bytes + chunk_bytes;
      if (w.end > begin && (batched_gets(reads[t]) != store || after > inflight_bytes / 2 ||
                            (after > kWindowBytes && w.end - begin >= kFewValues))) {
        break;
      }
      bytes += chunk_bytes;
      ++w.end;
    }
    return w;
  };
  auto fetch = [&](Window& w) {
    const std::size_t n = w.end - w.begin;
    std::vector<std::string> keys;
    std::vector<std::size_t> whole;  // positions in the window
    std::vector<std::size_t> in_part;
    std::vector<ShardInPart> shards;
    w.whole.assign(n, true);
    place::GridIntersection::Item at;
    std::size_t t = 0;
    for (std::size_t k = 0; k < n; ++k) {
      t = locate(reads, first, chunks[w.begin + k], at);
      const auto& meta = reads[t].array->metadata();
      std::string key = join_key(reads[t].array->path(), meta.chunk_key_encoding.key(at.chunk));
      if (fetched_whole(reads[t], at)) {
        whole.push_back(k);
        keys.push_back(std::move(key));
      } else {
        w.whole[k] = false;
        in_part.push_back(k);
        shards.push_back({reads[t].array, std::move(key), at.within});
      }
    }
    const BatchedGets& gets = *batched_gets(reads[t]);
    w.values.assign(n, std::nullopt);
    w.shards.assign(n, {});
    if (!keys.empty()) {
      std::vector<std::optional<Buffer>> values;
      try {
        values = gets.get_many(keys);
      } catch (Error& e) {
        e.add_context(reads[t].array->describe() + ", chunks '" + keys.front() + "' to '" +
                      keys.back() + "'");
        throw;
      }
      if (values.size() != keys.size()) {
        throw StoreError(reads[t].array->describe() + ": the store returned " +
                         std::to_string(values.size()) + " values for " +
                         std::to_string(keys.size()) + " keys");
      }
      for (std::size_t j = 0; j < whole.size(); ++j) w.values[whole[j]] = std::move(values[j]);
    }
    if (!shards.empty()) {
      auto fetched = fetch_shards_in_part(gets, shards);
      for (std::size_t j = 0; j < in_part.size(); ++j) w.shards[in_part[j]] = std::move(fetched[j]);
    }
  };
  if (chunks.empty()) return;
  Window current = window_from(0);
  fetch(current);
  while (current.begin < chunks.size()) {
    Window next = window_from(current.end);
    // The next window's requests go out while this one decodes (on a thread of its own: the
    // pool's are decoding, and the requests mostly wait on the network).
    std::future<void> fetching;
    if (next.begin < chunks.size()) fetching = std::async(std::launch::async, [&] { fetch(next); });
    try {
      pool.parallel_for(current.end - current.begin, workers, [&](std::size_t k) {
        place::GridIntersection::Item chunk;
        const std::size_t t = locate(reads, first, chunks[current.begin + k], chunk);
        if (current.whole[k]) {
          read_chunk(reads[t], chunk, budget, pool, workers, &current.values[k]);
        } else {
          read_shard_in_part(*reads[t].array, chunk, reads[t].out, budget, current.shards[k]);
        }
      });
    } catch (...) {
      if (fetching.valid()) fetching.wait();  // it writes into `next`
      throw;
    }
    if (fetching.valid()) fetching.get();
    current = std::move(next);
  }
}

// Announces the chunk files of a read whose chunks are each read whole from a file of its own
// ahead of its threads, once its data turn out to be cold (engine::ReadAhead): chunks the
// selection takes whole (a partly selected one may be read only in part).
engine::ReadAhead read_ahead(std::span<const PreparedRead> reads,
                             std::span<const std::size_t> first) {
  std::uint64_t bytes = 0;
  for (const auto& read : reads) bytes += read.array->chain().spec().nbytes() * read.grid.size();
  const std::uint64_t average = first.back() == 0 ? 1 : bytes / first.back();
  return engine::ReadAhead(first.back(), average, [reads, first](std::size_t i) {
    place::GridIntersection::Item item;
    const std::size_t t = locate(reads, first, i, item);
    const Array& array = *reads[t].array;
    const auto& meta = array.metadata();
    if (!place::is_full(item.within, meta.chunk_shape)) return;
    try {
      reads[t].store->will_need(join_key(array.path(), meta.chunk_key_encoding.key(item.chunk)), 0,
                                0);
    } catch (const Error&) {  // NOLINT(bugprone-empty-catch): only a hint; its read will say
    }
  });
}

}  // namespace

void read_many(std::span<const ReadRequest> requests, const IoOptions& options) {
  StoreViews stores;  // a local store's root opened once for the read, not once per chunk
  std::vector<PreparedRead> reads;
  reads.reserve(requests.size());
  std::vector<std::size_t> first{0};  // one index space over every target's chunks
  for (const auto& r : requests) {
    const auto& meta = r.array->metadata();
    const std::size_t es = meta.dtype->size;
    const auto shape = check_selection_and_buffer(r.selection, meta.shape, es, r.out.size(),
                                                  "output buffer holds");
    reads.push_back({r.array, StridedView{r.out.data(), shape, place::c_strides(shape, es)},
                     place::GridIntersection(r.selection, meta.chunk_shape),
                     &stores.of(r.array->store())});
    first.push_back(first.back() + reads.back().grid.size());
  }
  // One budget and one parallel loop for them all: no target waits for another's slowest chunk.
  engine::ByteBudget budget(options.max_inflight_bytes);
  const std::size_t workers = engine::worker_count(options.threads);
  auto& pool = engine::ThreadPool::shared(workers);
  const bool all_single = std::all_of(reads.begin(), reads.end(), [](const PreparedRead& r) {
    return batched_gets(r) == nullptr && shards_by_range(r) == nullptr;
  });
  if (all_single) {
    auto ahead = read_ahead(reads, first);
    pool.parallel_for(first.back(), workers, [&](std::size_t i) {
      place::GridIntersection::Item item;
      const std::size_t t = locate(reads, first, i, item);
      read_chunk(reads[t], item, budget, pool, workers);
      ahead.read(i);
    });
    return;
  }
  // Stores that fetch many values in one call get their chunks' requests in windows, shards read
  // by range are read inner chunk by inner chunk, and the other targets' chunks are read one
  // request each, as above.
  std::vector<std::size_t> batched;
  std::vector<std::size_t> sharded;
  std::vector<std::size_t> single;
  for (std::size_t t = 0; t < reads.size(); ++t) {
    auto& into = batched_gets(reads[t]) ? batched : shards_by_range(reads[t]) ? sharded : single;
    for (std::size_t i = first[t]; i < first[t + 1]; ++i) into.push_back(i);
  }
  pool.parallel_for(single.size(), workers, [&](std::size_t k) {
    place::GridIntersection::Item item;
    const std::size_t t = locate(reads, first, single[k], item);
    read_chunk(reads[t], item, budget, pool, workers);
  });  // (read ahead only where every chunk is a file of its own: one order for all of them)
  read_sharded(reads, first, sharded, budget, pool, workers);
  read_batched(reads, first, batched, budget, options.max_inflight_bytes, pool, workers);
}

void Array::read(std::span<const DimSlice> selection, std::span<std::byte> out,
                 const IoOptions& options) const {
  const ReadRequest request{this, {selection.begin(), selection.end()}, out};
  read_many({&request, 1}, options);
}

}  // namespace zarr_device
