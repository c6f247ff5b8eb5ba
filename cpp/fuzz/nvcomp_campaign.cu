// nvcomp_campaign: hostile frames against nvCOMP's batched decoders, each checked against the CPU
// decoder of the same format. It answers one question before any design trusts nvCOMP with bytes
// nobody has checked: on malformed input, does it fault the CUDA context, hang, write outside the
// output it was given, or report success with bytes the CPU decoder would not produce?
//
// Cases are made from valid frames (zstd with and without its content checksum, gzip, raw deflate
// as the zlib codec hands it on, raw LZ4 blocks as numcodecs' LZ4 hands them on) of data of
// several kinds and sizes, then damaged one way each: truncated, extended, bit flips, header
// bytes, random or zeroed spans, spliced frames, random bytes, sizes that lie (zstd's content size
// and block sizes, gzip's ISIZE, deflate's stored lengths, LZ4's literal lengths and offsets), and
// valid frames given too little output. Case `i` of seed `s` is always the same bytes, so any
// finding replays with `--first i --count 1`.
//
// Each output sits between guard pages filled with a pattern; a decode that changes a guard byte
// wrote outside what it was given. One line of JSON per case (its class: equal, both_reject,
// gpu_rejects_valid, caught_by_size (success, but not the size the metadata gives), lenient_same
// (success where the CPU rejects, with the original bytes), silent_wrong, wrong_bytes, bad_size,
// guard_overwrite). A sticky
// CUDA error after a batch prints a "fault" line and exits 2; a batch that does not finish within
// the watchdog prints a "hang" line and exits 3. scripts/fuzz_nvcomp.py drives it, bisects faulty
// batches and sums up (docs/architecture.md, "nvCOMP on malformed frames").
//
//   N=$(python3 -c 'import nvidia.libnvcomp, os;
//   print(os.path.dirname(nvidia.libnvcomp.__file__))')
//   nvcc -O2 -std=c++17 -arch=sm_90 -I$N/include cpp/fuzz/nvcomp_campaign.cu -L$N/lib64 \
//     -l:libnvcomp.so.6 -lzstd -lz -llz4 -Xlinker -rpath=$N/lib64 -o /tmp/nvcomp_campaign
//   /tmp/nvcomp_campaign --codec zstd --seed 1 --first 0 --count 1000 --batch 64
#include <cuda_runtime.h>
#include <lz4.h>
#include <nvcomp/deflate.h>
#include <nvcomp/gzip.h>
#include <nvcomp/lz4.h>
#include <nvcomp/zstd.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

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

