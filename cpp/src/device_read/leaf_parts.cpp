#include "device_read/leaf_parts.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "codecs/crc32c.hpp"
#include "device_read/read_plan.hpp"
#include "device_read/read_staging.hpp"
#include "engine/piece_decode.hpp"
#include "engine/selection_stream.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::device_read {

// Stored bytes of a chunk that are checksummed but not staged.
struct CheckedPiece {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc = 0;
};

// What the parts of one chunk share.
struct ChunkParts {
  Leaf whole;                    // the chunk as planned (or the stretch of it that is read)
  std::uint64_t stored_end = 0;  // where the stored value ends, as planned
  std::size_t part_bytes = 0;    // of each part but the last
  std::size_t count = 0;         // parts
  std::vector<ChunkSpec> specs;  // the parts' arrays: of a whole part, of the last

  std::mutex mutex;                          // guards all below
  std::shared_ptr<const ValueReader> value;  // one version of the chunk for all its parts
  std::vector<std::byte*> staging;           // where each part is staged
  std::size_t done = 0;                      // parts fetched (copies) or decoded, in order
  std::vector<std::uint32_t> crcs;           // copies: each part's crc32c
  // A stretch of a chunk under a crc32c: the chunk's stored elements around it, in stored order
  // (`before` of them ahead of the stretch), which its parts' fetches check, part p the pieces p,
  // p + count, ..., so that the read's threads checksum the whole chunk side by side.
  std::vector<CheckedPiece> around;
  std::size_t before = 0;
  std::uint64_t checksum_at = 0;           // where the stored crc32c lies
  std::unique_ptr<StreamDecoder> decoder;  // decodes: from the first part to the last
  std::unique_ptr<engine::SelectionStream>
      selected;  // the same for a selection that cuts the chunk
  // A failure, for the parts fetched after it (each raises an error of its own: an error object
  // gains context as it travels, and one object rethrown on several threads would race).
  bool failed = false;
  bool changed = false;  // the failure was ValueChanged
  ErrorKind failure_kind = ErrorKind::kCodec;
  std::string failure;

  [[nodiscard]] std::size_t bytes_of(std::size_t part) const {
    return part + 1 < count ? part_bytes : selection_bytes(whole) - part_bytes * (count - 1);
  }
};

