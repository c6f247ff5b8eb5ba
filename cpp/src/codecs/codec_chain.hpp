// A prepared codec chain (array->array*, array->bytes, bytes->bytes*) for one chunk spec.
// Immutable after construction and shared by all threads reading the array.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "zarr_device/codec.hpp"

namespace zarr_device::codecs {

class CodecChain {
 public:
  // Builds the chain from metadata (a list of {"name", "configuration"} entries). Throws
  // FormatError for unknown codecs or an invalid order (e.g. no array->bytes codec).
  CodecChain(const nlohmann::json& codecs, ChunkSpec spec, int zarr_format = 3);

  [[nodiscard]] const ChunkSpec& spec() const { return spec_; }
  [[nodiscard]] nlohmann::json to_json() const;

  // Decodes a whole encoded chunk and writes the selected elements into `destination`.
  void decode_into(const Buffer& encoded, std::span<const DimSlice> selection,
                   const StridedView& destination) const;

  // Whether a chunk can be decoded from byte ranges (a shard without bytes->bytes codecs after it).
  [[nodiscard]] bool supports_partial_decode() const;
  // Decodes from byte ranges of a stored chunk of `total_size` bytes.
  void decode_partial(const RangeReader& read, std::uint64_t total_size,
                      std::span<const DimSlice> selection, const StridedView& destination) const;

  // Whether the stored bytes are exactly the chunk's elements, C order, little endian: then a
  // chunk can be read from the store straight into its place in the output.
  [[nodiscard]] bool is_plain() const;

  // Encodes a C-contiguous chunk. nullopt: nothing to store (a shard with no non-fill chunks).
  [[nodiscard]] std::optional<Buffer> encode(std::span<const std::byte> chunk) const;

  // The encoded size of a chunk when every codec knows it (shard indexes); nullopt otherwise.
  [[nodiscard]] std::optional<std::size_t> fixed_encoded_size() const;

 private:
  ChunkSpec spec_;
  std::vector<std::shared_ptr<const ArrayToArrayCodec>> array_to_array_;
  std::vector<ChunkSpec> specs_;  // spec seen by each array->array codec, then by array->bytes
  std::shared_ptr<const ArrayToBytesCodec> array_to_bytes_;
  std::vector<std::shared_ptr<const BytesToBytesCodec>> bytes_to_bytes_;
};

}  // namespace zarr_device::codecs
