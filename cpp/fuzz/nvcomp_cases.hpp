// The cases of the nvCOMP campaign (nvcomp_campaign.cu): valid frames of each format, the damage
// done to them, and what the CPU decoder of the format makes of the result. Host code only; case
// `i` of seed `s` is always the same bytes.
#pragma once

#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace nvcomp_campaign {

using Bytes = std::vector<std::uint8_t>;
constexpr std::size_t kGuard = 4096;
constexpr std::uint8_t kGuardByte = 0xA5;

enum class Codec { kZstd, kGzip, kDeflate, kLz4 };

struct Frame {
  Bytes original;
  Bytes encoded;
  std::string label;
};

struct Case {
  std::size_t index = 0;
  const Frame* frame = nullptr;
  std::string mutation;
  Bytes input;
  std::size_t capacity = 0;  // the output the decoder is given (the chunk's size, as a read has)
};

[[noreturn]] inline void die(const std::string& what) {
  std::printf("{\"error\": \"%s\"}\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(4);
}

// ---- data and valid frames ------------------------------------------------------------------

inline Bytes make_data(int kind, std::size_t bytes, std::uint64_t seed) {
  Bytes v(bytes);
  std::mt19937_64 rng(seed);
  switch (kind) {
    case 0:  // zeros
      break;
    case 1: {  // words
      const char* words[] = {"zarr ", "chunk ", "shard ", "tensor ", "the ", "of ", "device "};
      std::size_t at = 0;
      while (at < bytes) {
        for (const char* c = words[rng() % 7]; *c && at < bytes; ++c) v[at++] = *c;
      }
      break;
    }
    case 2: {  // bf16 weights
      std::normal_distribution<float> normal(0.0F, 0.02F);
      for (std::size_t i = 0; i + 1 < bytes; i += 2) {
        const float f = normal(rng);
        std::uint32_t b = 0;
        std::memcpy(&b, &f, 4);
        const auto h = static_cast<std::uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
        std::memcpy(&v[i], &h, 2);
      }
      break;
    }
    case 3:  // random bytes
      for (auto& c : v) c = static_cast<std::uint8_t>(rng());
      break;
    case 4:  // float32 ramp
      for (std::size_t i = 0; i + 3 < bytes; i += 4) {
        const float f = static_cast<float>(i / 4) * 0.001F;
        std::memcpy(&v[i], &f, 4);
      }
      break;
    default:  // small int32
      for (std::size_t i = 0; i + 3 < bytes; i += 4) {
        const auto x = static_cast<std::int32_t>(rng() % 100);
        std::memcpy(&v[i], &x, 4);
      }
      break;
  }
  return v;
}

inline Bytes deflate_encode(const Bytes& in, int level, int window_bits) {
  z_stream s{};
  if (deflateInit2(&s, level, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    die("deflateInit2");
  }
  Bytes out(deflateBound(&s, in.size()) + 64);
  s.next_in = const_cast<Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  if (deflate(&s, Z_FINISH) != Z_STREAM_END) die("deflate");
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

inline Bytes encode(Codec codec, const Bytes& in, int level, bool checksum) {
  switch (codec) {
    case Codec::kZstd: {
      ZSTD_CCtx* c = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
      ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum ? 1 : 0);
      Bytes out(ZSTD_compressBound(in.size()));
      const std::size_t n = ZSTD_compress2(c, out.data(), out.size(), in.data(), in.size());
      ZSTD_freeCCtx(c);
      if (ZSTD_isError(n)) die("zstd compress");
      out.resize(n);
      return out;
    }
    case Codec::kGzip:
      return deflate_encode(in, level, 15 + 16);
    case Codec::kDeflate:
      return deflate_encode(in, level, -15);
    case Codec::kLz4: {
      Bytes out(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(in.size()))));
      const int n = LZ4_compress_fast(
          reinterpret_cast<const char*>(in.data()), reinterpret_cast<char*>(out.data()),
          static_cast<int>(in.size()), static_cast<int>(out.size()), std::max(1, 10 - level));
      if (n <= 0) die("lz4 compress");
      out.resize(static_cast<std::size_t>(n));
      return out;
    }
  }
  return {};
}

// The valid frames cases are made from, each encoded on first use (a child that decodes a few
// cases after a fault should not encode them all).
class Pool {
 public:
  explicit Pool(Codec codec) : codec_(codec) {
    for (int kind = 0; kind < 6; ++kind) {
      for (std::size_t size : {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{256} << 10,
                               std::size_t{1} << 20}) {
        for (int level : {1, 5, 9}) {
          for (int checksum = 0; checksum < (codec == Codec::kZstd ? 2 : 1); ++checksum) {
            specs_.push_back({kind, size, level, checksum != 0});
          }
        }
      }
    }
    frames_.resize(specs_.size());
  }
  [[nodiscard]] std::size_t size() const { return specs_.size(); }
  const Frame& operator[](std::size_t i) {
    if (!frames_[i]) {
      static const char* const kKinds[] = {"zeros", "words", "bf16", "random", "ramp", "int32"};
      const Spec& s = specs_[i];
      Frame f;
      f.original = make_data(s.kind, s.size, 1000 * s.kind + s.size + s.level);
      f.encoded = encode(codec_, f.original, s.level, s.checksum);
      f.label = std::string(kKinds[s.kind]) + "-" + std::to_string(s.size >> 10) + "K-l" +
                std::to_string(s.level) + (s.checksum ? "-checksum" : "");
      frames_[i] = std::move(f);
    }
    return *frames_[i];
  }

