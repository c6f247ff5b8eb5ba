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
// valid frames given too little output (nvcomp_cases.hpp). Case `i` of seed `s` is always the same
// bytes, so any finding replays with `--first i --count 1`.
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
#include <nvcomp/deflate.h>
#include <nvcomp/gzip.h>
#include <nvcomp/lz4.h>
#include <nvcomp/zstd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "nvcomp_cases.hpp"

namespace {

using namespace nvcomp_campaign;

// What the batch being decoded holds ("mutation frame" of each case), for the fault line.
std::string g_batch_cases;

void check_cuda(cudaError_t e, const char* what, std::size_t first, std::size_t count) {
  if (e == cudaSuccess) return;
  std::printf("{\"fault\": \"%s: %s\", \"first\": %zu, \"count\": %zu, \"cases\": \"%s\"}\n", what,
              cudaGetErrorString(e), first, count, g_batch_cases.c_str());
  std::fflush(stdout);
  std::_Exit(2);
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
