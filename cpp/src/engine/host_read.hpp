// The host read's stages, shared by its files: a read of one or many selections prepared as
// targets, one index space over their chunks, and the three ways their chunks are fetched: a
// request each (array_read.cpp), shards read by range, inner chunk by inner chunk
// (sharded_read.cpp), and windows of many values fetched in a call from stores whose requests
// wait on a round trip (batched_read.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "codecs/codec_chain.hpp"
#include "codecs/shard_layout.hpp"
#include "engine/thread_pool.hpp"
#include "place/chunk_grid.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device::engine {

// One target of a host read, prepared: its output as a strided view, its chunks as a grid.
struct PreparedRead {
  const Array* array;
  StridedView out;
  place::GridIntersection grid;
  const Store* store;  // the read's view of the array's store (StoreViews)
};

// A stored chunk larger than any encoding of it can be is refused before it is read: a hostile
// value (or shard index) would otherwise make a read allocate whatever it claims.
void refuse_oversized(std::uint64_t stored, const codecs::CodecChain& chain);

// Ranges of one open version of a value.
RangeReader ranges_of(const ValueReader& value);

// Reads one chunk of a target (item of its grid) into its place in the output. `fetched`: its
// value, already fetched with others (nullopt inside: there is none); null: ask the store.
void read_chunk(const PreparedRead& read, const place::GridIntersection::Item& item,
                ByteBudget& budget, ThreadPool& pool, std::size_t workers,
                const std::optional<Buffer>* fetched = nullptr);

// Chunk i of the targets of a read (one index space over every target's chunks): its target and
// its item.
std::size_t locate(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                   std::size_t i, place::GridIntersection::Item& item);

// The store of a target when it fetches many values in one call; null otherwise.
const BatchedGets* batched_gets(const PreparedRead& read);

// The store of a target when its chunks are shards read by range from it (not fetched in
// batches): its shards' layout; null otherwise.
const codecs::ShardLayout* shards_by_range(const PreparedRead& read);

// Reads `chunks` (indices as for locate()) of targets whose chunks are shards read by range: the
// indexes of a window of shards, then every inner chunk wanted of them in one parallel loop. A
// shard decoded by one thread, as the sharding codec does, held a read of a few large shards
// (tensorstore writes them of hundreds of MiB) to as many cores, and its lease of the whole
// shard's decoded size let shards as large as the budget decode one at a time.
void read_sharded(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                  std::span<const std::size_t> chunks, engine::ByteBudget& budget,
                  engine::ThreadPool& pool, std::size_t workers);

// Reads `chunks` (indices as for locate()) of targets whose stores fetch in batches: windows of
// them fetched by one call each, the next window fetched while this one decodes. A window holds
// values of one store, at most kBatchKeys of them and at most half of max_inflight_bytes decoded
// (the other half is the window being fetched), and past 4 values at most kWindowBytes: small
// enough that decoding starts soon and overlaps the fetching of the rest, with some requests at
// once however large the values (whole shards).
void read_batched(std::span<const PreparedRead> reads, std::span<const std::size_t> first,
                  std::span<const std::size_t> chunks, engine::ByteBudget& budget,
                  std::size_t inflight_bytes, engine::ThreadPool& pool, std::size_t workers);

}  // namespace zarr_device::engine
