#include "engine/elements_read.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "codecs/crc32c.hpp"
#include "engine/piece_decode.hpp"
#include "engine/selection_stream.hpp"
#include "place/strided_copy.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::engine {
namespace {

// The crc32c codecs after a chunk's elements stored as they are: 0 or 1; nullopt for any other
// chain.
std::optional<int> checksums_after_elements(const codecs::CodecChain& chain) {
  if (chain.is_plain()) return 0;
  const auto b2b = chain.bytes_to_bytes();
  if (!chain.array_to_array().empty() || chain.array_to_bytes().plain_layout() != Endian::kLittle ||
      b2b.size() != 1) {
    return std::nullopt;
  }
  const auto decoding = b2b[0]->device_decoding();
  if (!decoding || decoding->kind != DeviceDecoding::Kind::kChecksum) return std::nullopt;
  return 1;
}

// A piece of the read: stored bytes [stored, stored + bytes) of the chunk, read into `into`
// (a part of one of the output's runs) or, where null, only checksummed.
struct Piece {
  std::uint64_t stored = 0;
  std::uint64_t bytes = 0;
  std::byte* into = nullptr;
  std::uint32_t crc = 0;
};

[[noreturn]] void value_ended(std::uint64_t size) {
  throw StoreError("the stored value ended before its " + std::to_string(size) +
                   " bytes were read (was it changed in place while read?)");
}

}  // namespace

bool read_stored_elements(const codecs::CodecChain& chain, const Store& store,
                          const std::string& key, std::span<const DimSlice> within,
                          const StridedView& region, std::size_t min_run, ThreadPool& pool,
                          std::size_t workers, ByteBudget& budget) {
  const ChunkSpec& spec = chain.spec();
  const std::size_t es = spec.dtype->size;
  const auto checksums = checksums_after_elements(chain);
  if (!checksums) return false;
  const auto stretch = contiguous_stretch(spec.shape, within, es);
  std::vector<std::span<std::byte>> runs;
  if (!stretch || !place::contiguous_runs(region, es, min_run, runs)) return false;
  const auto value = store.open(key);
  if (!value) {
    place::fill_strided(region, spec.fill_value);
    return true;
  }
  const std::uint64_t elements = spec.nbytes();
  const std::uint64_t size = elements + 4 * static_cast<std::uint64_t>(*checksums);
  if (value->size() != size) return false;

  // The stretch in pieces straight into the runs, in stored order; under a checksum, the bytes
  // around it in pieces too.
  std::vector<Piece> pieces;
  std::size_t before = 0;
  std::vector<ByteStretch> around;
  if (*checksums > 0) {
    auto cut = around_stretch(elements, *stretch, kElementsPieceBytes);
    around = std::move(cut.pieces);
    before = cut.before;
  }
  for (std::size_t a = 0; a < before; ++a) pieces.push_back({around[a].offset, around[a].bytes});
  std::uint64_t at = stretch->offset;
  for (const auto run : runs) {
    for (std::size_t done = 0; done < run.size();) {
      const std::size_t n = std::min(kElementsPieceBytes, run.size() - done);
      pieces.push_back({at, n, run.data() + done});
      at += n;
      done += n;
    }
  }
  if (at != stretch->offset + stretch->bytes) return false;  // (runs not the stretch's bytes)
  for (std::size_t a = before; a < around.size(); ++a) {
    pieces.push_back({around[a].offset, around[a].bytes});
  }

  const std::size_t threads = std::max<std::size_t>(1, std::min(workers, pieces.size()));
  const BudgetLease lease(budget, *checksums > 0 ? threads * kDecodePieceBytes : 0);
  pool.parallel_for(pieces.size(), threads, [&](std::size_t i) {
    Piece& piece = pieces[i];
    if (piece.into == nullptr) {
      const auto crc = stored_crc32c(*value, piece.stored, piece.bytes);
      if (!crc) value_ended(size);
      piece.crc = *crc;
      return;
    }
    const auto n = static_cast<std::size_t>(piece.bytes);
    if (value->read_into(piece.stored, {piece.into, n}) != n) value_ended(size);
    if (*checksums > 0) piece.crc = codecs::crc32c({piece.into, n});
  });
  if (*checksums > 0) {
    codecs::Crc32cJoin joined;
    for (const auto& piece : pieces) joined.append(piece.crc, piece.bytes);
    if (!check_stored_crc32c(*value, elements, joined.value())) value_ended(size);
  }
  return true;
}

}  // namespace zarr_device::engine
