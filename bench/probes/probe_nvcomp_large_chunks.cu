// What bounds reads of large zstd chunks: nvCOMP's temporary memory per chunk, sized before the
// data is seen (GetTempSize, what the read plans with) and from the frames themselves
// (GetTempSizeSync); the GPU's decode time against the chunks decoded at once; and one CPU
// thread's decode rate, alone and with every core busy. One bf16 "weights" buffer (N(0, 0.02),
// 1 GiB unless told), compressed with libzstd level 1 in chunks of 1, 4, 16 and 64 MiB. Measured
// once to decide how the read sizes its decode memory (docs/architecture.md, "Decode memory");
// not part of the build.
//
//   N=$(python3 -c 'import nvidia.libnvcomp, os; print(os.path.dirname(nvidia.libnvcomp.__file__))')
//   nvcc -O2 -std=c++17 -arch=sm_90 -I$N/include bench/probes/probe_nvcomp_large_chunks.cu \
//     -L$N/lib64 -l:libnvcomp.so.6 -lzstd -Xlinker -rpath=$N/lib64 -o /tmp/probe_nvcomp
//   /tmp/probe_nvcomp [MiB of data]
#include <cuda_runtime.h>
#include <nvcomp/zstd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "probe_checks.hpp"

using clk = std::chrono::steady_clock;
constexpr std::size_t kMiB = std::size_t{1} << 20;

static double seconds_since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

// f(i, thread) for i in [0, n) on `threads` threads.
template <typename F>
static void parallel(unsigned threads, std::size_t n, F f) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) f(i, t);
    });
  }
  for (auto& th : pool) th.join();
}

