// Stored chunks decoded from pieces of their bytes, shared by host reads and the CPU stage of
// device reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "codecs/codec_chain.hpp"
#include "engine/thread_pool.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::engine {

// Stored chunks (and inner chunks of shards) from this size on whose codecs decode from pieces
// (CodecChain::piece_decoder) are read kDecodePieceBytes at a time and each piece decoded as it
// comes, instead of read whole into memory first. A read then holds one piece instead of the
// stored chunk (so chunks of tens of MiB decode on every core within a host read's budget:
// measured before, 64 MiB zstd chunks on 16 cores read at 2.4 GB/s at 256 MiB, 6.8 at 1 GiB), no
// buffer of the chunk's size is mapped and faulted in for every chunk, and each piece is decoded
// while it is in the reading core's cache.
inline constexpr std::uint64_t kPieceDecodeBytes = std::uint64_t{8} << 20;
inline constexpr std::size_t kDecodePieceBytes = std::size_t{2} << 20;

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