 private:
  struct Spec {
    int kind;
    std::size_t size;
    int level;
    bool checksum;
  };
  Codec codec_;
  std::vector<Spec> specs_;
  std::vector<std::optional<Frame>> frames_;
};

// ---- CPU reference --------------------------------------------------------------------------

inline std::optional<Bytes> inflate_strict(const Bytes& in, std::size_t capacity, int window_bits) {
  z_stream s{};
  if (inflateInit2(&s, window_bits) != Z_OK) die("inflateInit2");
  Bytes out(capacity);
  s.next_in = const_cast<Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  const int r = inflate(&s, Z_FINISH);
  const bool ok = r == Z_STREAM_END && s.avail_in == 0;
  out.resize(s.total_out);
  inflateEnd(&s);
  if (!ok) return std::nullopt;
  return out;
}

// What the CPU decoder of the format makes of the input, given `capacity` bytes of output; none
// where it rejects it. Strict: one whole stream, nothing after it.
inline std::optional<Bytes> cpu_decode(Codec codec, const Bytes& in, std::size_t capacity) {
  switch (codec) {
    case Codec::kZstd: {
      Bytes out(capacity);
      const std::size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
      if (ZSTD_isError(n)) return std::nullopt;
      out.resize(n);
      return out;
    }
    case Codec::kGzip:
      return inflate_strict(in, capacity, 15 + 16);
    case Codec::kDeflate:
      return inflate_strict(in, capacity, -15);
    case Codec::kLz4: {
      Bytes out(capacity);
      const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data()),
                                        reinterpret_cast<char*>(out.data()),
                                        static_cast<int>(in.size()), static_cast<int>(capacity));
      if (n < 0) return std::nullopt;
      out.resize(static_cast<std::size_t>(n));
      return out;
    }
  }
  return std::nullopt;
}

// ---- damage ---------------------------------------------------------------------------------

inline std::size_t pick(std::mt19937_64& rng, std::size_t n) { return n == 0 ? 0 : rng() % n; }

inline void random_bytes(std::mt19937_64& rng, std::uint8_t* at, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) at[i] = static_cast<std::uint8_t>(rng());
}

// zstd: the frame content size field, or a block header's size or type.
inline bool lie_zstd(std::mt19937_64& rng, Bytes& b) {
  if (b.size() < 6) return false;
  const std::uint8_t fhd = b[4];
  const bool single = (fhd >> 5) & 1;
  const std::size_t did = std::size_t{0x04020100} >> (8 * (fhd & 3)) & 0xFF;
  const std::size_t fcs_flag = fhd >> 6;
  const std::size_t fcs = fcs_flag == 0 ? (single ? 1 : 0) : std::size_t{1} << fcs_flag;
  const std::size_t fcs_at = 5 + (single ? 0 : 1) + did;
  std::size_t block = fcs_at + fcs;
  if (fcs > 0 && fcs_at + fcs <= b.size() && rng() % 2 == 0) {
    random_bytes(rng, &b[fcs_at], fcs);
    return true;
  }
  std::vector<std::size_t> headers;
  while (block + 3 <= b.size()) {
    headers.push_back(block);
    const std::uint32_t h = b[block] | (b[block + 1] << 8) | (b[block + 2] << 16);
    const std::uint32_t type = (h >> 1) & 3;
    const std::uint32_t size = h >> 3;
    if (h & 1) break;
    block += 3 + (type == 1 ? 1 : size);
  }
  if (headers.empty()) return false;
  const std::size_t at = headers[pick(rng, headers.size())];
  std::uint32_t h = b[at] | (b[at + 1] << 8) | (b[at + 2] << 16);
  switch (rng() % 3) {
    case 0:  // another size
      h = (h & 7) | static_cast<std::uint32_t>((rng() % (1u << 21)) << 3);
      break;
    case 1:  // the reserved type
      h |= 6;
      break;
    default:  // RLE of a random length
      h = (h & 1) | (1u << 1) | static_cast<std::uint32_t>((rng() % (1u << 21)) << 3);
      break;
  }
  b[at] = h & 0xFF;
  b[at + 1] = (h >> 8) & 0xFF;
  b[at + 2] = (h >> 16) & 0xFF;
  return true;
}

// gzip: ISIZE, or flags announcing fields that are not there.
inline bool lie_gzip(std::mt19937_64& rng, Bytes& b) {
  if (b.size() < 18) return false;
  if (rng() % 2 == 0) {
    random_bytes(rng, &b[b.size() - 4], 4);
  } else {
    b[3] = static_cast<std::uint8_t>(rng() & 0x1F);  // FTEXT, FHCRC, FEXTRA, FNAME, FCOMMENT
  }
  return true;
}

