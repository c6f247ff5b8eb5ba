// Helpers of the tests of the bytes->bytes codecs (test_compression_codecs.cpp,
// test_zstd_codec.cpp, test_blosc_codec.cpp, test_crc32c.cpp): codecs made by name, array-like
// data, and the ways a caller decodes (round trips, damage, truncation) that every codec must
// survive.
#pragma once

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <initializer_list>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "test_util.hpp"
#include "zarr_device/codec.hpp"

namespace zarr_device::test {

inline Bytes from_hex(std::string_view hex) {
  Bytes out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<std::byte>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

inline Buffer to_buffer(const Bytes& bytes) { return Buffer::copy_of(bytes); }

// Little-endian elements that rise slowly with a little noise: compressible, and much more so
// after shuffling, like real array data.
inline Bytes typed_data(std::size_t n, int typesize, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t element = i / typesize;
    const std::uint64_t value = element / 3 + (rng() % 4);
    const std::size_t byte = i % typesize;
    out[i] = byte < 8 ? static_cast<std::byte>(value >> (8 * byte)) : std::byte{0};
  }
  return out;
}

inline const DataType kUInt8{"uint8", DTypeClass::kUInt, 1, 1, std::nullopt};
inline const DataType kFloat32{"float32", DTypeClass::kFloat, 4, 4, std::nullopt};
inline const DataType kFloat64{"float64", DTypeClass::kFloat, 8, 8, std::nullopt};

inline CodecContext context_for(const DataType* dtype, int zarr_format = 3) {
  CodecContext context;
  context.chunk.shape = {16};
  context.chunk.dtype = dtype;
  context.zarr_format = zarr_format;
  return context;
}

inline std::shared_ptr<BytesToBytesCodec> make(std::string_view name,
                                               const json& configuration = json(),
                                               const CodecContext& context = context_for(&kUInt8)) {
  auto codec = std::dynamic_pointer_cast<BytesToBytesCodec>(
      CodecRegistry::instance().create(name, configuration, context));
  if (!codec) throw std::runtime_error(std::string(name) + " is not a bytes->bytes codec");
  return codec;
}

// Encodes, then decodes in every way a caller can: with and without the size, and into a span.
inline void expect_round_trip(const BytesToBytesCodec& codec, const Bytes& data) {
  SCOPED_TRACE(std::string(codec.name()) + " " + codec.to_json().dump() + ", " +
               std::to_string(data.size()) + " bytes");
  const Buffer encoded = codec.encode(to_buffer(data));
  EXPECT_EQ(to_bytes(codec.decode(encoded, data.size())), data);
  EXPECT_EQ(to_bytes(codec.decode(encoded, std::nullopt)), data);
  Bytes out(data.size(), std::byte{0x5A});
  codec.decode_into(encoded, out);
  EXPECT_EQ(out, data);
}

// Decodes `encoded` every way, expecting each to fail with CodecError (or a subclass).
inline void expect_decode_error(const BytesToBytesCodec& codec, const Bytes& encoded,
                                std::size_t decoded_size, const std::string& trace) {
  SCOPED_TRACE(std::string(codec.name()) + ": " + trace);
  const Buffer buffer = to_buffer(encoded);
  EXPECT_THROW((void)codec.decode(buffer, decoded_size), CodecError);
  EXPECT_THROW((void)codec.decode(buffer, std::nullopt), CodecError);
  Bytes out(decoded_size);
  EXPECT_THROW(codec.decode_into(buffer, out), CodecError);
}

// Every strict prefix of `encoded` must be rejected.
inline void expect_truncations_rejected(const BytesToBytesCodec& codec, const Bytes& encoded,
                                        std::size_t decoded_size, std::size_t step = 1) {
  for (std::size_t length = 0; length < encoded.size(); length += step) {
    expect_decode_error(codec, Bytes(encoded.begin(), encoded.begin() + length), decoded_size,
                        "truncated to " + std::to_string(length) + " of " +
                            std::to_string(encoded.size()) + " bytes");
  }
}

// A decode told any size but the stored one's (none, one short, one over, and any `more`) must
// fail: a sized decode never pads or cuts what it stored.
inline void expect_wrong_sizes_rejected(const BytesToBytesCodec& codec, const Bytes& encoded,
                                        std::size_t decoded_size,
                                        std::initializer_list<std::size_t> more = {}) {
  std::vector<std::size_t> wrong_sizes = {0, decoded_size - 1, decoded_size + 1};
  wrong_sizes.insert(wrong_sizes.end(), more);
  const Buffer buffer = to_buffer(encoded);
  for (const std::size_t wrong : wrong_sizes) {
    EXPECT_THROW((void)codec.decode(buffer, wrong), CodecError) << wrong;
    Bytes out(wrong);
    EXPECT_THROW(codec.decode_into(buffer, out), CodecError) << wrong;
  }
}

// Random damage: decoding must either fail with CodecError or succeed, never crash, hang or
// raise anything else (the sanitizers catch out-of-bounds access).
inline void fuzz_decode(const BytesToBytesCodec& codec, const Bytes& encoded,
                        std::size_t decoded_size, int iterations, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < iterations; ++i) {
    Bytes damaged = encoded;
    switch (rng() % 4) {
      case 0:  // flip a few bits
        for (int flips = 1 + rng() % 3; flips > 0 && !damaged.empty(); --flips) {
          damaged[rng() % damaged.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
        }
        break;
      case 1:  // overwrite a byte
        if (!damaged.empty()) damaged[rng() % damaged.size()] = static_cast<std::byte>(rng());
        break;
      case 2:  // truncate
        damaged.resize(rng() % (damaged.size() + 1));
        break;
      default:  // append garbage
        for (int extra = 1 + rng() % 16; extra > 0; --extra) {
          damaged.push_back(static_cast<std::byte>(rng()));
        }
    }
    const Buffer buffer = to_buffer(damaged);
    try {
      (void)codec.decode(buffer, decoded_size);
    } catch (const CodecError&) {
    }
    try {
      (void)codec.decode(buffer, std::nullopt);
    } catch (const CodecError&) {
    }
    try {
      Bytes out(decoded_size);
      codec.decode_into(buffer, out);
    } catch (const CodecError&) {
    }
  }
}

// Caps the address space while alive, so an allocation of gigabytes fails with OutOfMemoryError
// instead of quietly succeeding on an overcommitting system. The sanitizers reserve terabytes of
// address space up front, so there it does nothing (run those builds with
// ASAN_OPTIONS=max_allocation_size_mb=... for the same effect).
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(std::size_t headroom) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    if (!(statm >> pages) || getrlimit(RLIMIT_AS, &saved_) != 0) return;
    rlimit capped = saved_;
    const rlim_t cap = pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + headroom;
    if (saved_.rlim_cur != RLIM_INFINITY && saved_.rlim_cur <= cap) return;
    capped.rlim_cur = cap;
    active_ = setrlimit(RLIMIT_AS, &capped) == 0;
#endif
  }
  [[nodiscard]] bool active() const { return active_; }
  ~AddressSpaceCap() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit saved_{};
  bool active_ = false;
};

}  // namespace zarr_device::test
