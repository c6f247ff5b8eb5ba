#include "codecs/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define ZARR_DEVICE_CRC32C_X86 1
#endif

namespace zarr_device::codecs {
namespace {

constexpr std::uint32_t kPolynomial = 0x82F63B78;  // Castagnoli, bit-reversed

// Table k maps a byte to its CRC contribution when followed by k zero bytes, so eight bytes can
// be folded in with eight independent lookups (slicing-by-8). Built at compile time: this file
// is compiled with -msse4.2, and code that runs on processors without it must stay trivial.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> tables{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    tables[0][i] = c;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t i = 0; i < 256; ++i) {
      const std::uint32_t prev = tables[k - 1][i];
      tables[k][i] = (prev >> 8) ^ tables[0][prev & 0xFF];
    }
  }
  return tables;
}

constexpr auto kTables = make_tables();

std::uint32_t load_le32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

}  // namespace

namespace detail {

std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc) {
  std::uint32_t c = ~crc;
  const std::byte* p = data.data();
  std::size_t n = data.size();
  for (; n >= 8; p += 8, n -= 8) {
    const std::uint32_t lo = load_le32(p) ^ c;
    const std::uint32_t hi = load_le32(p + 4);
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) {
    c = (c >> 8) ^ kTables[0][(c ^ static_cast<std::uint32_t>(*p)) & 0xFF];
  }
  return ~c;
}

#if defined(ZARR_DEVICE_CRC32C_X86)

// The target attribute (rather than relying on the file's -msse4.2 alone) keeps this compiling
// in builds that do not pass the flag.
__attribute__((target("sse4.2"))) std::uint32_t crc32c_hardware(std::span<const std::byte> data,
                                                                std::uint32_t crc) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
#if defined(__x86_64__)
  std::uint64_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);  // x86 is little endian, as CRC-32C's bit order requires
    c = _mm_crc32_u64(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
#else
  std::uint32_t c32 = ~crc;
  for (; n >= 4; p += 4, n -= 4) {
    std::uint32_t word;
    std::memcpy(&word, p, 4);
    c32 = _mm_crc32_u32(c32, word);
  }
#endif
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, static_cast<unsigned char>(*p));
  return ~c32;
}

bool crc32c_hardware_available() {
  static const bool available = [] {
    __builtin_cpu_init();  // needed when first called from a static initialiser
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
}

#else

std::uint32_t crc32c_hardware(std::span<const std::byte> data, std::uint32_t crc) {
  return crc32c_portable(data, crc);
}

bool crc32c_hardware_available() { return false; }

#endif

}  // namespace detail

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
  return detail::crc32c_hardware_available() ? detail::crc32c_hardware(data, crc)
                                             : detail::crc32c_portable(data, crc);
}

}  // namespace zarr_device::codecs
