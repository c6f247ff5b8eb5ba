// zarr-device-decoder: the decoder process. It runs nvCOMP's batched decoders on chunks the
// engine has not vouched for, in a CUDA context of its own, reading and writing only the arenas the
// engine exports to it (cpp/cuda/isolated_decoder.hpp). A malformed frame may fault this context
// or hang it: the process then ends (or is killed by the engine's deadline), and the caller's
// context is untouched. Started by the engine with "--fd N", its end of the engine's socket.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/checksum_kernels.hpp"
#include "../cuda/kernels.hpp"
#include "../cuda/nvcomp_api.hpp"
#include "isolated_decode/decoder_service.hpp"
#include "zarr_device/settings.hpp"

namespace {

using namespace zarr_device;
using namespace zarr_device::isolated_decode;

// A CUDA failure here means the context is gone (a fault), or never came: nothing more can be
// decoded, and the engine learns of it from the socket closing.
void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "zarr-device decoder: %s: %s\n", what, cudaGetErrorString(e));
  std::_Exit(3);
}

// Batches decode on streams of their own, up to kDepth at once: one batch's chunks seldom fill the
// GPU (nvCOMP gives each chunk a thread block, and a batch holds tens of MiB), so the next batches'
// decodes run beside it. Each stream has its own arrays, temporary memory and pinned answers
// (the engine keeps each batch to a 16th of the output arena, and so the memory of all).
constexpr unsigned char kGuardByte = 0xA5;

// Where a batch of n chunks keeps its arrays, the same in pinned host memory and on the device so
// that what is sent and what is answered move in one copy each: per chunk, input pointers,
// output pointers and guard-band pointers, then input sizes, capacities and band sizes, then the
// checks' expected values; then the answers: decoded sizes, statuses, band flags and check flags.
struct BatchLayout {
  explicit BatchLayout(std::size_t n)
      : pointers(0),
        sizes(3 * n * sizeof(void*)),
        expected(sizes + 3 * n * sizeof(std::size_t)),
        sent((expected + n * sizeof(std::uint32_t) + 7) / 8 * 8),
        decoded_sizes(sent),
        statuses(decoded_sizes + n * sizeof(std::size_t)),
        band_flags(statuses + n * sizeof(int)),
        check_flags(band_flags + n * sizeof(int)),
        total(check_flags + n * sizeof(int)) {}
  std::size_t pointers, sizes, expected, sent, decoded_sizes, statuses, band_flags, check_flags,
      total;  // byte offsets; [0, sent) goes to the device, [sent, total) comes back
};

cuda::ChecksumKind checksum_kind(DecodedCheck check) {
  return check == DecodedCheck::kAdler32 ? cuda::ChecksumKind::kAdler32
                                         : cuda::ChecksumKind::kCrc32;
}

class NvcompBackend final : public DecodeBackend {
 public:
  static constexpr std::size_t kDepth = 8;

  NvcompBackend() = default;
  NvcompBackend(const NvcompBackend&) = delete;
  NvcompBackend& operator=(const NvcompBackend&) = delete;
  ~NvcompBackend() override {
    for (auto& lane : lanes_) {
      if (lane.done != nullptr) cudaEventDestroy(lane.done);
      if (lane.stream != nullptr) cudaStreamDestroy(lane.stream);
    }
  }

