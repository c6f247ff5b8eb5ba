// A prepared codec chain (array->array*, array->bytes, bytes->bytes*) for one chunk spec.
// Immutable after construction and shared by all threads reading the array.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "zarr_device/codec.hpp"

namespace zarr_device::codecs {

class ShardLayout;

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

  // Whether the chunk's decoded bytes come out of stream_decoder, whatever is selected of them:
  // its elements stored as they are in memory (little-endian, C order), its first bytes->bytes
  // codec a decompressor that decodes as a stream (zstd) and the codecs after it checksums
  // (crc32c). (A chain of checksums alone is its stored elements, which reads read as they are.)
  [[nodiscard]] bool decodes_as_stream() const;
  // Where a chunk whose `selection` lands in `destination` is decoded by stream_decoder straight
  // into place (the whole chunk, C-contiguous, as stored, and codecs that decode as a stream):
  // the bytes of `destination` its decoded bytes are, in order, for one window of them all;
  // nullopt otherwise.
  [[nodiscard]] std::optional<std::span<std::byte>> stream_target(
      std::span<const DimSlice> selection, const StridedView& destination) const;
  // The host memory stream_decoder keeps for the chunk, handed out in windows smaller than it,
  // besides the pieces of its source (its decompressor's history), from the stored chunk's first
  // bytes (`head`); the chunk's size where they do not say.
  [[nodiscard]] std::size_t window_memory(std::span<const std::byte> head) const;
  // A decoder of a stored chunk of `stored_size` bytes, pulled from `source` as it needs them,
  // into its decoded bytes as the array->bytes codec lays them out (as stored): in one window
  // of them all (stream_target) or in consecutive windows, for a chunk staged a part at a time.
  // nullptr where the bytes->bytes codecs do not decode as a stream. What it raises is what
  // decode_into raises for the same bytes; a checksum mismatch is reported as such even when the
  // decompressor fails first on the damaged bytes.
  [[nodiscard]] std::unique_ptr<StreamDecoder> stream_decoder(std::uint64_t stored_size,
                                                              StreamDecoder::Source source) const;

  // Whether a chunk can be decoded from byte ranges (a shard without bytes->bytes codecs after it).
  [[nodiscard]] bool supports_partial_decode() const;
  // Decodes from byte ranges of a stored chunk of `total_size` bytes.
  void decode_partial(const RangeReader& read, std::uint64_t total_size,
                      std::span<const DimSlice> selection, const StridedView& destination) const;

  // Whether the stored bytes are exactly the chunk's elements, C order, little endian: then a
  // chunk can be read from the store straight into its place in the output.
  [[nodiscard]] bool is_plain() const;

  // Encodes a C-contiguous chunk. nullopt: nothing to store (a shard with no non-fill chunks).
  // The result is memory of its own, never a view of `chunk`.
  [[nodiscard]] std::optional<Buffer> encode(std::span<const std::byte> chunk) const;
  // Encodes a chunk as the pieces its stored value is made of, in order, for a store to write as
  // they are (Store::set_pieces): one, or two where the last codec appends a suffix (crc32c's
  // checksum) that is then a piece of its own rather than a reason to copy what it follows. A
  // piece may view `chunk` (a little-endian "bytes" layout is the chunk's own bytes), holding
  // its owner: the pieces stay valid while `chunk`'s memory does.
  [[nodiscard]] std::optional<std::vector<Buffer>> encode_pieces(const Buffer& chunk) const;