[[noreturn]] void die(const std::string& what) {
  std::printf("{\"error\": \"%s\"}\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(4);
}

// What the batch being decoded holds ("mutation frame" of each case), for the fault line.
std::string g_batch_cases;

void check_cuda(cudaError_t e, const char* what, std::size_t first, std::size_t count) {
  if (e == cudaSuccess) return;
  std::printf("{\"fault\": \"%s: %s\", \"first\": %zu, \"count\": %zu, \"cases\": \"%s\"}\n", what,
              cudaGetErrorString(e), first, count, g_batch_cases.c_str());
  std::fflush(stdout);
  std::_Exit(2);
}

// ---- data and valid frames ------------------------------------------------------------------

Bytes make_data(int kind, std::size_t bytes, std::uint64_t seed) {
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

Bytes deflate_encode(const Bytes& in, int level, int window_bits) {
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

Bytes encode(Codec codec, const Bytes& in, int level, bool checksum) {
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

std::optional<Bytes> inflate_strict(const Bytes& in, std::size_t capacity, int window_bits) {
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
std::optional<Bytes> cpu_decode(Codec codec, const Bytes& in, std::size_t capacity) {
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

std::size_t pick(std::mt19937_64& rng, std::size_t n) { return n == 0 ? 0 : rng() % n; }

void random_bytes(std::mt19937_64& rng, std::uint8_t* at, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) at[i] = static_cast<std::uint8_t>(rng());
}

// zstd: the frame content size field, or a block header's size or type.
bool lie_zstd(std::mt19937_64& rng, Bytes& b) {
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
bool lie_gzip(std::mt19937_64& rng, Bytes& b) {
  if (b.size() < 18) return false;
  if (rng() % 2 == 0) {
    random_bytes(rng, &b[b.size() - 4], 4);
  } else {
    b[3] = static_cast<std::uint8_t>(rng() & 0x1F);  // FTEXT, FHCRC, FEXTRA, FNAME, FCOMMENT
  }
  return true;
}

// deflate: the first block made "stored" with a consistent but false LEN / NLEN.
bool lie_deflate(std::mt19937_64& rng, Bytes& b) {
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
bool lie_lz4(std::mt19937_64& rng, Bytes& b) {
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

const char* const kMutations[] = {"none",   "truncate",    "append",        "bitflip",
                                  "header", "span_random", "span_zero",     "garbage",
                                  "splice", "lie_size",    "small_capacity"};
constexpr std::size_t kMutationCount = sizeof(kMutations) / sizeof(kMutations[0]);

Case make_case(Codec codec, Pool& pool, std::uint64_t seed, std::size_t index) {
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

// ---- the GPU side ---------------------------------------------------------------------------

struct GpuResult {
  int status = 0;
  std::size_t size = 0;
  bool guards_intact = true;
  std::size_t past_end = 0;  // how far past its output the furthest changed guard byte lies
  Bytes bytes;
};

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// Ends the process with a "hang" line unless disarmed within `seconds`.
class Watchdog {
 public:
  Watchdog(double seconds, std::size_t first, std::size_t count)
      : thread_([this, seconds, first, count] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                            [this] { return done_; })) {
            std::printf("{\"hang\": %.1f, \"first\": %zu, \"count\": %zu, \"cases\": \"%s\"}\n",
                        seconds, first, count, g_batch_cases.c_str());
            std::fflush(stdout);
            std::_Exit(3);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

struct Decoder {
  Codec codec;
  bool temp_from_frames;  // zstd: size the temporary memory from the frames, as large reads do
  nvcompAlignmentRequirements_t align{8, 8, 8};
};

nvcompStatus_t temp_size(const Decoder& d, std::size_t n, std::size_t max_out, std::size_t total,
                         std::size_t* bytes) {
  switch (d.codec) {
    case Codec::kZstd:
      return nvcompBatchedZstdDecompressGetTempSize(
          n, max_out, nvcompBatchedZstdDecompressDefaultOpts, bytes, total, nullptr);
    case Codec::kGzip:
      return nvcompBatchedGzipDecompressGetTempSize(
          n, max_out, nvcompBatchedGzipDecompressDefaultOpts, bytes, total, nullptr);
    case Codec::kDeflate:
      return nvcompBatchedDeflateDecompressGetTempSize(
          n, max_out, nvcompBatchedDeflateDecompressDefaultOpts, bytes, total, nullptr);
    case Codec::kLz4:
      return nvcompBatchedLZ4DecompressGetTempSize(
          n, max_out, nvcompBatchedLZ4DecompressDefaultOpts, bytes, total, nullptr);
  }
  return nvcompErrorNotSupported;
}

nvcompStatus_t decompress(const Decoder& d, void* const* in, const std::size_t* in_sizes,
                          const std::size_t* caps, std::size_t* sizes, std::size_t n, void* temp,
                          std::size_t temp_bytes, void* const* out, nvcompStatus_t* statuses,
                          cudaStream_t s) {
  switch (d.codec) {
    case Codec::kZstd:
      return nvcompBatchedZstdDecompressAsync(in, in_sizes, caps, sizes, n, temp, temp_bytes, out,
                                              nvcompBatchedZstdDecompressDefaultOpts, statuses, s);
    case Codec::kGzip:
      return nvcompBatchedGzipDecompressAsync(in, in_sizes, caps, sizes, n, temp, temp_bytes, out,
                                              nvcompBatchedGzipDecompressDefaultOpts, statuses, s);
    case Codec::kDeflate:
      return nvcompBatchedDeflateDecompressAsync(in, in_sizes, caps, sizes, n, temp, temp_bytes,
                                                 out, nvcompBatchedDeflateDecompressDefaultOpts,
                                                 statuses, s);
    case Codec::kLz4:
      return nvcompBatchedLZ4DecompressAsync(in, in_sizes, caps, sizes, n, temp, temp_bytes, out,
                                             nvcompBatchedLZ4DecompressDefaultOpts, statuses, s);
  }
  return nvcompErrorNotSupported;
}

std::vector<GpuResult> decode_batch(const Decoder& d, const std::vector<Case>& cases,
                                    cudaStream_t stream, double watchdog_s) {
  const std::size_t n = cases.size();
  const std::size_t first = cases.front().index;
  std::vector<std::size_t> in_at(n), out_at(n), in_sizes(n), caps(n);
  std::size_t in_total = 0, out_total = 0, max_cap = 0, cap_total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    in_at[i] = in_total;
    in_sizes[i] = cases[i].input.size();
    in_total = align_up(in_total + in_sizes[i], std::max<std::size_t>(d.align.input, 8));
    caps[i] = cases[i].capacity;
    out_at[i] = out_total + kGuard;
    out_total = align_up(out_at[i] + caps[i] + kGuard, kGuard);
    max_cap = std::max(max_cap, caps[i]);
    cap_total += caps[i];
  }
  Bytes host_in(in_total, 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(&host_in[in_at[i]], cases[i].input.data(), in_sizes[i]);
  }
  std::uint8_t *dev_in = nullptr, *dev_out = nullptr;
  void** dev_ptrs = nullptr;
  std::size_t* dev_sizes = nullptr;
  nvcompStatus_t* dev_statuses = nullptr;
  check_cuda(cudaMalloc(&dev_in, in_total), "cudaMalloc", first, n);
  check_cuda(cudaMalloc(&dev_out, out_total), "cudaMalloc", first, n);
  check_cuda(cudaMalloc(&dev_ptrs, 2 * n * sizeof(void*)), "cudaMalloc", first, n);
  check_cuda(cudaMalloc(&dev_sizes, 3 * n * sizeof(std::size_t)), "cudaMalloc", first, n);
  check_cuda(cudaMalloc(&dev_statuses, n * sizeof(nvcompStatus_t)), "cudaMalloc", first, n);
  std::vector<void*> ptrs(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    ptrs[i] = dev_in + in_at[i];
    ptrs[n + i] = dev_out + out_at[i];
  }
  std::vector<std::size_t> sizes(3 * n, 0);
  std::copy(in_sizes.begin(), in_sizes.end(), sizes.begin());
  std::copy(caps.begin(), caps.end(), sizes.begin() + static_cast<std::ptrdiff_t>(n));
  check_cuda(cudaMemcpy(dev_in, host_in.data(), in_total, cudaMemcpyHostToDevice), "copy", first,
             n);
  check_cuda(cudaMemset(dev_out, kGuardByte, out_total), "memset", first, n);
  // The memset runs on the legacy stream, which the decoder's non-blocking stream does not wait
  // for.
  check_cuda(cudaDeviceSynchronize(), "memset", first, n);
  check_cuda(cudaMemcpy(dev_ptrs, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice),
             "copy", first, n);
  check_cuda(cudaMemcpy(dev_sizes, sizes.data(), sizes.size() * sizeof(std::size_t),
                        cudaMemcpyHostToDevice),
             "copy", first, n);

  std::size_t temp_bytes = 0;
  if (temp_size(d, n, max_cap, cap_total, &temp_bytes) != nvcompSuccess) die("temp size");
  if (d.temp_from_frames) {
    Watchdog dog(watchdog_s, first, n);
    std::size_t from_frames = 0;
    if (nvcompBatchedZstdDecompressGetTempSizeSync(
            dev_ptrs, dev_sizes, n, max_cap, &from_frames, cap_total,
            nvcompBatchedZstdDecompressDefaultOpts, dev_statuses, stream) == nvcompSuccess) {
      temp_bytes = from_frames;
    }
    check_cuda(cudaStreamSynchronize(stream), "temp size from frames", first, n);
  }
  void* temp = nullptr;
  check_cuda(cudaMalloc(&temp, std::max<std::size_t>(temp_bytes, 1)), "cudaMalloc temp", first, n);
  {
    Watchdog dog(watchdog_s, first, n);
    const nvcompStatus_t started =
        decompress(d, dev_ptrs, dev_sizes, dev_sizes + n, dev_sizes + 2 * n, n, temp, temp_bytes,
                   dev_ptrs + n, dev_statuses, stream);
    if (started != nvcompSuccess) die("decompress did not start: " + std::to_string(started));
    check_cuda(cudaStreamSynchronize(stream), "decompress", first, n);
    check_cuda(cudaGetLastError(), "decompress (last error)", first, n);
  }
  Bytes host_out(out_total);
  std::vector<nvcompStatus_t> statuses(n);
  check_cuda(cudaMemcpy(host_out.data(), dev_out, out_total, cudaMemcpyDeviceToHost), "copy back",
             first, n);
  check_cuda(cudaMemcpy(sizes.data(), dev_sizes, sizes.size() * sizeof(std::size_t),
                        cudaMemcpyDeviceToHost),
             "copy back", first, n);
  check_cuda(
      cudaMemcpy(statuses.data(), dev_statuses, n * sizeof(nvcompStatus_t), cudaMemcpyDeviceToHost),
      "copy back", first, n);
  cudaFree(temp);
  cudaFree(dev_statuses);
  cudaFree(dev_sizes);
  cudaFree(dev_ptrs);
  cudaFree(dev_out);
  cudaFree(dev_in);

  std::vector<GpuResult> results(n);
  for (std::size_t i = 0; i < n; ++i) {
    GpuResult& r = results[i];
    r.status = static_cast<int>(statuses[i]);
    r.size = sizes[2 * n + i];
    const std::uint8_t* lo = &host_out[out_at[i] - kGuard];
    const std::uint8_t* hi = &host_out[out_at[i] + caps[i]];
    const std::size_t hi_bytes = std::min(kGuard, out_total - (out_at[i] + caps[i]));
    r.guards_intact =
        std::all_of(lo, lo + kGuard, [](std::uint8_t c) { return c == kGuardByte; }) &&
        std::all_of(hi, hi + hi_bytes, [](std::uint8_t c) { return c == kGuardByte; });
    for (std::size_t k = hi_bytes; k > 0; --k) {
      if (hi[k - 1] != kGuardByte) {
        r.past_end = k;
        break;
      }
    }
    const std::size_t keep = std::min(r.size, caps[i]);
    r.bytes.assign(&host_out[out_at[i]], &host_out[out_at[i]] + keep);
  }
  return results;
}

const char* classify(const Case& c, const std::optional<Bytes>& cpu, const GpuResult& g) {
  if (!g.guards_intact) return "guard_overwrite";
  const bool gpu_ok = g.status == nvcompSuccess;
  if (gpu_ok && g.size > c.capacity) return "bad_size";
  // A read knows each chunk's decoded size from the array's metadata: a success of another size
  // is an error it reports, not a silent value.
  if (gpu_ok && g.size != c.capacity && (!cpu || cpu->size() == c.capacity))
    return "caught_by_size";
  if (gpu_ok && cpu) return g.size == cpu->size() && g.bytes == *cpu ? "equal" : "wrong_bytes";
  if (gpu_ok) return g.bytes == c.frame->original ? "lenient_same" : "silent_wrong";
  return cpu ? "gpu_rejects_valid" : "both_reject";
}

}  // namespace

int main(int argc, char** argv) {
  std::string codec_name = "zstd";
  std::uint64_t seed = 1;
  std::size_t first = 0, count = 1000, batch = 64;
  double watchdog_s = 20;
  bool temp_from_frames = false;
  bool cpu_only = false;  // the cases and the CPU's verdicts alone (checks the campaign itself)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--codec")
      codec_name = v;
    else if (k == "--seed")
      seed = std::stoull(v);
    else if (k == "--first")
      first = std::stoull(v);
    else if (k == "--count")
      count = std::stoull(v);
    else if (k == "--batch")
      batch = std::max<std::size_t>(1, std::stoull(v));
    else if (k == "--watchdog")
      watchdog_s = std::stod(v);
    else if (k == "--temp-from-frames")
      temp_from_frames = v == "1";
    else if (k == "--cpu-only")
      cpu_only = v == "1";
    else
      die("unknown argument " + k);
  }
  Codec codec;
  if (codec_name == "zstd")
    codec = Codec::kZstd;
  else if (codec_name == "gzip")
    codec = Codec::kGzip;
  else if (codec_name == "deflate")
    codec = Codec::kDeflate;
  else if (codec_name == "lz4")
    codec = Codec::kLz4;
  else
    die("unknown codec " + codec_name);

  Decoder d{codec, temp_from_frames && codec == Codec::kZstd};
  switch (codec) {
    case Codec::kZstd:
      nvcompBatchedZstdDecompressGetRequiredAlignments(nvcompBatchedZstdDecompressDefaultOpts,
                                                       &d.align);
      break;
    case Codec::kGzip:
      nvcompBatchedGzipDecompressGetRequiredAlignments(nvcompBatchedGzipDecompressDefaultOpts,
                                                       &d.align);
      break;
    case Codec::kDeflate:
      nvcompBatchedDeflateDecompressGetRequiredAlignments(nvcompBatchedDeflateDecompressDefaultOpts,
                                                          &d.align);
      break;
    case Codec::kLz4:
      nvcompBatchedLZ4DecompressGetRequiredAlignments(nvcompBatchedLZ4DecompressDefaultOpts,
                                                      &d.align);
      break;
  }
  Pool pool(codec);
  if (cpu_only) {
    for (std::size_t i = first; i < first + count; ++i) {
      const Case c = make_case(codec, pool, seed, i);
      const std::optional<Bytes> cpu = cpu_decode(codec, c.input, c.capacity);
      const bool same = cpu && *cpu == c.frame->original;
      std::printf(
          "{\"i\": %zu, \"mutation\": \"%s\", \"frame\": \"%s\", \"cpu\": %s, "
          "\"same\": %s}\n",
          i, c.mutation.c_str(), c.frame->label.c_str(), cpu ? "true" : "false",
          same ? "true" : "false");
    }
    return 0;
  }
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream", first, count);

  for (std::size_t at = first; at < first + count; at += batch) {
    std::vector<Case> cases;
    for (std::size_t i = at; i < std::min(first + count, at + batch); ++i) {
      cases.push_back(make_case(codec, pool, seed, i));
    }
    g_batch_cases.clear();
    for (const Case& c : cases) {
      g_batch_cases += (g_batch_cases.empty() ? "" : ", ") + c.mutation + " " + c.frame->label;
    }
    const std::vector<GpuResult> results = decode_batch(d, cases, stream, watchdog_s);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const std::optional<Bytes> cpu = cpu_decode(codec, c.input, c.capacity);
      std::printf(
          "{\"i\": %zu, \"codec\": \"%s\", \"mutation\": \"%s\", \"frame\": \"%s\", \"in\": %zu, "
          "\"cap\": %zu, \"cpu\": %s, \"status\": %d, \"size\": %zu, \"past_end\": %zu, "
          "\"class\": \"%s\"}\n",
          c.index, codec_name.c_str(), c.mutation.c_str(), c.frame->label.c_str(), c.input.size(),
          c.capacity, cpu ? "true" : "false", results[i].status, results[i].size,
          results[i].past_end, classify(c, cpu, results[i]));
    }
    std::fflush(stdout);
  }
  return 0;
}
