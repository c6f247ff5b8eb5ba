// gzip's CRC-32 and zlib's Adler-32 in pieces: each piece's checksum computed on its own, then
// combined, so that a GPU verifies a decoded chunk with many threads at once (one piece each)
// instead of one pass over its bytes. The same arithmetic runs on the host, where tests check it
// against zlib's own checksums without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "basics/host_device.hpp"

namespace zarr_device::codecs {

// CRC-32 (ISO-HDLC: gzip, zlib's crc32, PNG), in its bit-reflected form: bit 31 of a word is the
// coefficient of x^0, bit 0 that of x^31.
inline constexpr std::uint32_t kCrc32Polynomial = 0xEDB88320U;
inline constexpr std::uint32_t kCrc32One = 0x80000000U;  // the polynomial 1 (x^0)

// One entry of the byte-at-a-time table: the remainder of byte `i` shifted through eight steps.
ZD_HOST_DEVICE constexpr std::uint32_t crc32_table_entry(std::uint32_t i) {
  std::uint32_t r = i;
  for (int k = 0; k < 8; ++k) r = (r & 1U) != 0 ? (r >> 1) ^ kCrc32Polynomial : r >> 1;
  return r;
}

// The CRC-32 of `bytes` continued from the CRC-32 `crc` of what came before (0 for none), with a
// table of crc32_table_entry(0..255) (on the GPU: in shared memory).
ZD_HOST_DEVICE inline std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* bytes,
                                                 std::size_t n, const std::uint32_t* table) {
  std::uint32_t r = ~crc;
  for (std::size_t i = 0; i < n; ++i) r = table[(r ^ bytes[i]) & 0xFFU] ^ (r >> 8);
  return ~r;
}

// a * b modulo the CRC polynomial, both in the reflected form.
ZD_HOST_DEVICE constexpr std::uint32_t crc32_multiply(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (int i = 0; i < 32; ++i) {
    if ((a & (kCrc32One >> i)) != 0) product ^= b;             // a's term x^i times b
    b = (b & 1U) != 0 ? (b >> 1) ^ kCrc32Polynomial : b >> 1;  // b times x
  }
  return product;
}

// x^(8 n) modulo the CRC polynomial: what appending n bytes multiplies a CRC by.
ZD_HOST_DEVICE constexpr std::uint32_t crc32_shift_of(std::uint64_t n) {
  std::uint32_t power = kCrc32One;
  std::uint32_t square = kCrc32One >> 8;  // x^8
  for (; n != 0; n >>= 1) {
    if ((n & 1U) != 0) power = crc32_multiply(power, square);
    square = crc32_multiply(square, square);
  }
  return power;
}

// The CRC-32 of A followed by B, from crc32(A), crc32(B) and crc32_shift_of(|B|). The register's
// preset and final inversion cancel out between the two (CRC-32 is affine in its input).
ZD_HOST_DEVICE constexpr std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b,
                                                     std::uint32_t shift_b) {
  return crc32_multiply(crc_a, shift_b) ^ crc_b;
}

// Adler-32 (RFC 1950): a = 1 + the bytes' sum, b = the sum of a after each byte, both modulo
// 65521; the checksum is b << 16 | a.
inline constexpr std::uint32_t kAdlerModulus = 65521U;

// The Adler-32 of `bytes` continued from `adler` (1 for none).
ZD_HOST_DEVICE inline std::uint32_t adler32_update(std::uint32_t adler, const std::uint8_t* bytes,
                                                   std::size_t n) {
  // 64-bit sums reduced every 2^20 bytes cannot overflow (b grows by at most 2^20 * 2^17 per run).
  std::uint64_t a = adler & 0xFFFFU;
  std::uint64_t b = adler >> 16;
  std::size_t i = 0;
  while (i < n) {
    const std::size_t end = n - i > (std::size_t{1} << 20) ? i + (std::size_t{1} << 20) : n;
    for (; i < end; ++i) {
      a += bytes[i];
      b += a;
    }
    a %= kAdlerModulus;
    b %= kAdlerModulus;
  }
  return static_cast<std::uint32_t>(b << 16 | a);
}

// The Adler-32 of A followed by B from adler32(A), adler32(B) and |B|: B's running sums started
// from a = 1 where A left a_A, so each of B's |B| steps adds a_A - 1 more to b.
ZD_HOST_DEVICE constexpr std::uint32_t adler32_combine(std::uint32_t adler_a, std::uint32_t adler_b,
                                                       std::uint64_t length_b) {
  const std::uint64_t m = kAdlerModulus;
  const std::uint64_t a_a = adler_a & 0xFFFFU;
  const std::uint64_t b_a = adler_a >> 16;
  const std::uint64_t a_b = adler_b & 0xFFFFU;
  const std::uint64_t b_b = adler_b >> 16;
  const std::uint64_t a = (a_a + a_b + m - 1) % m;
  const std::uint64_t b = (b_a + b_b + (length_b % m) * ((a_a + m - 1) % m)) % m;
  return static_cast<std::uint32_t>(b << 16 | a);
}

}  // namespace zarr_device::codecs
