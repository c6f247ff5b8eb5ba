// Stored chunks decoded from pieces of their bytes, shared by host reads and the CPU stage of
// device reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "codecs/codec_chain.hpp"
#include "engine/thread_pool.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::engine {

// Stored chunks (and inner chunks of shards) from this size on whose codecs decode as a stream
// (CodecChain::stream_target) are read kDecodePieceBytes at a time and each piece decoded as the
// decoder pulls it, instead of read whole into memory first. A read then holds one piece instead
// of the stored chunk (so chunks of tens of MiB decode on every core within a host read's budget,
// where whole chunks held most cores idle unless the budget grew: the benchmark notebook, "Large
// chunks decoded from pieces on the host"), no
// buffer of the chunk's size is mapped and faulted in for every chunk, and each piece is decoded
// while it is in the reading core's cache.
inline constexpr std::uint64_t kPieceDecodeBytes = std::uint64_t{8} << 20;
inline constexpr std::size_t kDecodePieceBytes = std::size_t{2} << 20;

// A stored chunk's `length` bytes read through `read` (from its first byte: the offset within
// the chunk, and where to read; returns how many it read) a piece at a time into memory of its
// own, as a stream decoder pulls them: the decoder's source is the store's read of its next
// piece. Holds one piece.
class StoredPieces {
 public:
  using Read = std::function<std::size_t(std::uint64_t offset, std::span<std::byte> into)>;
  StoredPieces(Read read, std::uint64_t length, std::size_t piece_bytes = kDecodePieceBytes);
  // The next piece (valid until the next call); empty once all are read. CodecError where the
  // stored bytes end before `length` (ended() then says so).
  std::span<const std::byte> next();
  [[nodiscard]] bool ended() const { return ended_; }

 private:
  Read read_;
  std::uint64_t length_;
  std::size_t piece_bytes_;
  std::unique_ptr<std::byte[]> piece_;
  std::uint64_t at_ = 0;
  bool ended_ = false;
};

// A stream decoder's source pulling bytes [offset, offset + length) of `value`, which it holds,
// kDecodePieceBytes at a time.
StreamDecoder::Source stored_pieces(std::shared_ptr<const ValueReader> value, std::uint64_t offset,
                                    std::uint64_t length);

enum class PieceDecode {
  kNotInPieces,  // too small, or its codecs do not decode from pieces: the caller decodes it whole
  kDecoded,
  kValueEnded,  // the value ended before `length` bytes (the caller says what that means)
};

// Decodes the stored chunk at bytes [offset, offset + length) of `value` into `destination` (the
// `selection` of the chunk) from pieces, when it is large enough and `chain` can. With a
// `budget`, holds one piece of it meanwhile.
PieceDecode decode_from_pieces(const codecs::CodecChain& chain, const ValueReader& value,
                               std::uint64_t offset, std::uint64_t length,
                               std::span<const DimSlice> selection, const StridedView& destination,
                               ByteBudget* budget = nullptr);

}  // namespace zarr_device::engine
