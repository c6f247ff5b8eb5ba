// Host reads of shards read by range: the indexes of a window of shards, then every inner chunk
// wanted of them by the pool (engine/host_read.hpp).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/host_read.hpp"
#include "engine/piece_decode.hpp"
#include "engine/read_ahead.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::engine {

void read_sharded(const read::ReadPlan& plan, std::span<const std::size_t> chunks,
                  engine::ByteBudget& budget, engine::ThreadPool& pool, std::size_t workers) {
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
      shard.target = plan.locate(chunks[begin + k], shard.item);
      shard.layout = shards_by_range(plan, shard.target);
      shard.key = plan.chunk_key(shard.target, shard.item.chunk);
      try {
        shard.value = plan.store(shard.target).open(shard.key);
        if (shard.value) {
          shard.index = shard.layout->read_index(ranges_of(*shard.value), shard.value->size());
        }
      } catch (Error& e) {
        e.add_context(plan.where(shard.target, shard.key));
        throw;
      }
    });
    // One index space over the inner chunks wanted of the window's shards (a shard not stored:
    // one fill of its region).
    std::vector<codecs::InnerChunks> grids;
    grids.reserve(shards.size());
    std::vector<std::size_t> inner_first{0};
    for (const auto& shard : shards) {
      grids.emplace_back(*shard.layout, shard.item.within);
      inner_first.push_back(inner_first.back() + (shard.value ? grids.back().size() : 1));
    }
    // The shard whose inner chunks (or fill) item i of the window is.
    const auto shard_of = [&](std::size_t i) {
      return static_cast<std::size_t>(std::upper_bound(inner_first.begin(), inner_first.end(), i) -
                                      inner_first.begin() - 1);
    };
    // Cold shards: the inner chunks ahead announced (engine::ReadAhead).
    std::uint64_t inner_bytes = 0;
    for (const auto& shard : shards) inner_bytes += shard.layout->inner().spec().nbytes();
    engine::ReadAhead ahead(
        inner_first.back(), inner_bytes / std::max<std::size_t>(shards.size(), 1),
        [&](std::size_t i) {
          const auto k = shard_of(i);
          const auto& shard = shards[k];
          if (!shard.value) return;
          codecs::InnerChunks::Chunk chunk;
          grids[k].at(i - inner_first[k], chunk);
          if (chunk.index >= shard.index.size() || !shard.index[chunk.index]) return;
          const auto& entry = *shard.index[chunk.index];
          try {
            plan.store(shard.target).will_need(shard.key, entry.offset, entry.nbytes);
          } catch (const Error&) {  // NOLINT(bugprone-empty-catch): a hint
          }
        });
    const auto read_inner = [&](std::size_t i) {
      const auto k = shard_of(i);
      const auto& shard = shards[k];
      const Array& array = plan.array(shard.target);
      const StridedView region =
          place::subview(plan.target(shard.target).out, shard.item.out_offset, shard.item.count);
      if (!shard.value) {
        place::fill_strided(region, array.metadata().fill_value);
        return;
      }
      codecs::InnerChunks::Chunk item;
      grids[k].at(i - inner_first[k], item);
      const std::size_t linear = item.index;
      const StridedView part = codecs::InnerChunks::region(region, item);
      try {
        try {
          const auto& entry = shard.index.at(linear);
          if (!entry) {
            place::fill_strided(part, array.chain().spec().fill_value);
            return;
          }
          const auto& inner = shard.layout->inner();
          refuse_oversized(entry->nbytes, inner);
          const auto pieces = engine::decode_from_pieces(inner, *shard.value, entry->offset,
                                                         entry->nbytes, item.within, part, &budget);
          if (pieces == engine::PieceDecode::kValueEnded)
            throw codecs::ShardLayout::truncated(*entry);
          if (pieces == engine::PieceDecode::kDecoded) return;
          const engine::BudgetLease lease(budget, static_cast<std::size_t>(entry->nbytes) +
                                                      inner.decode_scratch(item.within, part));
          const Buffer bytes = shard.value->read(entry->offset, entry->nbytes);
          if (bytes.size() != entry->nbytes) throw codecs::ShardLayout::truncated(*entry);
          inner.decode_into(bytes, item.within, part);
        } catch (Error& e) {
          e.add_context("inner chunk " + std::to_string(linear));
          throw;
        }
      } catch (Error& e) {
        e.add_context(plan.where(shard.target, shard.key));
        throw;
      }
    };
    pool.parallel_for(inner_first.back(), workers, [&](std::size_t i) {
      read_inner(i);
      ahead.read(i);
    });
  }
}

}  // namespace zarr_device::engine
