// How much temporary memory nvCOMP's batched zstd decoder needs, by the data: planned before the
// data are seen (GetTempSize, 3.05 bytes per decoded byte for any chunking) against sized from the
// frames (GetTempSizeSync), per decoded byte, for data of several kinds and chunk sizes; each
// chunk is decoded with exactly the sized memory and compared. Measured once to decide whether a
// read may plan its decode memory for large chunks from the frames (docs/architecture.md, "What
// large chunks need"); not part of the build.
//
//   N=$(python3 -c 'import nvidia.libnvcomp, os; print(os.path.dirname(nvidia.libnvcomp.__file__))')
//   nvcc -O2 -std=c++17 -arch=sm_90 -I$N/include bench/probes/probe_nvcomp_temp_by_data.cu \
//     -L$N/lib64 -l:libnvcomp.so.6 -lzstd -Xlinker -rpath=$N/lib64 -o /tmp/probe_temp
//   /tmp/probe_temp
#include <cuda_runtime.h>
#include <nvcomp/zstd.h>
#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "probe_checks.hpp"

constexpr std::size_t kMiB = std::size_t{1} << 20;

// `bytes` of data of one kind.
static std::vector<unsigned char> make(const std::string& kind, std::size_t bytes) {
  std::vector<unsigned char> v(bytes);
  std::mt19937_64 rng(7);
  if (kind == "bf16 weights") {
    std::normal_distribution<float> normal(0.0F, 0.02F);
    for (std::size_t i = 0; i + 1 < bytes; i += 2) {
      const float f = normal(rng);
      std::uint32_t b = 0;
      std::memcpy(&b, &f, 4);
      const auto h = static_cast<std::uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
      std::memcpy(&v[i], &h, 2);
    }
  } else if (kind == "zeros") {
  } else if (kind == "random bytes") {
    for (auto& c : v) c = static_cast<unsigned char>(rng());
  } else if (kind == "float32 ramp") {
    for (std::size_t i = 0; i + 3 < bytes; i += 4) {
      const float f = static_cast<float>(i / 4) * 0.001F;
      std::memcpy(&v[i], &f, 4);
    }
  } else if (kind == "int32 small") {
    std::uniform_int_distribution<int> d(0, 100);
    for (std::size_t i = 0; i + 3 < bytes; i += 4) {
      const int x = d(rng);
      std::memcpy(&v[i], &x, 4);
    }
  } else if (kind == "text") {
    const char* words[] = {"zarr ", "device ", "chunk ", "shard ", "tensor ", "the ", "of "};
    std::uniform_int_distribution<int> d(0, 6);
    std::size_t at = 0;
    while (at < bytes) {
      const char* w = words[d(rng)];
      for (const char* c = w; *c && at < bytes; ++c) v[at++] = static_cast<unsigned char>(*c);
    }
  }
  return v;
}

int main() {
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  const auto opts = nvcompBatchedZstdDecompressDefaultOpts;
  std::printf("%-14s %6s %5s %7s | %8s %8s | %s\n", "data", "chunk", "level", "stored", "planned",
              "frames", "per decoded byte; decoded with the frames' size: ok?");
  for (const std::string kind :
       {"bf16 weights", "zeros", "random bytes", "float32 ramp", "int32 small", "text"}) {
    for (const std::size_t chunk : {1 * kMiB, 16 * kMiB, 64 * kMiB}) {
      const auto data = make(kind, chunk);
      for (const int level : {1, 9}) {
        std::vector<unsigned char> frame(ZSTD_compressBound(chunk));
        const std::size_t n = ZSTD_compress(frame.data(), frame.size(), data.data(), chunk, level);
        if (ZSTD_isError(n)) std::abort();
        void *in = nullptr, *out = nullptr, *temp = nullptr, *arrays = nullptr;
        CK(cudaMalloc(&in, n));
        CK(cudaMalloc(&out, chunk));
        CK(cudaMemcpy(in, frame.data(), n, cudaMemcpyHostToDevice));
        // Device arrays: input pointer, input size, capacity, output size, output pointer, status.
        CK(cudaMalloc(&arrays, 6 * 8));
        auto* a = static_cast<std::size_t*>(arrays);
        const std::size_t host[5] = {reinterpret_cast<std::size_t>(in), n, chunk, 0,
                                     reinterpret_cast<std::size_t>(out)};
        CK(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice));
        std::size_t planned = 0, sized = 0;
        NV(nvcompBatchedZstdDecompressGetTempSize(1, chunk, opts, &planned, chunk, stream));
        NV(nvcompBatchedZstdDecompressGetTempSizeSync(reinterpret_cast<const void* const*>(a),
                                                      a + 1, 1, chunk, &sized, chunk, opts,
                                                      nullptr, stream));
        if (sized) CK(cudaMalloc(&temp, sized));
        CK(cudaMemset(out, 0xAB, chunk));
        NV(nvcompBatchedZstdDecompressAsync(
            reinterpret_cast<const void* const*>(a), a + 1, a + 2, a + 3, 1, temp, sized,
            reinterpret_cast<void* const*>(a + 4), opts,
            reinterpret_cast<nvcompStatus_t*>(a + 5), stream));
        CK(cudaStreamSynchronize(stream));
        std::size_t got[6];
        CK(cudaMemcpy(got, a, sizeof got, cudaMemcpyDeviceToHost));
        std::vector<unsigned char> back(chunk);
        CK(cudaMemcpy(back.data(), out, chunk, cudaMemcpyDeviceToHost));
        const bool ok = static_cast<int>(got[5] & 0xFFFFFFFF) == 0 && got[3] == chunk &&
                        std::memcmp(back.data(), data.data(), chunk) == 0;
        std::printf("%-14s %4zuMiB %5d %7.3f | %8.3f %8.3f | %s\n", kind.c_str(), chunk / kMiB,
                    level, static_cast<double>(n) / chunk, static_cast<double>(planned) / chunk,
                    static_cast<double>(sized) / chunk, ok ? "ok" : "WRONG");
        CK(cudaFree(in));
        CK(cudaFree(out));
        CK(cudaFree(arrays));
        if (temp) CK(cudaFree(temp));
      }
    }
  }
  return 0;
}