namespace {

std::size_t element_size(const Leaf& leaf) { return leaf.planned().spec->dtype->size; }

// Whether a leaf lands whole and contiguous in its destination, as stored (as a device decode
// straight into place does, whatever the alignment).
bool lands_whole(const Leaf& leaf) {
  return !leaf.planned().has_array_codecs() && decodes_in_place(leaf, 1);
}

bool copies_in_parts(const Leaf& leaf) {
  return lands_whole(leaf) && leaf.decoding.crc32c <= 1 &&
         leaf.stored.length ==
             leaf.planned().spec->nbytes() + 4 * static_cast<std::size_t>(leaf.decoding.crc32c);
}

bool decodes_in_parts(const Leaf& leaf) {
  const auto& planned = leaf.planned();
  return lands_whole(leaf) &&
         planned.chain->stream_target(planned.selection, planned.destination).has_value();
}

bool cuts_chunk(const Leaf& leaf) {
  const auto& planned = leaf.planned();
  return !place::is_full(planned.selection, planned.spec->shape);
}

// The elements of a chunk stored as they are (at most one crc32c after them), not decoded.
bool stored_as_elements(const Leaf& leaf) {
  return leaf.decoding.route == Route::kCopy && leaf.decoding.crc32c <= 1 &&
         leaf.stored.length ==
             leaf.planned().spec->nbytes() + 4 * static_cast<std::size_t>(leaf.decoding.crc32c);
}

// A selection that cuts a chunk too large for the whole staging (which would be refused, or
// decoded whole on the host) is staged in parts of its selected elements, taken from the chunk's
// bytes in one pass (SelectionStream): where they land contiguous in their destination, as
// stored.
bool selected_in_parts(const Leaf& leaf, const PartSizes& sizes) {
  // (A CPU decode stages only the selection, but decodes the whole chunk on the host.)
  const std::size_t staged =
      leaf.decoding.route == Route::kCpuDecode ? leaf.planned().spec->nbytes() : staged_bytes(leaf);
  if (leaf.planned().has_array_codecs() || leaf.decoding.swap || staged <= sizes.staging.bytes ||
      !place::is_c_contiguous(leaf.planned().destination, element_size(leaf))) {
    return false;
  }
  switch (leaf.decoding.route) {
    case Route::kCopy:
      return stored_as_elements(leaf);
    case Route::kCpuDecode:
    case Route::kDeviceDecode:
    case Route::kIsolatedDecode:
      return leaf.planned().chain->decodes_as_stream();
    case Route::kFill:
      return false;
  }
  return false;
}

// A whole number of elements, at least one.
std::size_t in_elements(std::size_t bytes, std::size_t element) {
  return std::max(element, bytes / element * element);
}

std::shared_ptr<ChunkParts> parts_of(Leaf whole, std::size_t part_bytes,
                                     std::uint64_t stored_end = 0) {
  auto parts = std::make_shared<ChunkParts>();
  parts->stored_end = stored_end ? stored_end : whole.stored.offset + whole.stored.length;
  const std::size_t total = selection_bytes(whole);
  parts->checksum_at = whole.stored.offset + total;
  parts->part_bytes = in_elements(part_bytes, element_size(whole));
  parts->count = (total + parts->part_bytes - 1) / parts->part_bytes;
  parts->staging.assign(parts->count, nullptr);
  parts->crcs.assign(parts->count, 0);
  for (const std::size_t bytes :
       {parts->part_bytes, total - parts->part_bytes * (parts->count - 1)}) {
    ChunkSpec spec;
    spec.shape = {static_cast<std::int64_t>(bytes / element_size(whole))};
    spec.dtype = whole.planned().spec->dtype;
    spec.fill_value = whole.planned().spec->fill_value;
    parts->specs.push_back(std::move(spec));
  }
  parts->whole = std::move(whole);
  return parts;
}

// Cuts the stored elements of a chunk [chunk_at, elements_end) around the stretch its parts
// stage into about one piece for each part (at least a piece of a read's, kDecodePieceBytes).
void check_around(ChunkParts& parts, std::uint64_t chunk_at, std::uint64_t elements_end) {
  const engine::ByteStretch stretch{parts.whole.stored.offset - chunk_at,
                                    parts.whole.stored.length};
  const std::uint64_t total = elements_end - chunk_at;
  const std::uint64_t piece = std::max<std::uint64_t>(
      engine::kDecodePieceBytes, (total - stretch.bytes + parts.count - 1) / parts.count);
  const auto around = engine::around_stretch(total, stretch, piece);
  for (const auto& p : around.pieces) {
    parts.around.push_back(CheckedPiece{chunk_at + p.offset, p.bytes, 0});
  }
  parts.before = around.before;
}

// A part of a chunk: a leaf planned anew for its stretch of the chunk's decoded bytes, as a
// one-dimensional array, that takes its route from the chunk and nothing else of its framing (its
// fetch checks and decodes the whole chunk: fetch_part).
Leaf part_leaf(const std::shared_ptr<ChunkParts>& parts, std::size_t index) {
  const Leaf& whole = parts->whole;
  const PlannedChunk& chunk = whole.planned();
  const std::size_t element = element_size(whole);
  const std::size_t at = index * parts->part_bytes;
  const std::size_t bytes = parts->bytes_of(index);
  const auto elements = static_cast<std::int64_t>(bytes / element);
  PlannedChunk planned;
  planned.array = chunk.array;
  planned.target = chunk.target;
  planned.key = chunk.key;
  planned.store = chunk.store;
  planned.chain = chunk.chain;
  planned.spec = &parts->specs[index + 1 < parts->count ? 0 : 1];
  planned.selection = {DimSlice{0, 1, elements}};
  planned.destination =
      StridedView{chunk.destination.data + at, {elements}, {static_cast<std::int64_t>(element)}};
  Leaf part(std::move(planned));
  part.decoding.route = whole.decoding.route;
  part.stored.offset = whole.stored.offset + at;  // a copy's bytes in the stored value
  part.stored.length = bytes;
  part.part = {parts, index};
  return part;
}

// The stretch of a chunk's stored elements that its selection covers, as the leaf that its parts
// are cut from: the chunk's plan but for a one-dimensional selection of the stretch's elements.
Leaf stretch_leaf(const Leaf& leaf, const engine::ByteStretch& stretch) {
  PlannedChunk planned = leaf.planned();
  planned.selection = {
      DimSlice{0, 1, static_cast<std::int64_t>(stretch.bytes / element_size(leaf))}};
  Leaf rows(std::move(planned));
  rows.stored = leaf.stored;
  rows.stored.offset += stretch.offset;
  rows.stored.length = stretch.bytes;
  rows.decoding = leaf.decoding;
  return rows;
}

[[noreturn]] void fail_again(const ChunkParts& parts) {
  const std::string text = "an earlier part of the chunk failed: " + parts.failure;
  if (parts.changed) throw ValueChanged(text);
  switch (parts.failure_kind) {
    case ErrorKind::kChecksum:
      throw ChecksumError(text);
    case ErrorKind::kStore:
      throw StoreError(text);
    case ErrorKind::kOutOfMemory:
      throw OutOfMemoryError(text);
    default:
      throw CodecError(text);
  }
}

// The chunk's one open version, opened by the first part to need it (`parts.mutex` held).
void open_value(ChunkParts& parts) {
  if (!parts.value) {
    const auto& planned = parts.whole.planned();
    const auto& stored = parts.whole.stored;
    parts.value = stored.value ? stored.value : planned.source().open(planned.key);
    if (!parts.value || (!stored.value && parts.value->size() != parts.stored_end)) {
      throw ValueChanged(planned.where() + ": the chunk was replaced while it was read");
    }
  }
}

void fetch_copied(ChunkParts& parts, std::size_t index, std::byte* staged) {
  std::shared_ptr<const ValueReader> value;
  {
    std::lock_guard guard(parts.mutex);
    if (parts.failed) fail_again(parts);
    open_value(parts);  // kept open until the last part is in
    value = parts.value;
  }
  const std::size_t bytes = parts.bytes_of(index);
  const std::uint64_t at = parts.whole.stored.offset + index * parts.part_bytes;
  if (value->read_into(at, {staged, bytes}) != bytes) {
    throw CodecError("chunk is shorter than its shard index says");
  }
  const std::uint32_t crc = parts.whole.decoding.crc32c ? codecs::crc32c({staged, bytes}) : 0;
  // This part's share of the bytes around a stretch (nobody else touches these pieces).
  for (std::size_t p = index; p < parts.around.size(); p += parts.count) {
    const auto checked =
        engine::stored_crc32c(*value, parts.around[p].offset, parts.around[p].bytes);
    if (!checked) throw CodecError("chunk is shorter than its shard index says");
    parts.around[p].crc = *checked;
  }
  std::lock_guard guard(parts.mutex);
  parts.crcs[index] = crc;
  if (++parts.done < parts.count) return;
  if (parts.whole.decoding.crc32c) {
    // The pieces in stored order: those before the stretch, its parts, those after.
    codecs::Crc32cJoin joined;
    for (std::size_t p = 0; p < parts.before; ++p) {
      joined.append(parts.around[p].crc, parts.around[p].bytes);
    }
    for (std::size_t p = 0; p < parts.count; ++p) joined.append(parts.crcs[p], parts.bytes_of(p));
    for (std::size_t p = parts.before; p < parts.around.size(); ++p) {
      joined.append(parts.around[p].crc, parts.around[p].bytes);
    }
    if (!engine::check_stored_crc32c(*value, parts.checksum_at, joined.value())) {
      throw CodecError("chunk is shorter than its shard index says");
    }
  }
  parts.value.reset();
}

// False, having done nothing, when `wait` is false and another thread is decoding the chunk.
bool fetch_decoded(ChunkParts& parts, std::size_t index, bool wait) {
  std::unique_lock guard(parts.mutex, std::defer_lock);
  if (!wait && !guard.try_lock()) return false;
  if (wait) guard.lock();
  if (parts.failed) fail_again(parts);
  if (!parts.decoder && !parts.selected) {
    if (parts.done > 0) return true;  // all decoded (the decoder is let go with the last part)
    open_value(parts);
    const Leaf& whole = parts.whole;
    const auto& planned = whole.planned();
    const std::uint64_t offset = whole.stored.offset;
    const std::uint64_t length = whole.stored.length;
    auto decoder = [&] {
      return planned.chain->stream_decoder(length,
                                           engine::stored_pieces(parts.value, offset, length));
    };
    if (!cuts_chunk(whole)) {
      parts.decoder = decoder();
    } else {
      auto bytes = planned.chain->decodes_as_stream()
                       ? engine::decoded_bytes(decoder())
                       : engine::stored_bytes(parts.value, offset, planned.spec->nbytes(),
                                              whole.decoding.crc32c > 0);
      parts.selected = std::make_unique<engine::SelectionStream>(
          planned.spec->shape, planned.selection, element_size(whole), std::move(bytes),
          engine::kDecodePieceBytes);
    }
  }
  for (; parts.done <= index; ++parts.done) {
    std::byte* staged = parts.staging[parts.done];
    if (!staged) throw std::logic_error("a chunk's part was decoded before it was lent its place");
    const std::span<std::byte> window{staged, parts.bytes_of(parts.done)};
    if (parts.selected) {
      parts.selected->fill(window);
    } else {
      parts.decoder->fill(window);
    }
  }
  if (parts.done == parts.count) {
    if (parts.selected) {
      parts.selected->finish();
    } else {
      parts.decoder->finish();
    }
    parts.decoder.reset();
    parts.selected.reset();
    parts.value.reset();
  }
  return true;
}

// The history assumed for a chunk of a store whose requests wait on a round trip (BatchedGets):
// what zstd's levels up to 19 keep. Reading each chunk's first bytes there would cost a round
// trip each while the read is planned.
constexpr std::size_t kRemoteHistory = std::size_t{8} << 20;

// The host memory a chunk decoding in parts keeps: its decompressor's history, from its stored
// first bytes (one small read), and a piece of its stored bytes. A chunk that cannot be read now
// counts as large as it is (its fetch will say why).
std::size_t memory_in_parts(const Leaf& leaf) {
  // A selection's stream keeps a window of the chunk besides.
  const std::size_t window = cuts_chunk(leaf) ? engine::kDecodePieceBytes : 0;
  if (stored_as_elements(leaf)) return window + engine::kDecodePieceBytes;
  const auto& planned = leaf.planned();
  const auto& stored = leaf.stored;
  std::size_t history = planned.spec->nbytes();
  if (dynamic_cast<const BatchedGets*>(planned.array->store().get()) != nullptr) {
    return std::min(history, kRemoteHistory) + engine::kDecodePieceBytes + window;
  }
  try {
    const auto value =
        stored.value ? stored.value
                     : key_reader(planned.source(), planned.key, stored.offset + stored.length);
    std::array<std::byte, 32> head{};
    const std::size_t got = value->read_into(
        stored.offset, {head.data(), static_cast<std::size_t>(
                                         std::min<std::uint64_t>(head.size(), stored.length))});
    history = planned.chain->window_memory({head.data(), got});
  } catch (const Error&) {  // NOLINT(bugprone-empty-catch): counted at its size, as said above
  }
  return history + engine::kDecodePieceBytes + window;
}

}  // namespace

