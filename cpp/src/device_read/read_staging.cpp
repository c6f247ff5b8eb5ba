#include "device_read/read_staging.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codecs/crc32c.hpp"
#include "device_read/leaf_parts.hpp"
#include "device_read/read_plan.hpp"
#include "engine/piece_decode.hpp"

namespace zarr_device::device_read {
namespace {

// (A chunk's part is fetched by fetch_part, whatever its route.)
bool staged_from_store(const Leaf& l) {
  return !l.part.chunk && (l.decoding.route == Route::kCopy || decodes_on_device(l.decoding.route));
}

// Verifies a staged leaf's checksums and sizes. Returns false when a device decoder cannot take
// it as stored (it is then decoded on the CPU).
bool check_staged(const Leaf& leaf, const std::byte* host) {
  std::span<const std::byte> stored{host + leaf.staging.offset, leaf.stored.length};
  for (int c = 0; c < leaf.decoding.crc32c; ++c) {
    const std::size_t n = stored.size();
    if (n < 4) throw CodecError("crc32c: chunk of " + std::to_string(n) + " bytes is too short");
    std::uint32_t want = 0;
    std::memcpy(&want, stored.data() + n - 4, 4);
    check_crc32c(want, codecs::crc32c(stored.first(n - 4)));
    stored = stored.first(n - 4);
  }
  if (leaf.decoding.route == Route::kCopy && stored.size() != leaf.planned().spec->nbytes()) {
    throw CodecError("chunk holds " + std::to_string(stored.size()) + " bytes, expected " +
                     std::to_string(leaf.planned().spec->nbytes()) +
                     " for its shape and data type");
  }
  return !decodes_on_device(leaf.decoding.route) ||
         device_can_take(leaf, {host + leaf.staging.offset, leaf.stored.length});
}

}  // namespace

ByteArray decode_on_cpu(const Leaf& leaf, const Buffer& stored) {
  ByteArray decoded(selection_bytes(leaf));
  auto [counts, strides] = staged_layout(leaf);
  leaf.planned().chain->decode_into(stored, leaf.planned().decoded_selection(),
                                    StridedView{decoded.data(), counts, strides});
  return decoded;
}

namespace {

// What a chunk planned without its size (StoredBytes::sized) turns out to be once opened.
enum class Opened {
  kStored,    // sized now; its stored bytes fit the room staged for them
  kFill,      // not stored: now a fill, its element staged at `dst`
  kTooLarge,  // stored in more bytes than its codecs' bound: decoded on the CPU instead
};
static_assert(kSizedAtFetchBytes <= kPieceBytes, "chunks sized at their fetch are read whole");

Opened size_on_open(Leaf& leaf, std::byte* dst) {
  if (!leaf.stored.value) {
    leaf.decoding.route = Route::kFill;
    leaf.stored.length = 0;
    std::memcpy(dst, leaf.planned().chain->spec().fill_value.data(),
                leaf.planned().spec->dtype->size);
    return Opened::kFill;
  }
  const std::uint64_t size = leaf.stored.value->size();
  if (leaf.decoding.route == Route::kCopy && size != leaf.stored.length) {
    throw CodecError("chunk holds " + std::to_string(size) + " bytes, expected " +
                     std::to_string(leaf.stored.length) +
                     " for its shape, data type and checksums");
  }
  const bool fits = !decodes_on_device(leaf.decoding.route) || size <= leaf.staging.bytes;
  leaf.stored.length = size;
  leaf.stored.sized = true;
  return fits ? Opened::kStored : Opened::kTooLarge;
}

}  // namespace

std::vector<ReadPiece> plan_pieces(std::span<const Leaf> batch) {
  std::vector<ReadPiece> pieces;
  for (std::size_t i = 0; i < batch.size();) {
    const auto& leaf = batch[i];
    if (!staged_from_store(leaf)) {
      pieces.push_back({i, i + 1, 0, 0, false});
      ++i;
    } else if (leaf.stored.length > kPieceBytes) {
      for (std::uint64_t o = 0; o < leaf.stored.length; o += kPieceBytes) {
        pieces.push_back(
            {i, i + 1, o,
             static_cast<std::size_t>(std::min<std::uint64_t>(kPieceBytes, leaf.stored.length - o)),
             false});
      }
      ++i;
    } else {
      std::size_t j = i + 1;
      std::uint64_t length = leaf.stored.length;
      while (j < batch.size() && staged_from_store(batch[j]) &&
             batch[j].planned().key == leaf.planned().key &&
             batch[j].planned().array == leaf.planned().array &&
             batch[j].stored.offset == leaf.stored.offset + length &&
             batch[j].staging.offset == leaf.staging.offset + length &&
             length + batch[j].stored.length <= kPieceBytes) {
        length += batch[j].stored.length;
        ++j;
      }
      pieces.push_back({i, j, 0, static_cast<std::size_t>(length), true});
      i = j;
    }
  }
  return pieces;
}

std::vector<CpuDecoded> fetch_batch(std::span<Leaf> batch, std::byte* host,
                                    engine::ThreadPool& pool, std::size_t workers) {
  // 0. One open version of each whole chunk (shards were opened when planned), so every piece of a
  // chunk comes from the same version of it. A chunk read by one piece alone (whole, or decoded on
  // the CPU) is opened by that piece and closed once read: held for the whole batch, a batch of
  // small chunks held a file open for each (a 64 MiB slot of 16 KiB chunks is 4096 files, and
  // several batches are fetched at once), past the process's limit on open files. Longer chunks,
  // read in several pieces, are opened here and kept while the batch is read.
  std::vector<std::size_t> opened;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    // (Parts of a chunk share one version of it, opened by the first: fetch_part.)
    if (batch[i].decoding.route != Route::kFill && !batch[i].stored.value && !batch[i].part.chunk) {
      opened.push_back(i);
    }
  }
  std::vector<char> opened_by_its_piece(batch.size(), 0);
  struct Close {
    std::span<Leaf> batch;
    const std::vector<std::size_t>& opened;
    ~Close() {
      for (const std::size_t i : opened) batch[i].stored.value.reset();
    }
  } close{batch, opened};
  auto check_opened = [](const Leaf& leaf) {
    if (!leaf.stored.value ||
        leaf.stored.value->size() != leaf.stored.offset + leaf.stored.length) {
      throw ValueChanged(leaf.planned().where() + ": the chunk was replaced while it was read");
    }
  };
  // Stores that fetch many values in one call get the batch's chunks of each in one call.
  std::vector<std::size_t> one_by_one;
  std::vector<std::pair<const BatchedGets*, std::vector<std::size_t>>> by_store;
  for (const std::size_t i : opened) {
    const auto* gets = dynamic_cast<const BatchedGets*>(batch[i].planned().array->store().get());
    if (!gets) {
      one_by_one.push_back(i);
      continue;
    }
    auto it = std::find_if(by_store.begin(), by_store.end(),
                           [&](const auto& entry) { return entry.first == gets; });
    if (it == by_store.end()) it = by_store.insert(by_store.end(), {gets, {}});
    it->second.push_back(i);
  }
  for (const auto& [gets, indices] : by_store) {
    std::vector<std::string> keys;
    keys.reserve(indices.size());
    for (const std::size_t i : indices) keys.push_back(batch[i].planned().key);
    std::vector<std::optional<Buffer>> values;
    try {
      values = gets->get_many(keys);
    } catch (Error& e) {
      e.add_context(batch[indices.front()].planned().where());
      throw;
    }
    for (std::size_t k = 0; k < indices.size(); ++k) {
      auto& leaf = batch[indices[k]];
      if (k < values.size() && values[k]) leaf.stored.value = reader_of(std::move(*values[k]));
      check_opened(leaf);
    }
  }
  std::vector<std::size_t> open_now;
  for (const std::size_t i : one_by_one) {
    if (batch[i].decoding.route == Route::kCpuDecode || batch[i].stored.length <= kPieceBytes) {
      opened_by_its_piece[i] = 1;
    } else {
      open_now.push_back(i);
    }
  }
  pool.parallel_for(open_now.size(), workers, [&](std::size_t i) {
    auto& leaf = batch[open_now[i]];
    leaf.stored.value = leaf.planned().source().open(leaf.planned().key);
    check_opened(leaf);
  });
  // Inner chunks of shards (opened when planned) of such stores: each shard's in the batch in one
  // call of ranges, not one request each. Each leaf then reads from its own bytes.
  std::vector<std::pair<const ValueReader*, std::vector<std::size_t>>> by_shard;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& leaf = batch[i];
    const bool whole_value = leaf.stored.value && leaf.stored.offset == 0 &&
                             leaf.stored.value->size() == leaf.stored.length;
    if (leaf.decoding.route == Route::kFill || !leaf.stored.value || whole_value ||
        leaf.part.chunk || !dynamic_cast<const BatchedGets*>(leaf.planned().array->store().get())) {
      continue;
    }
    auto it = std::find_if(by_shard.begin(), by_shard.end(), [&](const auto& entry) {
      return entry.first == leaf.stored.value.get();
    });
    if (it == by_shard.end()) it = by_shard.insert(by_shard.end(), {leaf.stored.value.get(), {}});
    it->second.push_back(i);
  }
  pool.parallel_for(by_shard.size(), workers, [&](std::size_t s) {
    const auto& indices = by_shard[s].second;
    if (indices.size() < 2) return;
    std::vector<ByteRange> ranges;
    ranges.reserve(indices.size());
    for (const std::size_t i : indices) {
      ranges.push_back({static_cast<std::int64_t>(batch[i].stored.offset),
                        static_cast<std::int64_t>(batch[i].stored.length)});
    }
    std::vector<Buffer> values;
    try {
      values = by_shard[s].first->read_many(ranges);
    } catch (Error& e) {
      e.add_context(batch[indices.front()].planned().where());
      throw;
    }
    for (std::size_t k = 0; k < indices.size(); ++k) {
      auto& leaf = batch[indices[k]];
      leaf.stored.value = reader_of(std::move(values[k]));  // a shorter one fails its read below
      leaf.stored.offset = 0;
    }
  });

  // 1. The pieces, read in parallel; each checks the leaves it holds whole.
  std::mutex decoded_mutex;
  std::vector<CpuDecoded> decoded;
  auto decode_here = [&](std::size_t index, const Leaf& leaf) {
    auto bytes =
        decode_on_cpu(leaf, Buffer::copy_of({host + leaf.staging.offset, leaf.stored.length}));
    std::lock_guard guard(decoded_mutex);
    decoded.push_back({index, std::move(bytes)});
  };
  std::vector<std::size_t> busy_parts;  // parts whose chunks other threads were decoding
  const auto pieces = plan_pieces(batch);
  // A batch of parts of chunks decoded on the CPU holds a part of each of several chunks, and the
  // batches after it, fetched at once, the next parts of the same chunks, each decoded after the
  // one before it (fetch_part). Each batch starts at another chunk, so that the threads of the
  // batches fetched at once decode different chunks rather than wait for each other's.
  const std::size_t turn =
      !batch.empty() && batch.front().part.chunk ? batch.front().part.index : 0;
  pool.parallel_for(pieces.size(), workers, [&](std::size_t claimed) {
    const auto& piece = pieces[(claimed + turn) % pieces.size()];
    std::size_t at = piece.first;
    try {
      auto& leaf = batch[at];
      struct CloseWhenRead {
        Leaf* leaf;
        ~CloseWhenRead() {
          if (leaf) leaf->stored.value.reset();
        }
      } close_when_read{nullptr};
      std::byte* dst = host + leaf.staging.offset;
      if (leaf.part.chunk) {
        if (!fetch_part(leaf, dst, false)) {
          std::lock_guard guard(decoded_mutex);
          busy_parts.push_back(at);
        }
        return;
      }
      std::size_t length = piece.length;
      if (opened_by_its_piece[at]) {
        leaf.stored.value = leaf.planned().source().open(leaf.planned().key);
        close_when_read.leaf = &leaf;
        if (leaf.stored.sized) {
          check_opened(leaf);
        } else {
          switch (size_on_open(leaf, dst)) {
            case Opened::kStored:
              length = static_cast<std::size_t>(leaf.stored.length);  // a piece of one whole chunk
              break;
            case Opened::kFill:
              return;
            case Opened::kTooLarge: {
              auto bytes = decode_on_cpu(leaf, leaf.stored.value->read(0, leaf.stored.length));
              std::lock_guard guard(decoded_mutex);
              decoded.push_back({at, std::move(bytes)});
              return;
            }
          }
        }
      }
      switch (leaf.decoding.route) {
        case Route::kFill:
          std::memcpy(dst, leaf.planned().chain->spec().fill_value.data(),
                      leaf.planned().spec->dtype->size);
          return;
        case Route::kCpuDecode: {
          auto [counts, strides] = staged_layout(leaf);
          const StridedView staged{dst, counts, strides};
          // A large chunk read from its store as it is decoded goes in pieces, as on the host:
          // no buffer of its stored size mapped and faulted in for each chunk on each thread.
          // Values of stores that fetch many at once are in memory already and decode there.
          const auto pieces =
              dynamic_cast<const BatchedGets*>(leaf.planned().array->store().get())
                  ? engine::PieceDecode::kNotInPieces
                  : engine::decode_from_pieces(*leaf.planned().chain, *leaf.stored.value,
                                               leaf.stored.offset, leaf.stored.length,
                                               leaf.planned().decoded_selection(), staged);
          const auto shorter = [] {
            return CodecError("chunk is shorter than its shard index says");
          };
          if (pieces == engine::PieceDecode::kValueEnded) throw shorter();
          if (pieces == engine::PieceDecode::kDecoded) return;
          const auto stored = leaf.stored.value->read(leaf.stored.offset, leaf.stored.length);
          if (stored.size() != leaf.stored.length) throw shorter();
          leaf.planned().chain->decode_into(stored, leaf.planned().decoded_selection(), staged);
          return;
        }
        default: {
          const auto got = leaf.stored.value->read_into(leaf.stored.offset + piece.offset,
                                                        {dst + piece.offset, length});
          if (got != length) throw CodecError("chunk is shorter than its shard index says");
          if (!piece.whole_leaves) return;
          for (; at < piece.end; ++at) {
            if (!check_staged(batch[at], host)) decode_here(at, batch[at]);
          }
        }
      }
    } catch (Error& e) {
      e.add_context(batch[at].planned().where());
      throw;
    }
  });

  // Parts whose chunks were being decoded by other threads when first tried (their threads went
  // on to other chunks instead of waiting): decoded here, or found decoded by then.
  for (const std::size_t at : busy_parts) {
    try {
      (void)fetch_part(batch[at], host + batch[at].staging.offset);
    } catch (Error& e) {
      e.add_context(batch[at].planned().where());
      throw;
    }
  }

  // 2. The leaves read in parts, checked once all their parts are in.
  std::vector<std::size_t> long_leaves;
  for (const auto& piece : pieces) {
    if (!piece.whole_leaves && piece.length > 0 && piece.offset == 0)
      long_leaves.push_back(piece.first);
  }
  pool.parallel_for(long_leaves.size(), workers, [&](std::size_t i) {
    const auto& leaf = batch[long_leaves[i]];
    try {
      if (!check_staged(leaf, host)) decode_here(long_leaves[i], leaf);
    } catch (Error& e) {
      e.add_context(leaf.planned().where());
      throw;
    }
  });
  return decoded;
}

}  // namespace zarr_device::device_read
