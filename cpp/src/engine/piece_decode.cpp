#include "engine/piece_decode.hpp"

#include <algorithm>
#include <memory>

namespace zarr_device::engine {

bool decode_in_pieces(const ValueReader& value, std::uint64_t offset, std::uint64_t length,
                      PieceDecoder& decoder) {
  const auto piece = std::make_unique_for_overwrite<std::byte[]>(kDecodePieceBytes);
  for (std::uint64_t done = 0; done < length;) {
    const auto want =
        static_cast<std::size_t>(std::min<std::uint64_t>(kDecodePieceBytes, length - done));
    const std::size_t got = value.read_into(offset + done, {piece.get(), want});
    if (got != want) return false;
    decoder.feed({piece.get(), got});
    done += got;
  }
  decoder.finish();
  return true;
}

}  // namespace zarr_device::engine
