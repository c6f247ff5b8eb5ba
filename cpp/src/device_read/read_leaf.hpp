// The unit of a device read: one stored chunk (or inner chunk of a shard) of one array, with where
// its bytes are, how they travel to the device and where they land. Host-side: planned, batched,
// fetched and checked on CPU threads (cpp/src/device_read), decoded and placed on the device
// (cpp/cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "device_read/staging_alignment.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/codec.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::device_read {

// How one stored chunk reaches its place on the device.
enum class Route {
  kFill,          // not stored: fill value
  kCopy,          // stored bytes are the elements: copy or scatter from staging
  kDeviceDecode,  // one compressor the device decodes in the caller's process, then placed
  // The same decoded in the decoder process (cuda/isolated_decoder.hpp), into memory of its own,
  // then placed where it decoded as the metadata says; staged as kDeviceDecode is.
  kIsolatedDecode,
  kCpuDecode,  // decoded on a CPU thread into staging, then copy or scatter
};

// Whether a leaf's stored bytes are staged as they are, for the device to decode.
inline bool decodes_on_device(Route route) {
  return route == Route::kDeviceDecode || route == Route::kIsolatedDecode;
}

using DecodeKind = DeviceDecoding::Kind;

struct ChunkParts;  // device_read/leaf_parts.hpp

inline constexpr std::size_t kInPlace = SIZE_MAX;     // decoded straight into its destination
inline constexpr std::size_t kPlaced = SIZE_MAX - 1;  // already in its destination

// What the planner fixed of a leaf (plan_reads; cut_into_parts makes a part's own, of its stretch
// of the chunk's decoded bytes as a one-dimensional array). No stage changes it afterwards: a leaf
// holds it by value and lends it only by const reference (Leaf::planned()), and a leaf with other
// planned values is a new leaf.
struct PlannedChunk {
  const Array* array = nullptr;  // whose chunk (for messages)
  std::size_t target = 0;        // which output of the read it lands in
  std::string key;
  const Store* store = nullptr;  // what its bytes are read from: its target's store (source())
  const codecs::CodecChain* chain = nullptr;
  const ChunkSpec* spec = nullptr;  // the array the array->bytes codec sees
  std::vector<DimSlice> selection;  // inside that array (after array->array codecs)
  StridedView destination;          // device memory, likewise
  // The same before array->array codecs, kept only where the chain has any (decoded_selection()):
  // copies of the two above for every chunk were an allocation each to make and to free.
  std::vector<DimSlice> selection_before_codecs;
  StridedView destination_before_codecs;

  // The selection and destination before array->array codecs.
  [[nodiscard]] bool has_array_codecs() const {
    return chain != nullptr && !chain->array_to_array().empty();
  }
  [[nodiscard]] const std::vector<DimSlice>& decoded_selection() const {
    return has_array_codecs() ? selection_before_codecs : selection;
  }
  [[nodiscard]] const StridedView& decoded_destination() const {
    return has_array_codecs() ? destination_before_codecs : destination;
  }

  // The store its bytes are read from: the read's view of its array's store, or that store.
  [[nodiscard]] const Store& source() const { return store ? *store : *array->store(); }
  // "array 'x' in file:///..., chunk 'c/0'", for messages.
  [[nodiscard]] std::string where() const { return array->describe() + ", chunk '" + key + "'"; }
};

// Where a leaf's stored bytes are. Planned; completed by the fetch (fetch_batch), which opens the
// version of a whole chunk that is read and sizes a chunk planned without its size.
struct StoredBytes {
  // The version of the stored value read: a shard's, opened when its index was read and shared
  // by its inner chunks; a whole chunk's, opened for its batch.
  std::shared_ptr<const ValueReader> value;
  std::uint64_t offset = 0;  // byte range of the stored value to fetch
  std::uint64_t length = 0;
  // false: `length` is the most the chunk can be stored in (its codecs' bound), and whether it is
  // stored at all is unknown; the fetch learns both when it opens the chunk (read_plan.hpp says
  // which chunks are planned so).
  bool sized = true;
};

