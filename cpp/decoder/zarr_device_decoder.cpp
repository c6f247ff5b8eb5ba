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
// GPU (nvCOMP gives each chunk a thread block, and a batch holds tens of MiB), so the next batch's
// decode runs beside it. Each stream has its own arrays, temporary memory and pinned answers.
constexpr unsigned char kGuardByte = 0xA5;

class NvcompBackend final : public DecodeBackend {
 public:
  static constexpr std::size_t kDepth = 4;

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
    // Per chunk: input pointers, output pointers and guard-band pointers, then input sizes,
    // capacities, band sizes and decoded sizes, then statuses and band flags; the same layout in
    // pinned host memory and on the device, so that the answers come back in one copy.
    const std::size_t p = n * sizeof(void*);
    const std::size_t z = n * sizeof(std::size_t);
    const std::size_t sent = 3 * p + 3 * z;  // what goes to the device
    const std::size_t answers = z + 2 * n * sizeof(int);
    std::size_t most = 0;
    for (const ChunkJob& c : batch.chunks) {
      most = std::max<std::size_t>(most, c.capacity);
      lane.bytes += c.capacity;
    }
    std::byte* host = lane.host.reserve(sent + answers);
    std::byte* device = lane.arrays.reserve(sent + answers);
    auto* pointers = reinterpret_cast<const void**>(host);
    auto* sizes = reinterpret_cast<std::size_t*>(host + 3 * p);
    for (std::size_t i = 0; i < n; ++i) {
      const ChunkJob& c = batch.chunks[i];
      pointers[i] = input_ + c.input_offset;
      pointers[n + i] = output_ + c.output_offset;
      pointers[2 * n + i] = output_ + c.output_offset + c.capacity;
      sizes[i] = c.input_bytes;
      sizes[n + i] = c.capacity;
      sizes[2 * n + i] = kGuardBytes;
      // The band after the output, filled with a pattern a write past the output would change.
      check(cudaMemsetAsync(output_ + c.output_offset + c.capacity, kGuardByte, kGuardBytes,
                            lane.stream),
            "memset");
    }
    auto* device_pointers = reinterpret_cast<void**>(device);
    auto* device_sizes = reinterpret_cast<std::size_t*>(device + 3 * p);
    auto* statuses = reinterpret_cast<int*>(device + sent + z);
    auto* flags = statuses + n;
    check(cudaMemcpyAsync(device, host, sent, cudaMemcpyHostToDevice, lane.stream), "copy");
    // nvCOMP's temporary memory for the worst case (zstd: about 3 bytes per decoded byte), not
    // sized from the frames: sizing parses frames nobody has checked, outside what the fuzz
    // campaign covers, and a size too small for a malformed frame would not show in the bands.
    const std::size_t temp =
        d->temp_size(n, std::max<std::size_t>(most, 1), std::max<std::size_t>(lane.bytes, 1));
    std::byte* temp_memory = temp != 0 ? lane.temp.reserve(temp) : nullptr;
    check(cudaMemsetAsync(statuses, 0xFF, n * sizeof(int), lane.stream), "memset");
    check(cudaMemsetAsync(flags, 0, n * sizeof(int), lane.stream), "memset");
    auto* decoded_sizes = reinterpret_cast<std::size_t*>(device + sent);
    d->decompress(device_pointers, device_sizes, device_sizes + n, decoded_sizes, n, temp_memory,
                  temp, device_pointers + n, statuses, lane.stream);
    // The bands checked once the decodes have ended (on this stream): a write past an output
    // touched its band.
    const std::byte pattern{kGuardByte};
    cuda::launch_mark_non_fill(device_pointers + 2 * n, device_sizes + 2 * n, n, &pattern, 1, flags,
                               lane.stream);
    check(cudaGetLastError(), "band check");
    check(cudaMemcpyAsync(host + sent, device + sent, answers, cudaMemcpyDeviceToHost, lane.stream),
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
    // (The layout launch() made: the answers after what it sent.)
    const std::byte* answers =
        lane.host.data() + 3 * n * sizeof(void*) + 3 * n * sizeof(std::size_t);
    const auto* sizes = reinterpret_cast<const std::size_t*>(answers);
    const auto* statuses = reinterpret_cast<const int*>(answers + n * sizeof(std::size_t));
    const int* flags = statuses + n;
    // A band written into may have come from any chunk's overrun: none of the batch is trusted.
    const bool overran = std::any_of(flags, flags + n, [](int f) { return f != 0; });
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = {overran ? kWrotePastOutput : statuses[i], sizes[i]};
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