  // Host memory encode_pieces() holds at once beside the chunk it is given: scratch copies for
  // the array->array codecs and each bytes->bytes codec's input and output, at their bounds (no
  // input for a "bytes" layout the first compressor reads from the chunk itself, no output but
  // its suffix for a last codec that appends one).
  [[nodiscard]] std::size_t encode_memory() const;
  // Whether encode_pieces() reads the chunk's bytes where they are: a little-endian "bytes"
  // layout and no array->array codec before it.
  [[nodiscard]] bool encodes_from_input() const;
  // The encoded size of a chunk when every codec knows it (shard indexes); nullopt otherwise.
  [[nodiscard]] std::optional<std::size_t> fixed_encoded_size() const;
  // The most bytes any valid stored chunk can take.
  [[nodiscard]] std::size_t max_stored_size() const { return level_bounds_.back(); }
  // Host memory a whole-chunk decode may hold at once, whatever its destination: the stored bytes
  // and every intermediate buffer between the codecs, at their bounds.
  [[nodiscard]] std::size_t decode_memory() const;
  // Host memory decode_into(selection, destination) holds beside the stored bytes: the buffers
  // it makes between the codecs, at their bounds. None for the decoded chunk where the last
  // decompressor writes straight into the destination, none for a checksum's step (what a read's
  // max_inflight_bytes accounts, with the stored bytes: a 64 MiB zstd + crc32c chunk decoded into
  // place holds its stored bytes alone, not three times the chunk).
  [[nodiscard]] std::size_t decode_scratch(std::span<const DimSlice> selection,
                                           const StridedView& destination) const;

  // For readers that run some stages elsewhere (the GPU path): the codecs of each kind, and the
  // selection and destination rewritten onto the array the array->bytes codec sees (returns
  // that array's spec).
  [[nodiscard]] std::span<const std::shared_ptr<const ArrayToArrayCodec>> array_to_array() const {
    return array_to_array_;
  }
  [[nodiscard]] const ArrayToBytesCodec& array_to_bytes() const { return *array_to_bytes_; }
  [[nodiscard]] std::span<const std::shared_ptr<const BytesToBytesCodec>> bytes_to_bytes() const {
    return bytes_to_bytes_;
  }
  const ChunkSpec& map_to_encoded(std::vector<DimSlice>& selection, StridedView& destination) const;
  // The shard structure when the chain is one sharding codec with nothing around it.
  [[nodiscard]] const ShardLayout* shard_layout() const;
  // Whether the array->bytes codec is a sharding codec (whatever is around it).
  [[nodiscard]] bool is_sharded() const;
  // The order in which the array->bytes codec sees the chunk's dimensions: its dimension i is the
  // chunk's dimension order[i] (the transposes composed). nullopt when an array->array codec
  // does more than reorder dimensions.
  [[nodiscard]] std::optional<std::vector<std::size_t>> stored_order() const;
  // The shape of the chunks a read decodes, in the array's own dimensions: a sharding codec's
  // inner chunks (its chunk_shape is in the dimensions it sees, after transposes), or the
  // chunk's shape.
  [[nodiscard]] std::vector<std::int64_t> decoded_chunk_shape() const;

 private:
  // Whether the array->bytes codec's output is its input as it is (a little-endian "bytes").
  [[nodiscard]] bool layout_in_place() const;
  // Whether decode_into decompresses straight into `destination` (selection and destination
  // already mapped through the array->array codecs): the whole chunk, C-contiguous, as stored.
  [[nodiscard]] bool decompresses_into_place(std::span<const DimSlice> selection,
                                             const StridedView& destination) const;
  // Whether the bytes->bytes codecs decode as a stream (decodes_as_stream, whatever the layout).
  [[nodiscard]] bool bytes_decode_as_stream() const;

  ChunkSpec spec_;
  std::vector<std::shared_ptr<const ArrayToArrayCodec>> array_to_array_;
  std::vector<ChunkSpec> specs_;  // spec seen by each array->array codec, then by array->bytes
  std::shared_ptr<const ArrayToBytesCodec> array_to_bytes_;
  std::vector<std::shared_ptr<const BytesToBytesCodec>> bytes_to_bytes_;
  // How many of bytes_to_bytes_'s first codecs the metadata lists before the array->bytes codec
  // (BytesToBytesCodec::listed_before_bytes), where to_json() puts them back.
  std::size_t listed_before_bytes_ = 0;
  // level_bounds_[0]: the most the array->bytes codec's output can be; [i + 1]: the most the
  // output of bytes->bytes codec i can be. Decoding codec i may produce at most level_bounds_[i].
  std::vector<std::size_t> level_bounds_;
};

}  // namespace zarr_device::codecs
