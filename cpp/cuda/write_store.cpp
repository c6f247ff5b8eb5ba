// A GPU write batch's host stage (cuda_writer.hpp), on CPU threads once its encoded chunks are in
// pinned memory: the bytes->bytes codecs the GPU left (checksums), shard assembly and the store's
// writes, each under its chunk's lock.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_writer.hpp"

namespace zarr_device::cuda {

// Checksums, shard assembly and the store, on CPU threads.
void Writer::store(WriteSlot& slot, std::span<WriteItem> items) {
  ZD_CUDA_CHECK(cudaEventSynchronize(slot.copied));
  slot.busy = false;
  const auto host = WriteArrays::at(slot.host + ctx_->slot_bytes);
  const bool compress = plan_.compressor != nullptr;
  const auto b2b = leaf_chain_->bytes_to_bytes();
  // Suffixes (checksums) are appended as a chunk is copied into its shard: no copy of the chunk
  // per codec.
  const auto cpu_codecs = b2b.subspan(plan_.cpu_codecs_from);
  const bool only_suffixes = std::all_of(cpu_codecs.begin(), cpu_codecs.end(),
                                         [](const auto& c) { return c->suffix_size() > 0; });
  std::size_t suffix_bytes = 0;
  for (const auto& codec : cpu_codecs) suffix_bytes += codec->suffix_size();
  Store& store = *array_.store();
  pool_.parallel_for(items.size(), workers_, [&](std::size_t i) {
    auto& item = items[i];
    try {
      // Views of the pinned memory, which stays untouched until this function returns: the
      // shard assembly or the store's write is the one copy.
      auto produced = [&](const WriteLeaf& leaf) -> std::optional<std::span<const std::byte>> {
        if (leaf.outside || host.flags[leaf.index] == 0) return std::nullopt;
        if (compress)
          return std::span{slot.host + host.offsets[leaf.index], host.output_sizes[leaf.index]};
        return std::span{slot.host + leaf.host, leaf_bytes_};
      };
      std::optional<Buffer> value;
      std::optional<codecs::ShardLayout::Pieces> pieces;  // a shard written as its pieces
      if (shard_ && only_suffixes) {
        std::vector<std::optional<std::size_t>> sizes(item.leaves.size());
        for (std::size_t j = 0; j < item.leaves.size(); ++j) {
          if (auto bytes = produced(item.leaves[j])) sizes[j] = bytes->size() + suffix_bytes;
        }
        value = shard_->assemble(sizes, [&](std::size_t j, std::span<std::byte> place) {
          const auto bytes = *produced(item.leaves[j]);
          std::memcpy(place.data(), bytes.data(), bytes.size());
          std::size_t n = bytes.size();
          for (const auto& codec : cpu_codecs) {
            const auto suffix = codec->suffix(Buffer({}, place.data(), n));
            std::memcpy(place.data() + n, suffix->data(), suffix->size());
            n += suffix->size();
          }
        });
      } else {
        std::vector<std::optional<Buffer>> encoded(item.leaves.size());
        for (std::size_t j = 0; j < item.leaves.size(); ++j) {
          const auto bytes = produced(item.leaves[j]);
          if (!bytes) continue;
          Buffer chunk({}, bytes->data(), bytes->size());
          for (const auto& codec : cpu_codecs) chunk = codec->encode(chunk);
          encoded[j] = std::move(chunk);
        }
        if (shard_) {
          pieces = shard_->pieces(std::move(encoded));
        } else {
          value = std::move(encoded[0]);
        }
      }
      // Under the chunk's lock, like every chunk write, so that a read-modify-write of the same
      // chunk elsewhere cannot put back what it read before this write.
      const auto lock = store.lock_chunk(array_.path(), item.key);
      if (pieces) {
        store.set_pieces(item.key, pieces->parts);
      } else if (value) {
        store.set(item.key, value->span());
      } else {
        store.erase(item.key);
      }
    } catch (Error& e) {
      e.add_context(where(item.key));
      throw;
    }
  });
}

}  // namespace zarr_device::cuda
