// Reads of arrays on the host: the chunks of one or many selections decoded into their places
// by the thread pool, a request each (shards read by range and stores that fetch in batches have
// files of their own: engine/host_read.hpp).
#include <algorithm>
#include <array>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "codecs/shard_layout.hpp"
#include "engine/elements_read.hpp"
#include "engine/host_read.hpp"
#include "engine/piece_decode.hpp"
#include "engine/read_ahead.hpp"
#include "engine/selection_stream.hpp"
#include "engine/thread_pool.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device {
namespace {

using engine::refuse_oversized;

// Below this length, reading a chunk row by row costs more than reading it whole and copying.
constexpr std::size_t kMinRunBytes = 512;

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
// that decodes as a stream and checksums after it, or an output whose runs are too short.
bool read_cut_in_one_pass(const codecs::CodecChain& chain, const Store& store,
                          const std::string& key, std::span<const DimSlice> within,
                          const StridedView& region, engine::ByteBudget& budget) {
  const ChunkSpec& spec = chain.spec();
  const std::size_t es = spec.dtype->size;
  std::vector<std::span<std::byte>> runs;
  if ((!chain.is_plain() && !chain.decodes_as_stream()) ||
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
    bytes = engine::decoded_bytes(
        chain.stream_decoder(stored, engine::stored_pieces(value, 0, stored)));
  }
  const engine::BudgetLease lease(budget, memory);
  engine::SelectionStream stream(spec.shape, within, es, std::move(bytes),
                                 engine::kDecodePieceBytes);
  for (const auto run : runs) stream.fill(run);
  stream.finish();
  return true;
}

}  // namespace

namespace engine {

void refuse_oversized(std::uint64_t stored, const codecs::CodecChain& chain) {
  if (stored > chain.max_stored_size()) {
    throw CodecError("stored as " + std::to_string(stored) +
                     " bytes, more than any encoding of it can take (" +
                     std::to_string(chain.max_stored_size()) + ")");
  }
}

RangeReader ranges_of(const ValueReader& value) {
  return [&value](std::int64_t offset, std::int64_t length) -> std::optional<Buffer> {
    if (offset < 0 || length < 0) return std::nullopt;
    return value.read(static_cast<std::uint64_t>(offset), static_cast<std::uint64_t>(length));
  };
}

void read_chunk(const read::ReadPlan& plan, std::size_t t,
                const place::GridIntersection::Item& item, engine::ByteBudget& budget,
                engine::ThreadPool& pool, std::size_t workers,
                const std::optional<Buffer>* fetched) {
  const Array& array = plan.array(t);
  const StridedView& out = plan.target(t).out;
  const auto& meta = array.metadata();
  const auto& chain = array.chain();
  const Store& store = plan.store(t);
  const std::size_t es = meta.dtype->size;
  const std::size_t chunk_bytes = chain.spec().nbytes();
  const std::string key = array.chunk_key(item.chunk);
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

const codecs::ShardLayout* shards_by_range(const read::ReadPlan& plan, std::size_t t) {
  return plan.batched_gets(t) ? nullptr : plan.shards(t);
}

}  // namespace engine

namespace {

// Announces the chunk files of a read whose chunks are each read whole from a file of its own
// ahead of its threads, once its data turn out to be cold (engine::ReadAhead): chunks the
// selection takes whole (a partly selected one may be read only in part).
engine::ReadAhead read_ahead(const read::ReadPlan& plan) {
  std::uint64_t bytes = 0;
  for (std::size_t t = 0; t < plan.targets(); ++t) {
    bytes += plan.array(t).chain().spec().nbytes() * plan.grid(t).size();
  }
  const std::uint64_t average = plan.chunks() == 0 ? 1 : bytes / plan.chunks();
  return engine::ReadAhead(plan.chunks(), average, [&plan](std::size_t i) {
    place::GridIntersection::Item item;
    const std::size_t t = plan.locate(i, item);
    if (!place::is_full(item.within, plan.array(t).metadata().chunk_shape)) return;
    try {
      plan.store(t).will_need(plan.chunk_key(t, item.chunk), 0, 0);
    } catch (const Error&) {  // NOLINT(bugprone-empty-catch): only a hint; its read will say
    }
  });
}

}  // namespace

void read_many(std::span<const ReadRequest> requests, const IoOptions& options) {
  StoreViews stores;  // a local store's root opened once for the read, not once per chunk
  std::vector<read::ReadTarget> targets;
  targets.reserve(requests.size());
  for (const auto& r : requests) {
    const auto& meta = r.array->metadata();
    const std::size_t es = meta.dtype->size;
    const auto shape = check_selection_and_buffer(r.selection, meta.shape, es, r.out.size(),
                                                  "output buffer holds");
    targets.push_back({r.array, r.selection,
                       StridedView{r.out.data(), shape, place::c_strides(shape, es)},
                       &stores.of(r.array->store())});
  }
  const read::ReadPlan plan(targets);
  // One budget and one parallel loop for them all: no target waits for another's slowest chunk.
  engine::ByteBudget budget(options.max_inflight_bytes);
  const std::size_t workers = engine::worker_count(options.threads);
  auto& pool = engine::ThreadPool::shared(workers);
  bool all_single = true;
  for (std::size_t t = 0; t < plan.targets(); ++t) {
    all_single = all_single && !plan.batched_gets(t) && !engine::shards_by_range(plan, t);
  }
  if (all_single) {
    auto ahead = read_ahead(plan);
    pool.parallel_for(plan.chunks(), workers, [&](std::size_t i) {
      place::GridIntersection::Item item;
      const std::size_t t = plan.locate(i, item);
      engine::read_chunk(plan, t, item, budget, pool, workers);
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
  for (std::size_t t = 0; t < plan.targets(); ++t) {
    auto& into = plan.batched_gets(t)               ? batched
                 : engine::shards_by_range(plan, t) ? sharded
                                                    : single;
    for (std::size_t i = plan.first_chunk(t); i < plan.first_chunk(t + 1); ++i) into.push_back(i);
  }
  pool.parallel_for(single.size(), workers, [&](std::size_t k) {
    place::GridIntersection::Item item;
    const std::size_t t = plan.locate(single[k], item);
    engine::read_chunk(plan, t, item, budget, pool, workers);
  });  // (read ahead only where every chunk is a file of its own: one order for all of them)
  engine::read_sharded(plan, sharded, budget, pool, workers);
  engine::read_batched(plan, batched, budget, options.max_inflight_bytes, pool, workers);
}

void Array::read(std::span<const DimSlice> selection, std::span<std::byte> out,
                 const IoOptions& options) const {
  const ReadRequest request{this, {selection.begin(), selection.end()}, out};
  read_many({&request, 1}, options);
}

}  // namespace zarr_device
