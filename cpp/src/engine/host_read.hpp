// The host read's stages, shared by its files: the executor of a read plan (read/read_plan.hpp)
// into host memory, in the three ways its chunks are fetched: a
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
#include "read/read_plan.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device::engine {

// A stored chunk larger than any encoding of it can be is refused before it is read: a hostile
// value (or shard index) would otherwise make a read allocate whatever it claims.
void refuse_oversized(std::uint64_t stored, const codecs::CodecChain& chain);

// Ranges of one open version of a value.
RangeReader ranges_of(const ValueReader& value);

// Reads one chunk of target t of `plan` (item of its grid) into its place in the output.
// `fetched`: its value, already fetched with others (nullopt inside: there is none); null: ask
// the store.
void read_chunk(const read::ReadPlan& plan, std::size_t t,
                const place::GridIntersection::Item& item, ByteBudget& budget, ThreadPool& pool,
                std::size_t workers, const std::optional<Buffer>* fetched = nullptr);

// The shards of target t when they are read by range from its store (not fetched in batches):
// their layout; null otherwise.
const codecs::ShardLayout* shards_by_range(const read::ReadPlan& plan, std::size_t t);

// Reads `chunks` (numbers of the plan's chunks) of targets whose chunks are shards read by range:
// the indexes of a window of shards, then every inner chunk wanted of them in one parallel loop. A
// shard decoded by one thread, as the sharding codec does, held a read of a few large shards
// (tensorstore writes them of hundreds of MiB) to as many cores, and its lease of the whole
// shard's decoded size let shards as large as the budget decode one at a time.
void read_sharded(const read::ReadPlan& plan, std::span<const std::size_t> chunks,
                  engine::ByteBudget& budget, engine::ThreadPool& pool, std::size_t workers);

// Reads `chunks` (numbers of the plan's chunks) of targets whose stores fetch in batches: windows
// of them fetched by one call each, the next window fetched while this one decodes. A window holds
// values of one store, at most kBatchKeys of them and at most half of max_inflight_bytes decoded
// (the other half is the window being fetched), and past 4 values at most kWindowBytes: small
// enough that decoding starts soon and overlaps the fetching of the rest, with some requests at
// once however large the values (whole shards).
void read_batched(const read::ReadPlan& plan, std::span<const std::size_t> chunks,
                  engine::ByteBudget& budget, std::size_t inflight_bytes, engine::ThreadPool& pool,
                  std::size_t workers);

}  // namespace zarr_device::engine