std::size_t decoded_part_bytes(const PartSizes& sizes) {
  return std::min(
      sizes.staging.slot_bytes,
      std::max(sizes.staging.slot_bytes / std::max<std::size_t>(sizes.workers, 1), kMinPartBytes));
}

bool staged_in_parts(const Leaf& leaf, const PartSizes& sizes) {
  if (!leaf.stored.sized || leaf.part.chunk || leaf.planned().chain == nullptr) return false;
  if (cuts_chunk(leaf)) return selected_in_parts(leaf, sizes);
  const std::size_t staged = staged_bytes(leaf);
  switch (leaf.decoding.route) {
    case Route::kCopy:
      return staged > sizes.staging.slot_bytes && copies_in_parts(leaf);
    case Route::kCpuDecode: {
      // As many in flight as the read has threads: all slots but the one being copied hold some.
      const std::size_t per_slot = sizes.staging.slot_bytes / std::max<std::size_t>(staged, 1);
      const bool slot_bound =
          (std::max<std::size_t>(sizes.staging.slots, 2) - 1) * per_slot < sizes.workers;
      return (staged > sizes.staging.slot_bytes || slot_bound) && decodes_in_parts(leaf);
    }
    case Route::kDeviceDecode:
    case Route::kIsolatedDecode:
      return staged > sizes.staging.bytes && decodes_in_parts(leaf);
    case Route::kFill:
      return false;
  }
  return false;
}