// deflate: the first block made "stored" with a consistent but false LEN / NLEN.
inline bool lie_deflate(std::mt19937_64& rng, Bytes& b) {
  if (b.size() < 5) return false;
  b[0] = static_cast<std::uint8_t>(b[0] & ~6u);
  const auto len = static_cast<std::uint16_t>(rng());
  b[1] = len & 0xFF;
  b[2] = len >> 8;
  b[3] = static_cast<std::uint8_t>(~len & 0xFF);
  b[4] = static_cast<std::uint8_t>(~len >> 8);
  return true;
}

// LZ4: one sequence's literal length or match offset.
inline bool lie_lz4(std::mt19937_64& rng, Bytes& b) {
  std::vector<std::size_t> tokens, offsets;
  std::size_t at = 0;
  while (at < b.size()) {
    tokens.push_back(at);
    const std::uint8_t token = b[at++];
    std::size_t literals = token >> 4;
    if (literals == 15) {
      while (at < b.size() && b[at] == 255) literals += b[at++];
      if (at < b.size()) literals += b[at++];
    }
    at += literals;
    if (at + 2 > b.size()) break;
    offsets.push_back(at);
    at += 2;
    if ((token & 15) == 15) {
      while (at < b.size() && b[at] == 255) ++at;
      ++at;
    }
  }
  if (!offsets.empty() && rng() % 2 == 0) {
    const std::size_t o = offsets[pick(rng, offsets.size())];
    const std::uint16_t offset = rng() % 3 == 0 ? 0 : static_cast<std::uint16_t>(rng());
    b[o] = offset & 0xFF;
    b[o + 1] = offset >> 8;
    return true;
  }
  if (tokens.empty()) return false;
  const std::size_t t = tokens[pick(rng, tokens.size())];
  b[t] = static_cast<std::uint8_t>(b[t] | 0xF0);
  if (t + 1 < b.size()) b[t + 1] = 255;
  return true;
}

inline const char* const kMutations[] = {"none",   "truncate",    "append",        "bitflip",
                                         "header", "span_random", "span_zero",     "garbage",
                                         "splice", "lie_size",    "small_capacity"};
constexpr std::size_t kMutationCount = sizeof(kMutations) / sizeof(kMutations[0]);

inline Case make_case(Codec codec, Pool& pool, std::uint64_t seed, std::size_t index) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + index * 0xBF58476D1CE4E5B9ULL + 1);
  Case c;
  c.index = index;
  c.frame = &pool[pick(rng, pool.size())];
  c.capacity = c.frame->original.size();
  Bytes b = c.frame->encoded;
  std::size_t m = pick(rng, kMutationCount);
  switch (m) {
    case 0:
      break;
    case 1:
      b.resize(pick(rng, b.size()));
      break;
    case 2: {
      const std::size_t n = 1 + pick(rng, 64);
      b.resize(b.size() + n);
      random_bytes(rng, &b[b.size() - n], n);
      break;
    }
    case 3:
      for (std::size_t k = 1 + pick(rng, 8); k > 0; --k) {
        const std::size_t bit = pick(rng, b.size() * 8);
        b[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      }
      break;
    case 4:
      for (std::size_t k = 1 + pick(rng, 4); k > 0; --k) {
        b[pick(rng, std::min<std::size_t>(b.size(), 32))] = static_cast<std::uint8_t>(rng());
      }
      break;
    case 5:
    case 6: {
      const std::size_t at = pick(rng, b.size());
      const std::size_t n = std::min(b.size() - at, 1 + pick(rng, 256));
      if (m == 5) {
        random_bytes(rng, &b[at], n);
      } else {
        std::memset(&b[at], 0, n);
      }
      break;
    }
    case 7:
      b.resize(1 + pick(rng, 4096));
      random_bytes(rng, b.data(), b.size());
      break;
    case 8: {
      const Frame& other = pool[pick(rng, pool.size())];
      const std::size_t cut = pick(rng, b.size());
      const std::size_t from = pick(rng, other.encoded.size());
      b.resize(cut);
      b.insert(b.end(), other.encoded.begin() + static_cast<std::ptrdiff_t>(from),
               other.encoded.end());
      break;
    }
    case 9: {
      bool lied = false;
      switch (codec) {
        case Codec::kZstd:
          lied = lie_zstd(rng, b);
          break;
        case Codec::kGzip:
          lied = lie_gzip(rng, b);
          break;
        case Codec::kDeflate:
          lied = lie_deflate(rng, b);
          break;
        case Codec::kLz4:
          lied = lie_lz4(rng, b);
          break;
      }
      if (!lied) m = 0;
      break;
    }
    default:  // a valid frame that decodes to more than the output given
      c.capacity = rng() % 2 == 0 ? c.capacity / 2 : c.capacity - 1;
      break;
  }
  if (b.empty()) b.push_back(0);  // nvCOMP is given at least one byte, as a read gives it
  c.mutation = kMutations[m];
  c.input = std::move(b);
  return c;
}

}  // namespace nvcomp_campaign
