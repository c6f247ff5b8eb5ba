// An array's write: each chunk the selection touches is encoded (read, modified and written back
// where the selection covers part of it) on the shared pool, within the options' memory budget.
#include <algorithm>
#include <string>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "codecs/shard_layout.hpp"
#include "engine/thread_pool.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/array.hpp"

namespace zarr_device {

void Array::write(std::span<const DimSlice> selection, std::span<const std::byte> values,
                  const IoOptions& options) const {
  const std::size_t es = metadata_.dtype->size;
  const auto value_shape =
      check_selection_and_buffer(selection, metadata_.shape, es, values.size(), "values hold");
  const auto value_strides = place::c_strides(value_shape, es);
  const place::GridIntersection grid(selection, metadata_.chunk_shape);
  const auto& chunk_shape = metadata_.chunk_shape;
  const auto chunk_strides = place::c_strides(chunk_shape, es);
  const std::size_t chunk_bytes = chain_->spec().nbytes();
  engine::ByteBudget budget(options.max_inflight_bytes);
  const std::size_t workers = engine::worker_count(options.threads);
  auto& pool = engine::ThreadPool::shared(workers);
  // A shard's inner chunks are encoded side by side on the pool (encode_shard), each into a
  // scratch chunk of its own: as many shards at once as the budget holds take a thread each, and
  // the other threads encode their chunks, rather than waiting for budget while one thread
  // encodes a whole shard (a 64 MiB shard of 1 MiB zstd chunks: 64 compressions in a row). A
  // shard that the values cover, inside the array, encodes straight from them.
  const auto* shards = chain_->shard_layout();
  // What encoding holds: a shard's encoded chunks (at most the stored bound; the store writes
  // them as they are, with no copy of the whole shard) and a scratch chunk per thread; a chunk's
  // encode, the buffers between its codecs (encode_memory). Plus the chunk itself where it is
  // made here.
  const std::size_t encode_bytes =
      shards ? chain_->max_stored_size() + workers * shards->inner().spec().nbytes()
             : chain_->encode_memory();
  // A shard from the values whose inner chunks are each one run of them, of a chain that reads
  // its chunk where it is, encodes them there (no scratch): it holds their encodings alone
  // (nothing beside a checksum for uncompressed chunks, whose pieces view the values) and its
  // index (16 bytes an inner chunk). So uncompressed shards go a shard per thread at once.
  const bool inner_in_place =
      shards && shards->inner().encodes_from_input() && shards->runs_of(value_strides);
  const std::size_t in_place_bytes = [&]() -> std::size_t {
    if (!inner_in_place) return 0;
    const std::size_t inner_chunks = chunk_bytes / shards->inner().spec().nbytes();
    return inner_chunks * (shards->inner().encode_memory() + 16) + 64;
  }();
  const std::size_t chunks_at_once =
      shards ? std::clamp<std::size_t>(
                   options.max_inflight_bytes / (inner_in_place ? in_place_bytes : encode_bytes), 1,
                   workers)
             : workers;
  const codecs::ShardLayout::ForEach on_pool = [&](std::size_t n,
                                                   const std::function<void(std::size_t)>& body) {
    pool.parallel_for(n, workers, body);
  };

  pool.parallel_for(grid.size(), chunks_at_once, [&](std::size_t i) {
    place::GridIntersection::Item item;
    grid.at(i, item);
    const std::string key = chunk_key(item.chunk);
    try {
      // Does the selection cover every element of the chunk inside the array, and is the whole
      // chunk inside it?
      bool covers = true;
      bool inside_array = true;
      // And are its elements one run of the values (it spans their trailing dimensions)?
      bool one_run = true;
      bool outer = true;  // still among the leading dimensions of one element
      std::int64_t src_offset = 0;
      for (std::size_t d = 0; d < chunk_shape.size(); ++d) {
        const std::int64_t inside =
            std::min(chunk_shape[d], metadata_.shape[d] - item.chunk[d] * chunk_shape[d]);
        const auto& w = item.within[d];
        if (!(w.start == 0 && w.count == inside && (w.step == 1 || inside == 1))) covers = false;
        if (inside != chunk_shape[d]) inside_array = false;
        if (!outer && chunk_shape[d] != value_shape[d]) one_run = false;
        if (chunk_shape[d] > 1) outer = false;
        src_offset += item.out_offset[d] * value_strides[d];
      }
      const bool from_values = covers && inside_array && (shards || one_run);
      engine::BudgetLease lease(budget, from_values && inner_in_place
                                            ? in_place_bytes
                                            : encode_bytes + (from_values ? 0 : chunk_bytes));
      // Every chunk write holds the chunk's lock, so a read-modify-write here or elsewhere never
      // puts back what it read before another write of the chunk.
      const auto lock = store_->lock_chunk(path_, key);
      // A chunk all fill value is erased, as zarr-python does by default; any other goes to the
      // store as its pieces (a checksum apart from what it follows, an uncompressed chunk as the
      // elements where they are): no copy to join them.
      const auto store_chunk = [&](std::span<const std::byte> elements) {
        const auto encoded =
            place::is_all_fill(elements, metadata_.fill_value)
                ? std::nullopt
                : chain_->encode_pieces(Buffer({}, elements.data(), elements.size()));
        if (encoded) {
          store_->set_pieces(key, Buffer::spans_of(*encoded));
        } else {
          store_->erase(key);
        }
      };
      const auto store_shard = [&](const std::optional<codecs::ShardLayout::Pieces>& shard) {
        if (shard) {
          store_->set_pieces(key, shard->parts);
        } else {
          store_->erase(key);
        }
      };
      if (from_values && shards) {
        // Inner chunks all fill value are left out, and a shard of only those is erased.
        store_shard(shards->encode_shard(values.data() + src_offset, value_strides, on_pool));
        return;
      }
      if (from_values) {
        // The chunk is one run of the values: encoded from them, with no copy of the chunk.
        store_chunk(values.subspan(static_cast<std::size_t>(src_offset), chunk_bytes));
        return;
      }
      ByteArray chunk(chunk_bytes);
      const StridedView chunk_view{chunk.data(), chunk_shape, chunk_strides};
      std::optional<Buffer> existing;
      if (!covers) existing = store_->get(key);
      if (existing) {
        std::vector<DimSlice> all;
        all.reserve(chunk_shape.size());
        for (auto e : chunk_shape) all.push_back({0, 1, e});
        chain_->decode_into(*existing, all, chunk_view);
        existing.reset();  // freed before encoding: the lease counts one or the other, not both
      } else {
        place::fill_strided(chunk_view, metadata_.fill_value);
      }
      // Overlay the new values.
      StridedView target{chunk.data(), item.count, {}};
      for (std::size_t d = 0; d < chunk_shape.size(); ++d) {
        target.data += item.within[d].start * chunk_strides[d];
        target.byte_strides.push_back(item.within[d].step * chunk_strides[d]);
      }
      place::copy_strided(values.data() + src_offset, value_strides, target, es);
      if (shards) {
        store_shard(shards->encode_shard(chunk.data(), chunk_strides, on_pool));
        return;
      }
      store_chunk(chunk.span());
    } catch (Error& e) {
      e.add_context(describe() + ", chunk '" + key + "'");
      throw;
    }
  });
}

}  // namespace zarr_device
