// The piecewise CRC-32 and Adler-32 (codecs/checksum_combine.hpp) against zlib's own: any split
// of a buffer into pieces, each checksummed alone and combined, gives the whole buffer's checksum.
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "codecs/checksum_combine.hpp"

namespace zarr_device::codecs {
namespace {

const std::array<std::uint32_t, 256>& crc32_table() {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) t[i] = crc32_table_entry(i);
    return t;
  }();
  return table;
}

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

std::uint32_t zlib_crc32(const std::uint8_t* p, std::size_t n) {
  return static_cast<std::uint32_t>(crc32(0L, p, static_cast<uInt>(n)));
}
std::uint32_t zlib_adler32(const std::uint8_t* p, std::size_t n) {
  return static_cast<std::uint32_t>(adler32(1L, p, static_cast<uInt>(n)));
}

TEST(ChecksumCombine, PiecesCombineToZlibsChecksumOfTheWhole) {
  for (const std::size_t n : {0UL, 1UL, 7UL, 4096UL, 100003UL}) {
    const auto data = random_bytes(n, static_cast<std::uint32_t>(n) + 3);
    const std::uint32_t want_crc = zlib_crc32(data.data(), n);
    const std::uint32_t want_adler = zlib_adler32(data.data(), n);
    EXPECT_EQ(crc32_update(0, data.data(), n, crc32_table().data()), want_crc) << n;
    EXPECT_EQ(adler32_update(1, data.data(), n), want_adler) << n;
    for (const std::size_t piece : {1UL, 3UL, 64UL, 1000UL, 65536UL}) {
      std::uint32_t crc = 0;
      std::uint32_t adler = 1;
      for (std::size_t at = 0; at < n; at += piece) {
        const std::size_t len = std::min(piece, n - at);
        const std::uint8_t* p = data.data() + at;
        crc =
            crc32_combine(crc, crc32_update(0, p, len, crc32_table().data()), crc32_shift_of(len));
        adler = adler32_combine(adler, adler32_update(1, p, len), len);
      }
      EXPECT_EQ(crc, want_crc) << n << " bytes in pieces of " << piece;
      EXPECT_EQ(adler, want_adler) << n << " bytes in pieces of " << piece;
    }
  }
}

TEST(ChecksumCombine, UnevenPiecesCombineInATree) {
  // As a GPU reduces: neighbours pairwise, whatever their lengths.
  const auto data = random_bytes(50000, 11);
  std::mt19937 rng(5);
  std::vector<std::size_t> cuts{0};
  while (cuts.back() < data.size()) {
    cuts.push_back(std::min(data.size(), cuts.back() + 1 + rng() % 3000));
  }
  struct Piece {
    std::uint32_t crc, adler;
    std::uint64_t length;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::size_t len = cuts[i + 1] - cuts[i];
    const std::uint8_t* p = data.data() + cuts[i];
    pieces.push_back(
        {crc32_update(0, p, len, crc32_table().data()), adler32_update(1, p, len), len});
  }
  while (pieces.size() > 1) {
    std::vector<Piece> next;
    for (std::size_t i = 0; i < pieces.size(); i += 2) {
      if (i + 1 == pieces.size()) {
        next.push_back(pieces[i]);
        continue;
      }
      const Piece& a = pieces[i];
      const Piece& b = pieces[i + 1];
      next.push_back({crc32_combine(a.crc, b.crc, crc32_shift_of(b.length)),
                      adler32_combine(a.adler, b.adler, b.length), a.length + b.length});
    }
    pieces = std::move(next);
  }
  EXPECT_EQ(pieces[0].crc, zlib_crc32(data.data(), data.size()));
  EXPECT_EQ(pieces[0].adler, zlib_adler32(data.data(), data.size()));
}

TEST(ChecksumCombine, LongPiecesShiftAsZlibCombines) {
  // Lengths past 4 GiB, where only the arithmetic (no data) can be checked: against zlib's
  // crc32_combine64 / adler32_combine64.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    const auto a = static_cast<std::uint32_t>(rng());
    const auto b = static_cast<std::uint32_t>(rng());
    // Adler-32 values are two residues below 65521.
    const std::uint32_t adler_a = (a >> 16) % kAdlerModulus << 16 | (a & 0xFFFFU) % kAdlerModulus;
    const std::uint32_t adler_b = (b >> 16) % kAdlerModulus << 16 | (b & 0xFFFFU) % kAdlerModulus;
    // (Below 2^63: zlib takes the length as a signed z_off64_t.)
    const std::uint64_t length = rng() >> (1 + i % 40);
    EXPECT_EQ(crc32_combine(a, b, crc32_shift_of(length)),
              static_cast<std::uint32_t>(crc32_combine64(a, b, static_cast<z_off64_t>(length))))
        << length;
    EXPECT_EQ(adler32_combine(adler_a, adler_b, length),
              static_cast<std::uint32_t>(
                  adler32_combine64(adler_a, adler_b, static_cast<z_off64_t>(length))))
        << length;
  }
}

}  // namespace
}  // namespace zarr_device::codecs