std::size_t cut_into_parts(std::vector<Leaf>& leaves, const PartSizes& sizes) {
  std::size_t cut = 0;
  for (const auto& leaf : leaves) cut += staged_in_parts(leaf, sizes) ? 1 : 0;
  if (cut == 0) return 0;
  const std::size_t copy_part = std::min(kCopyBatchBytes, sizes.staging.slot_bytes);
  const std::size_t decode_part = decoded_part_bytes(sizes);
  std::vector<Leaf> out;
  out.reserve(leaves.size() + cut * 4);
  std::vector<std::shared_ptr<ChunkParts>> group;  // decoded chunks whose parts interleave
  std::size_t group_memory = 0;
  auto flush = [&] {
    group_memory = 0;
    for (std::size_t p = 0; !group.empty(); ++p) {
      bool any = false;
      for (const auto& parts : group) {
        if (p < parts->count) {
          out.push_back(part_leaf(parts, p));
          any = true;
        }
      }
      if (!any) group.clear();
    }
  };
  for (auto& leaf : leaves) {
    if (!staged_in_parts(leaf, sizes)) {
      flush();
      out.push_back(std::move(leaf));
      continue;
    }
    if (leaf.decoding.route == Route::kCopy && cuts_chunk(leaf)) {
      // Rows of a chunk stored as they are (a tensor-parallel rank's share of a chunk stored
      // whole): only they are staged, in parts read apart; under a crc32c the parts' fetches
      // also checksum the rest of the chunk, each a share.
      if (const auto stretch = engine::contiguous_stretch(
              leaf.planned().spec->shape, leaf.planned().selection, element_size(leaf))) {
        flush();
        const std::uint64_t chunk_at = leaf.stored.offset;
        const std::uint64_t stored_end = leaf.stored.offset + leaf.stored.length;
        const std::uint64_t elements_end = chunk_at + leaf.planned().spec->nbytes();
        const auto parts = parts_of(stretch_leaf(leaf, *stretch), copy_part, stored_end);
        if (parts->whole.decoding.crc32c) {
          parts->checksum_at = elements_end;
          check_around(*parts, chunk_at, elements_end);
        }
        for (std::size_t p = 0; p < parts->count; ++p) out.push_back(part_leaf(parts, p));
        continue;
      }
    }
    if (leaf.decoding.route == Route::kCopy && !cuts_chunk(leaf)) {
      flush();
      const auto parts = parts_of(std::move(leaf), copy_part);
      for (std::size_t p = 0; p < parts->count; ++p) out.push_back(part_leaf(parts, p));
      continue;
    }
    const std::size_t memory = memory_in_parts(leaf);
    leaf.decoding.route =
        Route::kCpuDecode;  // (a device decode no slot holds, a selection's elements)
    if (!group.empty() && group_memory + memory > sizes.window_budget) flush();
    group_memory += memory;
    group.push_back(parts_of(std::move(leaf), decode_part));
    if (group.size() >= kChunksPerWorker * std::max<std::size_t>(sizes.workers, 1)) flush();
  }
  flush();
  leaves = std::move(out);
  return cut;
}

