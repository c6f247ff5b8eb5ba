// CRC-32C (Castagnoli), the checksum of the Zarr v3 "crc32c" codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace zarr_device::codecs {

// The CRC-32C of `data`, continuing from `crc` (the CRC of the bytes before it, 0 to start):
// crc32c(b, crc32c(a)) == crc32c(a + b). Uses the processor's CRC32C instruction where it has one
// (SSE4.2 on x86, the CRC extension on 64-bit Arm), else slicing-by-8 tables.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

// The CRC-32C of a + b from crc32c(a), crc32c(b) and the length of b: checksums of pieces read
// apart, in any order, joined in order.
std::uint32_t crc32c_combine(std::uint32_t first, std::uint32_t second, std::size_t second_length);

// The CRC-32C of pieces checksummed apart, joined in their stored order.
class Crc32cJoin {
 public:
  void append(std::uint32_t crc, std::size_t length) {
    crc_ = any_ ? crc32c_combine(crc_, crc, length) : crc;
    any_ = true;
  }
  [[nodiscard]] std::uint32_t value() const { return crc_; }

 private:
  std::uint32_t crc_ = 0;
  bool any_ = false;
};

// ChecksumError unless a stored crc32c is the one computed.
void check_crc32c(std::uint32_t stored, std::uint32_t computed);

namespace detail {
// The two implementations behind crc32c(), exposed so tests can check each against the other.
std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc);
// Only callable where crc32c_hardware_available() is true.
std::uint32_t crc32c_hardware(std::span<const std::byte> data, std::uint32_t crc);
bool crc32c_hardware_available();
}  // namespace detail

}  // namespace zarr_device::codecs
