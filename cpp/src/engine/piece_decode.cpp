#include "engine/piece_decode.hpp"

#include <algorithm>
#include <memory>
#include <optional>

namespace zarr_device::engine {

PieceDecode decode_from_pieces(const codecs::CodecChain& chain, const ValueReader& value,
                               std::uint64_t offset, std::uint64_t length,
                               std::span<const DimSlice> selection, const StridedView& destination,
                               ByteBudget* budget) {
  if (length < kPieceDecodeBytes) return PieceDecode::kNotInPieces;
  const auto decoder = chain.piece_decoder(selection, destination, length);
  if (!decoder) return PieceDecode::kNotInPieces;
  std::optional<BudgetLease> lease;
  if (budget) lease.emplace(*budget, kDecodePieceBytes);
  const auto piece = std::make_unique_for_overwrite<std::byte[]>(kDecodePieceBytes);
  for (std::uint64_t done = 0; done < length;) {
    const auto want =
        static_cast<std::size_t>(std::min<std::uint64_t>(kDecodePieceBytes, length - done));
    const std::size_t got = value.read_into(offset + done, {piece.get(), want});
    if (got != want) return PieceDecode::kValueEnded;
    decoder->feed({piece.get(), got});
    done += got;
  }
  decoder->finish();
  return PieceDecode::kDecoded;
}

}  // namespace zarr_device::engine
