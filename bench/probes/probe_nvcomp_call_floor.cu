// What makes one call of nvCOMP's batched zstd decoder take about 8 ms on an H200 however few
// chunks it holds (BENCHMARKS.md, "Where waiting reads ... spend their time"): a call's time by
// chunk size and count, by the data (bf16 weights, whose blocks are mostly Huffman-coded
// literals; the same with literals left raw; text-like data with matches; zeros; random bytes),
// and with each optional output left out (statuses, decoded sizes) or the temporary memory sized
// from the frames. Events around each call on an otherwise idle stream, best of 5, output checked.
// Measured once to decide what a read that waits for its decodes can do; not part of the build.
//
//   N=$(python3 -c 'import nvidia.libnvcomp, os; print(os.path.dirname(nvidia.libnvcomp.__file__))')
//   nvcc -O2 -std=c++17 -arch=sm_90 -I$N/include bench/probes/probe_nvcomp_call_floor.cu \
//     -L$N/lib64 -l:libnvcomp.so.6 -lzstd -Xlinker -rpath=$N/lib64 -o /tmp/probe_floor
//   /tmp/probe_floor
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode
#include <cuda_runtime.h>
#include <nvcomp/zstd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "probe_checks.hpp"

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = kKiB * kKiB;

enum class Data { kWeights, kWeightsRawLiterals, kWeights32K, kWeights16K, kWeights8K, kText, kZeros, kRandom };

// The input bytes each zstd block covers at most (blocks ended by a flush): 0 for libzstd's own
// (128 KiB).
static std::size_t block_of(Data d) {
  switch (d) {
    case Data::kWeights32K: return 32 * 1024;
    case Data::kWeights16K: return 16 * 1024;
    case Data::kWeights8K: return 8 * 1024;
    default: return 0;
  }
}

static const char* name_of(Data d) {
  switch (d) {
    case Data::kWeights: return "bf16 weights";
    case Data::kWeightsRawLiterals: return "bf16, raw literals";
    case Data::kWeights32K: return "bf16, 32 KiB blocks";
    case Data::kWeights16K: return "bf16, 16 KiB blocks";
    case Data::kWeights8K: return "bf16, 8 KiB blocks";
    case Data::kText: return "text-like";
    case Data::kZeros: return "zeros";
    case Data::kRandom: return "random bytes";
  }
  return "";
}

static std::vector<std::uint8_t> make_data(Data d, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  std::mt19937_64 rng(7);
  if (d == Data::kWeights || d == Data::kWeightsRawLiterals || block_of(d) != 0) {
    std::normal_distribution<float> normal(0.0F, 0.02F);
    for (std::size_t i = 0; i + 1 < n; i += 2) {
      const float f = normal(rng);
      std::uint32_t bits = 0;
      std::memcpy(&bits, &f, 4);
      const auto v = static_cast<std::uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
      std::memcpy(&out[i], &v, 2);
    }
  } else if (d == Data::kText) {
    // Words drawn from a small vocabulary: matches and literals both.
    static const char* words[] = {"zarr ", "chunk ", "shard ", "device ", "array ", "stream ",
                                  "decode ", "tensor ", "weights ", "memory ", "the ", "of "};
    std::size_t at = 0;
    while (at < n) {
      const char* w = words[rng() % 12];
      for (const char* c = w; *c && at < n; ++c) out[at++] = static_cast<std::uint8_t>(*c);
    }
  } else if (d == Data::kRandom) {
    for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  }
  return out;
}

// One frame (level 1, content size in its header); `block` > 0: a block ended (flushed) after
// every `block` bytes of input, so that no block covers more.
static std::vector<std::uint8_t> compress(const std::uint8_t* src, std::size_t n, bool raw_literals,
                                          std::size_t block) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  if (raw_literals) ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
  ZSTD_CCtx_setPledgedSrcSize(cctx, n);
  std::vector<std::uint8_t> out(ZSTD_compressBound(n) + n / 1024 + 64);
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  const std::size_t step = block ? block : n;
  for (std::size_t at = 0; at < n; at += step) {
    const std::size_t len = std::min(step, n - at);
    ZSTD_inBuffer i{src + at, len, 0};
    const bool last = at + len == n;
    std::size_t left = 0;
    do {
      left = ZSTD_compressStream2(cctx, &o, &i, last ? ZSTD_e_end : ZSTD_e_flush);
      if (ZSTD_isError(left)) {
        std::printf("compress: %s\n", ZSTD_getErrorName(left));
        std::exit(1);
      }
    } while (left != 0 || i.pos < i.size);
  }
  ZSTD_freeCCtx(cctx);
  out.resize(o.pos);
  return out;
}

struct Variant {
  const char* name;
  bool statuses = true;
  bool sizes = true;
  bool sync_temp = false;
  int calls = 1;  // calls queued back to back, timed together
};