void lend_part_staging(std::span<Leaf> batch, std::byte* host) {
  for (const auto& leaf : batch) {
    if (!leaf.part.chunk) continue;
    std::lock_guard guard(leaf.part.chunk->mutex);
    leaf.part.chunk->staging[leaf.part.index] = host + leaf.staging.offset;
  }
}

bool checks_around(const Leaf& leaf) { return leaf.part.chunk && !leaf.part.chunk->around.empty(); }

bool fetch_part(const Leaf& part, std::byte* staged, bool wait) {
  ChunkParts& parts = *part.part.chunk;
  try {
    if (part.decoding.route == Route::kCopy) {
      fetch_copied(parts, part.part.index, staged);
      return true;
    }
    {
      std::lock_guard guard(parts.mutex);
      if (!parts.staging[part.part.index]) parts.staging[part.part.index] = staged;
    }
    return fetch_decoded(parts, part.part.index, wait);
  } catch (const Error& e) {
    std::lock_guard guard(parts.mutex);
    if (!parts.failed) {
      parts.failed = true;
      parts.changed = dynamic_cast<const ValueChanged*>(&e) != nullptr;
      parts.failure_kind = e.kind();
      parts.failure = e.what();
    }
    parts.decoder.reset();
    parts.selected.reset();
    parts.value.reset();
    throw;
  }
}

}  // namespace zarr_device::device_read