int main(int argc, char** argv) {
  const std::size_t total = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024) * kMiB;
  const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
  // bf16 of N(0, 0.02), as bench_layouts.weights writes: the upper half of the float32.
  std::vector<std::uint16_t> values(total / 2);
  {
    const std::size_t per = values.size() / cores + 1;
    parallel(cores, cores, [&](std::size_t t, unsigned) {
      std::mt19937_64 rng(t + 1);
      std::normal_distribution<float> normal(0.0F, 0.02F);
      for (std::size_t i = t * per; i < std::min(values.size(), (t + 1) * per); ++i) {
        const float f = normal(rng);
        std::uint32_t bits = 0;
        std::memcpy(&bits, &f, 4);
        values[i] = static_cast<std::uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
      }
    });
  }
  const auto* data = reinterpret_cast<const std::byte*>(values.data());
  std::byte* device_output = nullptr;
  CK(cudaMalloc(&device_output, total));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const auto opts = nvcompBatchedZstdDecompressDefaultOpts;
  std::printf("data %zu MiB, %u cores\n", total / kMiB, cores);
  std::printf("%8s %6s %7s | %12s %12s %12s | %14s | %s\n", "chunk", "chunks", "ratio",
              "temp(1)", "temp(+1)", "temp(all)", "sync temp(all)",
              "GPU decode GB/s by chunks at once (temp sized: async / sync)");

  for (const std::size_t chunk : {1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB}) {
    const std::size_t n = total / chunk;
    if (n == 0) continue;
    // Compress every chunk (libzstd level 1, content size in the frame as zarr writes it).
    std::vector<std::vector<std::byte>> frames(n);
    parallel(cores, n, [&](std::size_t i, unsigned) {
      frames[i].resize(ZSTD_compressBound(chunk));
      const std::size_t got =
          ZSTD_compress(frames[i].data(), frames[i].size(), data + i * chunk, chunk, 1);
      if (ZSTD_isError(got)) std::abort();
      frames[i].resize(got);
    });
    std::size_t stored = 0;
    for (const auto& f : frames) stored += f.size();

    // CPU: one thread alone, then every core at once, into buffers already touched.
    std::vector<std::byte> out(std::min(n, static_cast<std::size_t>(cores)) * chunk);
    std::memset(out.data(), 1, out.size());
    auto decode_cpu = [&](std::size_t i, std::size_t slot) {
      const std::size_t got =
          ZSTD_decompress(out.data() + slot * chunk, chunk, frames[i].data(), frames[i].size());
      if (got != chunk || std::memcmp(out.data() + slot * chunk, data + i * chunk, chunk) != 0) {
        std::printf("CPU decode of chunk %zu wrong\n", i);
        std::abort();
      }
    };
    const std::size_t one_n = std::min<std::size_t>(n, std::max<std::size_t>(1, 256 * kMiB / chunk));
    auto t0 = clk::now();
    for (std::size_t i = 0; i < one_n; ++i) decode_cpu(i, 0);
    const double one_thread = static_cast<double>(one_n * chunk) / seconds_since(t0) / 1e9;
    const std::size_t lanes = std::min(n, static_cast<std::size_t>(cores));
    t0 = clk::now();
    parallel(static_cast<unsigned>(lanes), n, [&](std::size_t i, unsigned t) { decode_cpu(i, t); });
    const double all_threads = static_cast<double>(n * chunk) / seconds_since(t0) / 1e9;
    // (decode_cpu's memcmp is inside both timings: the rates are lower bounds.)

    // GPU: every compressed chunk on the device, aligned as nvCOMP asks.
    nvcompAlignmentRequirements_t align{};
    NV(nvcompBatchedZstdDecompressGetRequiredAlignments(opts, &align));
    std::vector<std::size_t> offsets(n);
    std::size_t at = 0;
    for (std::size_t i = 0; i < n; ++i) {
      at = (at + 255) / 256 * 256;
      offsets[i] = at;
      at += frames[i].size();
    }
    std::byte* device_input = nullptr;
    CK(cudaMalloc(&device_input, at));
    for (std::size_t i = 0; i < n; ++i) {
      CK(cudaMemcpy(device_input + offsets[i], frames[i].data(), frames[i].size(),
                    cudaMemcpyHostToDevice));
    }
    std::vector<const void*> in(n);
    std::vector<void*> outp(n);
    std::vector<std::size_t> in_bytes(n), capacity(n, chunk);
    for (std::size_t i = 0; i < n; ++i) {
      in[i] = device_input + offsets[i];
      outp[i] = device_output + i * chunk;
      in_bytes[i] = frames[i].size();
    }
    const void** d_in = nullptr;
    void** d_out = nullptr;
    std::size_t *d_in_bytes = nullptr, *d_capacity = nullptr, *d_sizes = nullptr;
    nvcompStatus_t* d_status = nullptr;
    CK(cudaMalloc(&d_in, n * sizeof(void*)));
    CK(cudaMalloc(&d_out, n * sizeof(void*)));
    CK(cudaMalloc(&d_in_bytes, n * sizeof(std::size_t)));
    CK(cudaMalloc(&d_capacity, n * sizeof(std::size_t)));
    CK(cudaMalloc(&d_sizes, n * sizeof(std::size_t)));
    CK(cudaMalloc(&d_status, n * sizeof(nvcompStatus_t)));
    CK(cudaMemcpy(d_in, in.data(), n * sizeof(void*), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_out, outp.data(), n * sizeof(void*), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_in_bytes, in_bytes.data(), n * sizeof(std::size_t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_capacity, capacity.data(), n * sizeof(std::size_t), cudaMemcpyHostToDevice));

    std::size_t temp1 = 0, temp2 = 0, temp_all = 0, sync_all = 0;
    NV(nvcompBatchedZstdDecompressGetTempSize(1, chunk, opts, &temp1, chunk, stream));
    NV(nvcompBatchedZstdDecompressGetTempSize(2, chunk, opts, &temp2, 2 * chunk, stream));
    NV(nvcompBatchedZstdDecompressGetTempSize(n, chunk, opts, &temp_all, n * chunk, stream));
    NV(nvcompBatchedZstdDecompressGetTempSizeSync(reinterpret_cast<const void* const*>(d_in),
                                                   d_in_bytes, n, chunk, &sync_all, n * chunk,
                                                   opts, d_status, stream));
    std::printf("%5zu MiB %6zu %7.3f | %9.1f MB %9.1f MB %9.1f MB | %11.1f MB |", chunk / kMiB, n,
                static_cast<double>(stored) / static_cast<double>(total), temp1 / 1e6,
                (temp2 - temp1) / 1e6, temp_all / 1e6, sync_all / 1e6);

    // Decode the first m chunks in one call, for m = 1, 2, 4, ... n: time with events, best of 3.
    void* temp = nullptr;
    CK(cudaMalloc(&temp, std::max<std::size_t>(temp_all, sync_all)));
    std::vector<std::size_t> sizes(n);
    std::vector<nvcompStatus_t> statuses(n);
    auto decode_gpu = [&](std::size_t m, std::size_t temp_bytes) {
      float best = 1e30F;
      for (int r = 0; r < 3; ++r) {
        CK(cudaMemsetAsync(device_output, 0, m * chunk, stream));
        CK(cudaEventRecord(e0, stream));
        NV(nvcompBatchedZstdDecompressAsync(reinterpret_cast<const void* const*>(d_in), d_in_bytes,
                                            d_capacity, d_sizes, m, temp, temp_bytes, d_out, opts,
                                            d_status, stream));
        CK(cudaEventRecord(e1, stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = std::min(best, ms);
      }
      CK(cudaMemcpy(statuses.data(), d_status, m * sizeof(nvcompStatus_t), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(sizes.data(), d_sizes, m * sizeof(std::size_t), cudaMemcpyDeviceToHost));
      for (std::size_t i = 0; i < m; ++i) {
        if (statuses[i] != nvcompSuccess || sizes[i] != chunk) {
          std::printf(" [chunk %zu status %d size %zu]", i, static_cast<int>(statuses[i]), sizes[i]);
          return -1.0;
        }
      }
      // Every chunk equal to the data: the check that a smaller temp is enough.
      std::vector<std::byte> back(m * chunk);
      CK(cudaMemcpy(back.data(), device_output, m * chunk, cudaMemcpyDeviceToHost));
      if (std::memcmp(back.data(), data, m * chunk) != 0) {
        std::printf(" [decoded data differ]");
        return -1.0;
      }
      return static_cast<double>(m * chunk) / (best / 1e3) / 1e9;
    };
    for (std::size_t m = 1; m <= n; m *= 2) {
      std::size_t async_m = 0, sync_m = 0;
      NV(nvcompBatchedZstdDecompressGetTempSize(m, chunk, opts, &async_m, m * chunk, stream));
      NV(nvcompBatchedZstdDecompressGetTempSizeSync(reinterpret_cast<const void* const*>(d_in),
                                                     d_in_bytes, m, chunk, &sync_m, m * chunk,
                                                     opts, d_status, stream));
      const double a = decode_gpu(m, async_m);
      const double s = decode_gpu(m, sync_m);
      std::printf(" %zu: %.1f/%.1f", m, a, s);
      if (m == n) break;
      if (m * 2 > n) m = n / 2;  // end on n
    }
    std::printf(" | CPU thread %.2f GB/s, %zu threads %.2f GB/s\n", one_thread, lanes, all_threads);
    std::fflush(stdout);
    CK(cudaFree(temp));
    CK(cudaFree(device_input));
    CK(cudaFree(d_in));
    CK(cudaFree(d_out));
    CK(cudaFree(d_in_bytes));
    CK(cudaFree(d_capacity));
    CK(cudaFree(d_sizes));
    CK(cudaFree(d_status));
  }
  return 0;
}