int main() {
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const auto opts = nvcompBatchedZstdDecompressDefaultOpts;
  // (nvCOMP 6 refuses calls without statuses or decoded sizes: measured, left out.)
  const Variant variants[] = {{"default"},
                              {"temp from frames", true, true, true},
                              {"2 calls, per call", true, true, false, 2}};
  std::printf("%-20s %9s %6s %7s |", "data", "chunk", "chunks", "stored");
  for (const auto& v : variants) std::printf(" %18s", v.name);
  std::printf("   (ms per call, best of 5)\n");
  for (const Data data : {Data::kWeights, Data::kWeights32K, Data::kWeights16K, Data::kWeights8K,
                          Data::kWeightsRawLiterals, Data::kText, Data::kZeros, Data::kRandom}) {
    for (const std::size_t chunk : {64 * kKiB, 256 * kKiB, 2 * kMiB, 8 * kMiB}) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{32}}) {
        if (data != Data::kWeights && block_of(data) == 0 && n != 32) continue;
        const auto raw = make_data(data, chunk * n);
        std::vector<std::vector<std::uint8_t>> frames(n);
        std::size_t stored = 0;
        for (std::size_t i = 0; i < n; ++i) {
          frames[i] = compress(raw.data() + i * chunk, chunk, data == Data::kWeightsRawLiterals,
                               block_of(data));
          stored += frames[i].size();
        }
        // Device copies of the frames (256-byte aligned), outputs and arrays.
        std::vector<std::size_t> offsets(n);
        std::size_t at = 0;
        for (std::size_t i = 0; i < n; ++i) {
          offsets[i] = at;
          at += (frames[i].size() + 255) / 256 * 256;
        }
        std::uint8_t *d_in = nullptr, *d_out = nullptr;
        CK(cudaMalloc(&d_in, at));
        CK(cudaMalloc(&d_out, chunk * n));
        for (std::size_t i = 0; i < n; ++i) {
          CK(cudaMemcpy(d_in + offsets[i], frames[i].data(), frames[i].size(), cudaMemcpyHostToDevice));
        }
        std::vector<const void*> ins(n);
        std::vector<void*> outs(n);
        std::vector<std::size_t> in_bytes(n), capacity(n, chunk);
        for (std::size_t i = 0; i < n; ++i) {
          ins[i] = d_in + offsets[i];
          outs[i] = d_out + i * chunk;
          in_bytes[i] = frames[i].size();
        }
        const void** d_ins = nullptr;
        void** d_outs = nullptr;
        std::size_t *d_in_bytes = nullptr, *d_capacity = nullptr, *d_sizes = nullptr;
        nvcompStatus_t* d_statuses = nullptr;
        CK(cudaMalloc(&d_ins, n * sizeof(void*)));
        CK(cudaMalloc(&d_outs, n * sizeof(void*)));
        CK(cudaMalloc(&d_in_bytes, n * sizeof(std::size_t)));
        CK(cudaMalloc(&d_capacity, n * sizeof(std::size_t)));
        CK(cudaMalloc(&d_sizes, n * sizeof(std::size_t)));
        CK(cudaMalloc(&d_statuses, n * sizeof(nvcompStatus_t)));
        CK(cudaMemcpy(d_ins, ins.data(), n * sizeof(void*), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_outs, outs.data(), n * sizeof(void*), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_in_bytes, in_bytes.data(), n * sizeof(std::size_t), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_capacity, capacity.data(), n * sizeof(std::size_t), cudaMemcpyHostToDevice));
        std::size_t temp_planned = 0, temp_frames = 0;
        NV(nvcompBatchedZstdDecompressGetTempSize(n, chunk, opts, &temp_planned, n * chunk, stream));
        NV(nvcompBatchedZstdDecompressGetTempSizeSync(d_ins, d_in_bytes, n, chunk, &temp_frames,
                                                       n * chunk, opts, d_statuses, stream));
        void* temp = nullptr;
        CK(cudaMalloc(&temp, std::max<std::size_t>({temp_planned, temp_frames, 1})));
        std::printf("%-20s %6zu KiB %6zu %7.3f |", name_of(data), chunk / kKiB, n,
                    static_cast<double>(stored) / static_cast<double>(chunk * n));
        for (const auto& v : variants) {
          const std::size_t temp_bytes = v.sync_temp ? temp_frames : temp_planned;
          float best = 1e30F;
          bool refused = false;
          for (int r = 0; r < 6 && !refused; ++r) {
            CK(cudaMemsetAsync(d_out, 0, chunk * n, stream));
            CK(cudaMemsetAsync(d_sizes, 0, n * sizeof(std::size_t), stream));
            CK(cudaEventRecord(e0, stream));
            for (int c = 0; c < v.calls; ++c) {
              refused |= nvcompBatchedZstdDecompressAsync(
                             d_ins, d_in_bytes, d_capacity, v.sizes ? d_sizes : nullptr, n, temp,
                             temp_bytes, d_outs, opts, v.statuses ? d_statuses : nullptr,
                             stream) != nvcompSuccess;
            }
            CK(cudaEventRecord(e1, stream));
            CK(cudaEventSynchronize(e1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0) best = std::min(best, ms / static_cast<float>(v.calls));
          }
          if (refused) {
            CK(cudaStreamSynchronize(stream));
            std::printf(" %15s   ", "refused");
            continue;
          }
          std::vector<std::uint8_t> back(chunk * n);
          CK(cudaMemcpy(back.data(), d_out, back.size(), cudaMemcpyDeviceToHost));
          const bool right = std::memcmp(back.data(), raw.data(), back.size()) == 0;
          std::printf(" %15.3f%s", best, right ? "   " : " X ");
        }
        {  // one CPU thread's libzstd decode of the same frames, GB/s
          std::vector<std::uint8_t> back(chunk);
          const auto t0 = std::chrono::steady_clock::now();
          int rounds = 0;
          do {
            for (std::size_t i = 0; i < n; ++i) ZSTD_decompress(back.data(), chunk, frames[i].data(), frames[i].size());
            ++rounds;
          } while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200));
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::printf("  CPU thread %.2f GB/s", static_cast<double>(chunk * n) * rounds / secs / 1e9);
        }
        std::printf("\n");
        std::fflush(stdout);
        CK(cudaFree(temp));
        CK(cudaFree(d_in));
        CK(cudaFree(d_out));
        CK(cudaFree(d_ins));
        CK(cudaFree(d_outs));
        CK(cudaFree(d_in_bytes));
        CK(cudaFree(d_capacity));
        CK(cudaFree(d_sizes));
        CK(cudaFree(d_statuses));
      }
    }
  }
  std::printf("X: the output differed from the data\n");
  return 0;
}
