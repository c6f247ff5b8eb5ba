// The unit of a device read: one stored chunk (or inner chunk of a shard) of one array, with where
// its bytes are, how they travel to the device and where they land. Host-side: planned, batched,
// fetched and checked on CPU threads (cpp/src/device_read), decoded and placed on the device
// (cpp/cuda).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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
  kDeviceDecode,  // one compressor the device decodes, then copy or scatter
  kCpuDecode,     // decoded on a CPU thread into staging, then copy or scatter
};

using DecodeKind = DeviceDecoding::Kind;

struct ChunkParts;  // device_read/leaf_parts.hpp

inline constexpr std::size_t kInPlace = SIZE_MAX;     // decoded straight into its destination
inline constexpr std::size_t kPlaced = SIZE_MAX - 1;  // already in its destination

struct Leaf {
  const Array* array = nullptr;  // whose chunk (for messages)
  std::size_t target = 0;        // which output of the read it lands in
  std::string key;
  const Store* store = nullptr;  // what its bytes are read from: its target's store (source())
  // The version of the stored value read: a shard's, opened when its index was read and shared
  // by its inner chunks; a whole chunk's, opened for its batch.
  std::shared_ptr<const ValueReader> value;
  std::uint64_t offset = 0;  // byte range of the stored value to fetch
  std::uint64_t length = 0;
  // false: `length` is the most the chunk can be stored in (its codecs' bound), and whether it is
  // stored at all is unknown; the fetch learns both when it opens the chunk (read_plan.hpp says
  // which chunks are planned so).
  bool sized = true;
  const codecs::CodecChain* chain = nullptr;
  const ChunkSpec* spec = nullptr;  // the array the array->bytes codec sees
  std::vector<DimSlice> selection;  // inside that array (after array->array codecs)
  StridedView destination;          // device memory, likewise
  // The same before array->array codecs, kept only where the chain has any (decoded_selection()):
  // copies of the two above for every chunk were an allocation each to make and to free.
  std::vector<DimSlice> selection_before_codecs;
  StridedView destination_before_codecs;
  Route route = Route::kFill;
  DecodeKind codec = DecodeKind::kZstd;
  bool (*accepts)(std::span<const std::byte>, std::size_t) = nullptr;  // the codec's framing check
  std::size_t header = 0;   // framing bytes the device decoder does not take (zlib, lz4)
  std::size_t trailer = 0;  // checksum and framing bytes at the end
  int crc32c = 0;           // crc32c codecs to verify (on the CPU) and strip
  bool swap = false;        // big-endian elements
  // A part of a chunk staged a part at a time (device_read/leaf_parts.hpp), and which; null for a
  // whole chunk. A part's selection, destination and spec are those of its stretch of the chunk's
  // decoded bytes, as a one-dimensional array.
  std::shared_ptr<ChunkParts> parts;
  std::size_t part = 0;
  // Filled while batching:
  std::size_t staging = 0;         // offset in the slot
  std::size_t staged = 0;          // bytes in the slot
  std::size_t scratch = kInPlace;  // device decodes: offset in the decode scratch, or one of these
  std::size_t decode_scratch = 0;  // device decodes: bytes of decode scratch (0: decoded in place)

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

// The decoded selection's shape and its C-contiguous strides (CPU decodes stage data so).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> staged_layout(const Leaf& leaf);
// Bytes of the selected elements.
std::size_t selection_bytes(const Leaf& leaf);
// Bytes a leaf needs in a staging slot.
std::size_t staged_bytes(const Leaf& leaf);
// Whether the device decodes the leaf straight into its destination (whole, C-contiguous, aligned
// for the decoder's output).
bool decodes_in_place(const Leaf& leaf, std::size_t alignment);

}  // namespace zarr_device::device_read