  std::string set_up(const DecoderSetup& setup, std::span<const int> /*fds*/) override {
    if (setup.input.kind != ArenaKind::kCudaIpc || setup.output.kind != ArenaKind::kCudaIpc) {
      throw std::runtime_error("the decoder takes CUDA IPC arenas");
    }
    check(cudaSetDevice(setup.device), "cudaSetDevice");
    input_ = open(setup.input);
    output_ = open(setup.output);
    for (const auto& handle : setup.events) {
      cudaIpcEventHandle_t ipc{};
      std::memcpy(&ipc, handle.data(), sizeof(ipc));
      cudaEvent_t event = nullptr;
      check(cudaIpcOpenEventHandle(&event, ipc), "cudaIpcOpenEventHandle");
      events_.push_back(event);
    }
    for (auto& lane : lanes_) {
      check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming), "cudaEventCreate");
    }
    const auto& nvcomp = cuda::Nvcomp::instance();
    if (!nvcomp.loaded()) throw std::runtime_error(nvcomp.error());
    return nvcomp.library() + " on CUDA device " + std::to_string(setup.device);
  }

  [[nodiscard]] std::size_t depth() const override { return kDepth; }

  void launch(const DecodeBatch& batch) override {
    Lane& lane = lanes_[launched_++ % kDepth];
    lane.started = std::chrono::steady_clock::now();
    const auto kind = static_cast<DeviceDecoding::Kind>(batch.codec);
    const auto* d = batch.codec < DeviceDecoding::kKinds
                        ? cuda::Nvcomp::instance().decompressor(kind)
                        : nullptr;
    const std::size_t n = batch.chunks.size();
    lane.chunks = n;
    lane.decoded = false;
    lane.bytes = 0;
    if (d == nullptr || n == 0) return;  // not a codec nvCOMP decodes here: none decoded
    // The engine's copies of the stored bytes, waited for on the GPU (the service checked that the
    // setup lent this event).
    if (batch.event != kNoEvent) {
      check(cudaStreamWaitEvent(lane.stream, events_[batch.event], 0), "cudaStreamWaitEvent");
    }
    const BatchLayout at(n);
    lane.check = batch.check;
    std::size_t most = 0;
    for (const ChunkJob& c : batch.chunks) {
      most = std::max<std::size_t>(most, c.capacity);
      lane.bytes += c.capacity;
    }
    std::byte* host = lane.host.reserve(at.total);
    std::byte* device = lane.arrays.reserve(at.total);
    auto* pointers = reinterpret_cast<const void**>(host + at.pointers);
    auto* sizes = reinterpret_cast<std::size_t*>(host + at.sizes);
    auto* expected = reinterpret_cast<std::uint32_t*>(host + at.expected);
    for (std::size_t i = 0; i < n; ++i) {
      const ChunkJob& c = batch.chunks[i];
      pointers[i] = input_ + c.input_offset;
      pointers[n + i] = output_ + c.output_offset;
      pointers[2 * n + i] = output_ + c.output_offset + c.capacity;
      sizes[i] = c.input_bytes;
      sizes[n + i] = c.capacity;
      sizes[2 * n + i] = kGuardBytes;
      expected[i] = c.expected;
    }
    auto* device_pointers = reinterpret_cast<void**>(device + at.pointers);
    auto* device_sizes = reinterpret_cast<std::size_t*>(device + at.sizes);
    auto* statuses = reinterpret_cast<int*>(device + at.statuses);
    auto* band_flags = reinterpret_cast<int*>(device + at.band_flags);
    check(cudaMemcpyAsync(device, host, at.sent, cudaMemcpyHostToDevice, lane.stream), "copy");
    // The band after each output, filled with a pattern a write past the output would change
    // (one launch: a memset per chunk costs the launching thread more than the decode takes).
    cuda::launch_fill(device_pointers + 2 * n, device_sizes + 2 * n, n, std::byte{kGuardByte},
                      lane.stream);
    check(cudaGetLastError(), "band fill");
    // nvCOMP's temporary memory for the worst case (zstd: about 3 bytes per decoded byte), not
    // sized from the frames: sizing parses frames nobody has checked, outside what the fuzz
    // campaign covers, and a size too small for a malformed frame would not show in the bands.
    const std::size_t temp =
        d->temp_size(n, std::max<std::size_t>(most, 1), std::max<std::size_t>(lane.bytes, 1));
    std::byte* temp_memory = temp != 0 ? lane.temp.reserve(temp) : nullptr;
    check(cudaMemsetAsync(statuses, 0xFF, n * sizeof(int), lane.stream), "memset");
    check(cudaMemsetAsync(band_flags, 0, 2 * n * sizeof(int), lane.stream), "memset");
    auto* decoded_sizes = reinterpret_cast<std::size_t*>(device + at.decoded_sizes);
    d->decompress(device_pointers, device_sizes, device_sizes + n, decoded_sizes, n, temp_memory,
                  temp, device_pointers + n, statuses, lane.stream);
    // The bands checked once the decodes have ended (on this stream): a write past an output
    // touched its band.
    const std::byte pattern{kGuardByte};
    cuda::launch_mark_non_fill(device_pointers + 2 * n, device_sizes + 2 * n, n, &pattern, 1,
                               band_flags, lane.stream);
    check(cudaGetLastError(), "band check");
    // The stored form's check of the decoded bytes, which nvCOMP does not verify: over each
    // output's capacity (a chunk of another size is not trusted anyway).
    if (batch.check != DecodedCheck::kNone) {
      cuda::launch_check_checksums(
          checksum_kind(batch.check), const_cast<const void* const*>(device_pointers + n),
          device_sizes + n, reinterpret_cast<const std::uint32_t*>(device + at.expected),
          reinterpret_cast<int*>(device + at.check_flags), n, lane.stream);
      check(cudaGetLastError(), "checksum check");
    }
    check(cudaMemcpyAsync(host + at.sent, device + at.sent, at.total - at.sent,
                          cudaMemcpyDeviceToHost, lane.stream),
          "copy back");
    check(cudaEventRecord(lane.done, lane.stream), "record");
    lane.decoded = true;
  }

  std::vector<ChunkOutcome> collect() override {
    Lane& lane = lanes_[collected_++ % kDepth];
    const std::size_t n = lane.chunks;
    std::vector<ChunkOutcome> out(n, ChunkOutcome{-1, 0});
    if (!lane.decoded) return out;
    check(cudaEventSynchronize(lane.done), "decode");
    const BatchLayout at(n);  // (the layout launch() made)
    const std::byte* host = lane.host.data();
    const auto* sizes = reinterpret_cast<const std::size_t*>(host + at.decoded_sizes);
    const auto* statuses = reinterpret_cast<const int*>(host + at.statuses);
    const auto* band_flags = reinterpret_cast<const int*>(host + at.band_flags);
    const auto* check_flags = reinterpret_cast<const int*>(host + at.check_flags);
    // A band written into may have come from any chunk's overrun: none of the batch is trusted.
    const bool overran = std::any_of(band_flags, band_flags + n, [](int f) { return f != 0; });
    for (std::size_t i = 0; i < n; ++i) {
      const bool mismatched = lane.check != DecodedCheck::kNone && check_flags[i] != 0;
      out[i] = {overran      ? kWrotePastOutput
                : mismatched ? (statuses[i] != 0 ? statuses[i] : kCheckFailed)
                             : statuses[i],
                sizes[i]};
    }
    if (trace_) {
      std::fprintf(
          stderr, "zarr-device decoder: %zu chunks, %zu B out in %.3f ms\n", n, lane.bytes,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - lane.started)
              .count());
    }
    return out;
  }

 private:
  // Memory that grows to the largest batch a lane has had (its last batch is collected before
  // the lane is launched again).
  template <cudaError_t (*Allocate)(void**, std::size_t), cudaError_t (*Free)(void*)>
  class Grown {
   public:
    Grown() = default;
    Grown(const Grown&) = delete;
    Grown& operator=(const Grown&) = delete;
    ~Grown() { Free(memory_); }
    std::byte* reserve(std::size_t need) {
      if (need > bytes_) {
        check(Free(memory_), "free");
        memory_ = nullptr;
        bytes_ = 0;
        check(Allocate(reinterpret_cast<void**>(&memory_), need), "allocate");
        bytes_ = need;
      }
      return memory_;
    }
    [[nodiscard]] std::byte* data() const { return memory_; }

   private:
    std::byte* memory_ = nullptr;
    std::size_t bytes_ = 0;
  };
  static cudaError_t allocate_device(void** p, std::size_t n) { return cudaMalloc(p, n); }
  static cudaError_t allocate_pinned(void** p, std::size_t n) { return cudaMallocHost(p, n); }

  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    Grown<allocate_pinned, cudaFreeHost> host;  // the arrays, and the answers copied back
    Grown<allocate_device, cudaFree> arrays;
    Grown<allocate_device, cudaFree> temp;  // nvCOMP's
    std::size_t chunks = 0;
    std::size_t bytes = 0;  // decoded
    bool decoded = false;   // launched on the GPU (not where the codec has no decoder here)
    DecodedCheck check = DecodedCheck::kNone;
    std::chrono::steady_clock::time_point started;
  };

  static std::byte* open(const Arena& arena) {
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, arena.handle.data(), sizeof(handle));
    void* memory = nullptr;
    check(cudaIpcOpenMemHandle(&memory, handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
    return static_cast<std::byte*>(memory);
  }

  std::byte* input_ = nullptr;
  std::byte* output_ = nullptr;
  std::vector<cudaEvent_t> events_;  // the engine's, opened through IPC
  std::array<Lane, kDepth> lanes_{};
  std::size_t launched_ = 0;   // by the service's thread
  std::size_t collected_ = 0;  // by its answerer
  bool trace_ = environment_value(EnvironmentVariable::kTrace).has_value();
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "--fd") != 0) {
    std::fprintf(stderr,
                 "zarr-device-decoder is started by zarr-device to decode chunks on the GPU in a "
                 "process of its own; it is not run by hand\n");
    return 2;
  }
  NvcompBackend backend;
  try {
    return serve(std::atoi(argv[2]), backend);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zarr-device decoder: %s\n", e.what());
    return 1;
  }
}
