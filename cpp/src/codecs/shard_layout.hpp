// The shard format of sharding_indexed, in one place: a grid of inner chunks, each encoded by the
// inner codec chain and stored one after another, and an index of (offset, nbytes) pairs, encoded
// by the index codecs, at the shard's start or end. The index is encoded, decoded and validated
// here, and a selection of a shard is expanded into the inner chunks it touches here
// (InnerChunks), for every reader and writer: the codec itself, the host reads that fetch inner
// chunks by range, the GPU read plan and the GPU writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "codecs/codec_chain.hpp"
#include "place/chunk_grid.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::codecs {

class ShardLayout {
 public:
  struct Entry {
    std::uint64_t offset;
    std::uint64_t nbytes;
  };
  // One entry per inner chunk, in C order of the shard's grid; nullopt for chunks not stored.
  using Index = std::vector<std::optional<Entry>>;

  // `index` encodes the index: an array of the grid's shape plus a last dimension of 2, uint64,
  // and must have a fixed encoded size (FormatError otherwise).
  ShardLayout(CodecChain inner, CodecChain index, bool index_at_start);
  virtual ~ShardLayout() = default;
  ShardLayout(const ShardLayout&) = delete;
  ShardLayout& operator=(const ShardLayout&) = delete;

  [[nodiscard]] const CodecChain& inner() const { return inner_; }
  [[nodiscard]] const CodecChain& index_codecs() const { return index_; }
  [[nodiscard]] std::span<const std::int64_t> chunks_per_shard() const { return chunks_per_shard_; }
  [[nodiscard]] std::size_t num_inner() const { return num_inner_; }
  [[nodiscard]] bool index_at_start() const { return index_at_start_; }
  // The most bytes a stored shard can take: its index and every inner chunk at its bound.
  [[nodiscard]] std::size_t max_stored_size() const;

  // Where the index of a stored shard of `total_size` bytes is (CodecError when the shard is too
  // small to hold one).
  [[nodiscard]] ByteRange index_range(std::uint64_t total_size) const;
  // Decodes and validates the index (`bytes`, read at index_range(total_size)): every entry lies
  // between the index and the shard's end, does not wrap around and overlaps no other.
  // CodecError naming the entry otherwise.
  [[nodiscard]] Index decode_index(const Buffer& bytes, std::uint64_t total_size) const;
  // Reads the index through `read`, then decodes and validates it.
  [[nodiscard]] Index read_index(const RangeReader& read, std::uint64_t total_size) const;
  // The encoded index of a shard whose inner chunks take these stored sizes, laid out in C order
  // (after the index when it comes first); nullopt when none is stored.
  [[nodiscard]] std::optional<Buffer> encode_index(
      std::span<const std::optional<std::size_t>> sizes) const;
  // The error for an inner chunk whose bytes end before its entry says.
  [[nodiscard]] static CodecError truncated(const Entry& entry);

  // The stored inner chunks that `selection` (of the shard) touches, in the order a decode of it
  // reads them (InnerChunks' order), as byte ranges of the shard.
  [[nodiscard]] std::vector<ByteRange> wanted_ranges(std::span<const std::optional<Entry>> index,
                                                     std::span<const DimSlice> selection) const;

  // A stored shard made of inner chunks encoded elsewhere: sizes[i] is the encoded size of inner
  // chunk i (C order; nullopt when not stored), and write_chunk(i, place) writes that chunk
  // into its place in the shard, so a chunk is copied once. nullopt when no chunk is stored:
  // there is nothing to write.
  using ChunkWriter = std::function<void(std::size_t, std::span<std::byte>)>;
  [[nodiscard]] std::optional<Buffer> assemble(std::span<const std::optional<std::size_t>> sizes,
                                               const ChunkWriter& write_chunk) const;
  // A stored shard as the pieces it is made of, in the order the shard holds them (its index
  // and its stored inner chunks), so that a store can write it without first copying it whole
  // into one buffer (Store::set_pieces). `chunks` holds the buffers the parts point into.
  struct Pieces {
    std::vector<Buffer> chunks;
    Buffer index;
    std::vector<std::span<const std::byte>> parts;
    [[nodiscard]] std::size_t size() const;
    [[nodiscard]] Buffer joined() const;
  };
  // The pieces of a shard of encoded chunks (C order, nullopt where not stored); nullopt when
  // none is stored: there is nothing to write.
  [[nodiscard]] std::optional<Pieces> pieces(std::vector<std::optional<Buffer>> chunks) const;
  // The same for chunks encoded as pieces (CodecChain::encode_pieces; empty where not stored).
  [[nodiscard]] std::optional<Pieces> pieces(std::vector<std::vector<Buffer>> chunks) const;
  // Runs body(i) for every i in [0, n), in any order and on any threads, returning when all have.
  using ForEach = std::function<void(std::size_t n, const std::function<void(std::size_t)>& body)>;
  // Encodes a shard (of the chain's shape, its elements at `shard` with byte `strides`: the
  // caller's values, or a C-contiguous copy) with its inner chunks encoded through `for_each`:
  // an engine hands its thread pool, so that a shard's chunks are not one thread's work. Inner
  // chunks all fill value are left out; nullopt when all are: nothing to store. The shard comes
  // as its pieces. Inner chunks that are each one run at `shard` (runs_of(strides)), of a chain
  // that reads its chunk where it is (inner().encodes_from_input()), are encoded from there, and
  // pieces may view `shard` (CodecChain::encode_pieces): they are valid while `shard` is.
  [[nodiscard]] std::optional<Pieces> encode_shard(const std::byte* shard,
                                                   std::span<const std::int64_t> strides,
                                                   const ForEach& for_each) const;
  // Whether each inner chunk of a shard whose elements have byte `strides` is one run of them.
  [[nodiscard]] bool runs_of(std::span<const std::int64_t> strides) const;

 private:
  CodecChain inner_;
  CodecChain index_;
  bool index_at_start_;
  std::size_t index_size_ = 0;
  std::vector<std::int64_t> chunks_per_shard_;
  std::size_t num_inner_ = 1;
};

// The inner chunks that a selection of a shard touches, addressable by position (C order of the
// shard's grid, the order a decode reads them) so that workers can pull them from one counter:
// the one expansion of a shard into its chunks.
class InnerChunks {
 public:
  InnerChunks(const ShardLayout& layout, std::span<const DimSlice> selection)
      : layout_(&layout), grid_(selection, layout.inner().spec().shape) {}

  struct Chunk : place::GridIntersection::Item {
    std::size_t index = 0;  // its position in the shard's index
  };
  [[nodiscard]] std::size_t size() const { return grid_.size(); }
  // Fills `chunk` for the i-th inner chunk touched (reusing its vectors).
  void at(std::size_t i, Chunk& chunk) const;
  // The part of `destination` (where the shard's selection lands) that `chunk` fills.
  [[nodiscard]] static StridedView region(const StridedView& destination, const Chunk& chunk);

 private:
  const ShardLayout* layout_;
  place::GridIntersection grid_;
};

}  // namespace zarr_device::codecs