// How a leaf's stored bytes become its elements: chosen by choose_route as the leaf is planned.
// Later stages only move a leaf to another route (the CPU decoder for what the device is not given,
// a fill for a chunk its fetch finds not stored); its framing stays as chosen.
struct Decoding {
  Route route = Route::kFill;
  DecodeKind codec = DecodeKind::kZstd;
  bool (*accepts)(std::span<const std::byte>, std::size_t) = nullptr;  // the codec's framing check
  std::size_t header = 0;   // framing bytes the device decoder does not take (zlib, lz4)
  std::size_t trailer = 0;  // checksum and framing bytes at the end
  int crc32c = 0;           // crc32c codecs to verify (on the CPU) and strip
  bool swap = false;        // big-endian elements
  // The element size of a byte shuffle undone on the device after the decode (numcodecs'
  // shuffle before the compressor); 1: none. Such chunks decode into scratch, never in place.
  std::size_t unshuffle = 1;
  // The codec's streams (DeviceDecoding::streams): set for chunks of many streams, which decode in
  // the decoder process stream by stream and are gathered into place by the engine.
  bool (*streams)(std::span<const std::byte>, std::size_t, DeviceStreams&) = nullptr;
  // The codec's check the decoder process verifies (DeviceDecoding::check), and its value in the
  // stored bytes.
  DeviceCheck check = DeviceCheck::kNone;
  std::uint32_t (*check_value)(std::span<const std::byte>) = nullptr;
};

// Where a leaf is staged: its place in a slot, set as it is batched (pack_batches), its decode
// scratch, sized by the decode plan (plan_decode_regions) and placed in a decode call by the run.
struct StagingPlace {
  std::size_t offset = 0;          // in the slot
  std::size_t bytes = 0;           // in the slot
  std::size_t scratch = kInPlace;  // device decodes: offset in the decode scratch, or one of these
  std::size_t scratch_bytes = 0;   // device decodes: bytes of decode scratch (0: decoded in place)
};

// A part of a chunk staged a part at a time (device_read/leaf_parts.hpp), and which; set by
// cut_into_parts. A whole chunk's is empty.
struct ChunkPart {
  std::shared_ptr<ChunkParts> chunk;  // what the chunk's parts share; null for a whole chunk
  std::size_t index = 0;
};

// A leaf's fields, grouped by the stage that fills them: what the planner fixed (planned(), for
// good), where its stored bytes are (stored), how they are decoded (decoding), and where it is
// staged (staging, part).
struct Leaf {
  Leaf() = default;  // planned nothing: a place for a leaf still to be planned
  explicit Leaf(PlannedChunk planned) : planned_(std::move(planned)) {}

  [[nodiscard]] const PlannedChunk& planned() const { return planned_; }

  StoredBytes stored;
  Decoding decoding;
  StagingPlace staging;
  ChunkPart part;

 private:
  PlannedChunk planned_;
};

// The decoded selection's shape and its C-contiguous strides (CPU decodes stage data so).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> staged_layout(const Leaf& leaf);
// Bytes of the selected elements.
std::size_t selection_bytes(const Leaf& leaf);
// Bytes a leaf needs in a staging slot.
std::size_t staged_bytes(const Leaf& leaf);
// Whether a leaf is placed by a copy of its decoded bytes: the whole chunk, into a C-contiguous
// destination, in native byte order.
bool placed_by_copy(const Leaf& leaf);
// Whether the device decodes the leaf straight into its destination (whole, C-contiguous, aligned
// for the decoder's output).
bool decodes_in_place(const Leaf& leaf, std::size_t alignment);
// Whether a leaf whose decode is unshuffled on the device (Decoding::unshuffle) is unshuffled
// straight into its destination (whole, C-contiguous, native byte order), not into scratch first.
bool unshuffles_in_place(const Leaf& leaf);
// The decode scratch a leaf needs where it is not decoded in place: its decoded bytes, and as many
// again to unshuffle them into where they cannot be unshuffled in place.
std::size_t decode_scratch_bytes(const Leaf& leaf);

}  // namespace zarr_device::device_read
