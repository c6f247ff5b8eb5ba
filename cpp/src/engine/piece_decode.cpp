#include "engine/piece_decode.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace zarr_device::engine {
namespace {

// A stream decoder's source pulling from `pieces`, which it shares.
StreamDecoder::Source source_of(std::shared_ptr<StoredPieces> pieces) {
  return [pieces = std::move(pieces)] { return pieces->next(); };
}

// Reads of a stored value from `offset` on, through `value`: a shared_ptr where the reads may
// outlive the caller (a stream decoder's source), a plain pointer where they do not.
template <typename ValuePointer>
StoredPieces::Read reads_from(ValuePointer value, std::uint64_t offset) {
  return [value = std::move(value), offset](std::uint64_t at, std::span<std::byte> into) {
    return value->read_into(offset + at, into);
  };
}

}  // namespace

StoredPieces::StoredPieces(Read read, std::uint64_t length, std::size_t piece_bytes)
    : read_(std::move(read)),
      length_(length),
      piece_bytes_(std::max<std::size_t>(piece_bytes, 1)) {}

std::span<const std::byte> StoredPieces::next() {
  if (at_ == length_) return {};
  if (!piece_) piece_ = std::make_unique_for_overwrite<std::byte[]>(piece_bytes_);
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(piece_bytes_, length_ - at_));
  const std::size_t got = ended_ ? 0 : read_(at_, {piece_.get(), want});
  if (got != want) {
    ended_ = true;
    throw CodecError("the stored chunk ended after " + std::to_string(at_ + got) + " of its " +
                     std::to_string(length_) + " bytes");
  }
  at_ += got;
  return {piece_.get(), got};
}

StreamDecoder::Source stored_pieces(std::shared_ptr<const ValueReader> value, std::uint64_t offset,
                                    std::uint64_t length) {
  return source_of(std::make_shared<StoredPieces>(reads_from(std::move(value), offset), length));
}

PieceDecode decode_from_pieces(const codecs::CodecChain& chain, const ValueReader& value,
                               std::uint64_t offset, std::uint64_t length,
                               std::span<const DimSlice> selection, const StridedView& destination,
                               ByteBudget* budget) {
  if (length < kPieceDecodeBytes || length > chain.max_stored_size()) {
    return PieceDecode::kNotInPieces;
  }
  const auto target = chain.stream_target(selection, destination);
  if (!target) return PieceDecode::kNotInPieces;
  std::optional<BudgetLease> lease;
  if (budget) lease.emplace(*budget, kDecodePieceBytes);
  const auto pieces = std::make_shared<StoredPieces>(reads_from(&value, offset), length);
  try {
    const auto decoder = chain.stream_decoder(length, source_of(pieces));
    decoder->fill(*target);
    decoder->finish();
  } catch (const Error&) {
    // The value ended: the caller says what that means, whatever the codecs made of it.
    if (pieces->ended()) return PieceDecode::kValueEnded;
    throw;
  }
  return PieceDecode::kDecoded;
}

}  // namespace zarr_device::engine
