#include "codecs/crc32c.hpp"

#include <array>
#include <cstdio>
#include <cstring>

#include "zarr_device/errors.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define ZARR_DEVICE_CRC32C_X86 1
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
// CMakeLists.txt compiles this file with -march=armv8-a+crc: clang's <arm_acle.h> declares the
// CRC intrinsics only where that feature macro is defined. A build without the flag keeps the
// table. Little endian only: the 8-byte step reads a word whose low byte is the first.
#include <arm_acle.h>
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1UL << 7)  // Linux's aarch64 bit, for C libraries that do not name it
#endif
#endif
#define ZARR_DEVICE_CRC32C_ARM 1
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

// a * b modulo the polynomial, both in CRC-32C's reflected bit order (x^0 is the top bit).
std::uint32_t multiply_mod_p(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t bit = 1U << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(8n) modulo the polynomial: running a CRC register over n zero bytes multiplies it by this.
std::uint32_t x_to_the_8n(std::size_t n) {
  std::uint32_t result = 1U << 31;  // x^0
  std::uint32_t square = 1U << 23;  // x^8, squared for each bit of n
  for (; n != 0; n >>= 1) {
    if (n & 1) result = multiply_mod_p(square, result);
    square = multiply_mod_p(square, square);
  }
  return result;
}

// Runs a CRC register over a fixed number of zero bytes with four table lookups: the operation
// is linear, so it is the sum of its effect on each byte of the register.
class ZeroBytes {
 public:
  explicit ZeroBytes(std::size_t n) {
    const std::uint32_t factor = x_to_the_8n(n);
    for (std::uint32_t k = 0; k < 4; ++k) {
      for (std::uint32_t i = 0; i < 256; ++i) table_[k][i] = multiply_mod_p(factor, i << (8 * k));
    }
  }
  [[nodiscard]] std::uint32_t operator()(std::uint32_t c) const {
    return table_[0][c & 0xFF] ^ table_[1][(c >> 8) & 0xFF] ^ table_[2][(c >> 16) & 0xFF] ^
           table_[3][c >> 24];
  }

 private:
  std::array<std::array<std::uint32_t, 256>, 4> table_{};
};

std::uint32_t load_le32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

}  // namespace

std::uint32_t crc32c_combine(std::uint32_t first, std::uint32_t second, std::size_t second_length) {
  // The register (before its final inversion) is linear in the data: running it over b from a's
  // register is running it over b's zero bytes from there, plus b's register from zero. The
  // inversions at both ends cancel out the same way.
  return multiply_mod_p(x_to_the_8n(second_length), first) ^ second;
}

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

#if defined(ZARR_DEVICE_CRC32C_X86) || defined(ZARR_DEVICE_CRC32C_ARM)

#if defined(ZARR_DEVICE_CRC32C_X86)
// The target attribute (rather than relying on the file's -msse4.2 alone) keeps this compiling
// in builds that do not pass the flag.
#define ZARR_DEVICE_CRC32C_TARGET __attribute__((target("sse4.2")))
#else
#define ZARR_DEVICE_CRC32C_TARGET
#endif

// One byte through the CRC instruction.
ZARR_DEVICE_CRC32C_TARGET inline std::uint32_t crc_byte(std::uint32_t c, std::byte b) {
#if defined(ZARR_DEVICE_CRC32C_X86)
  return _mm_crc32_u8(c, static_cast<unsigned char>(b));
#else
  return __crc32cb(c, static_cast<std::uint8_t>(b));
#endif
}

#if defined(__x86_64__) || defined(ZARR_DEVICE_CRC32C_ARM)
// Eight bytes through the CRC instruction. Both processors are little endian here, as CRC-32C's
// bit order requires of the word. The register is held in 64 bits, as x86's instruction takes
// and returns it: narrowing it between steps would add a move to each step's latency.
ZARR_DEVICE_CRC32C_TARGET inline std::uint64_t crc_word(std::uint64_t c, const std::byte* p) {
  std::uint64_t word;
  std::memcpy(&word, p, 8);
#if defined(ZARR_DEVICE_CRC32C_X86)
  return _mm_crc32_u64(c, word);
#else
  return __crc32cd(static_cast<std::uint32_t>(c), word);
#endif
}

// The crc32 instruction takes three cycles and can start every cycle (x86-64 and most Arm
// cores alike), so three independent streams (three lanes of a block, each from its own
// register) run three times as fast as one. The register is linear in its input: the block's
// CRC is the first lane's register moved past the other two lanes' lengths of zero bytes, plus
// theirs.
template <std::size_t Lane>
ZARR_DEVICE_CRC32C_TARGET void crc32c_three_lanes(const std::byte*& p, std::size_t& n,
                                                  std::uint64_t& c) {
  static const ZeroBytes skip(Lane);
  for (; n >= 3 * Lane; p += 3 * Lane, n -= 3 * Lane) {
    std::uint64_t a = c;
    std::uint64_t b = 0;
    std::uint64_t d = 0;
    for (std::size_t i = 0; i < Lane; i += 8) {
      a = crc_word(a, p + i);
      b = crc_word(b, p + Lane + i);
      d = crc_word(d, p + 2 * Lane + i);
    }
    c = skip(skip(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b)) ^
        static_cast<std::uint32_t>(d);
  }
}
#endif

ZARR_DEVICE_CRC32C_TARGET std::uint32_t crc32c_hardware(std::span<const std::byte> data,
                                                        std::uint32_t crc) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
#if defined(__x86_64__) || defined(ZARR_DEVICE_CRC32C_ARM)
  std::uint64_t c64 = ~crc;
  // Blocks from large (the two skips spread over 24 KiB) to small, so that buffers from 1 KiB up
  // run three streams nearly to their end: with only 24 KiB and 1.5 KiB blocks, a 4 KiB buffer
  // ran a quarter of itself in one stream, slower than google/crc32c (the benchmark notebook,
  // "CRC-32C: ours against google/crc32c (2-core machine)").
  crc32c_three_lanes<8192>(p, n, c64);
  crc32c_three_lanes<1344>(p, n, c64);
  crc32c_three_lanes<320>(p, n, c64);
  for (; n >= 8; p += 8, n -= 8) c64 = crc_word(c64, p);
  auto c = static_cast<std::uint32_t>(c64);
#else
  std::uint32_t c = ~crc;
  for (; n >= 4; p += 4, n -= 4) {
    std::uint32_t word;
    std::memcpy(&word, p, 4);
    c = _mm_crc32_u32(c, word);
  }
#endif
  for (; n > 0; ++p, --n) c = crc_byte(c, *p);
  return ~c;
}

#if defined(ZARR_DEVICE_CRC32C_X86)
bool crc32c_hardware_available() {
  static const bool available = [] {
    __builtin_cpu_init();  // needed when first called from a static initialiser
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return available;
}
#else
bool crc32c_hardware_available() {
#if defined(__linux__)
  static const bool available = (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
  return available;
#elif defined(__APPLE__)
  return true;  // every Apple arm64 processor has the CRC32 instructions
#else
  return false;  // no portable way to ask: the table
#endif
}
#endif

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

void check_crc32c(std::uint32_t stored, std::uint32_t computed) {
  if (computed != stored) {
    char text[64];
    std::snprintf(text, sizeof text, "crc32c mismatch: stored %08x, computed %08x", stored,
                  computed);
    throw ChecksumError(text);
  }
}

}  // namespace zarr_device::codecs
