// zarr-device-decoder: the decoder process. It runs nvCOMP's batched decoders on chunks the
// engine has not vouched for, in a CUDA context of its own, reading and writing only the arenas the
// engine exports to it (cpp/cuda/isolated_decoder.hpp). A malformed frame may fault this context
// or hang it: the process then ends (or is killed by the engine's deadline), and the caller's
// context is untouched. Started by the engine with "--fd N", its end of the engine's socket.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda/nvcomp_api.hpp"
#include "isolated_decode/decoder_service.hpp"

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

class NvcompBackend final : public DecodeBackend {
 public:
  std::string set_up(const DecoderSetup& setup, std::span<const int> fds) override {
    if (setup.input.kind != ArenaKind::kCudaIpc || setup.output.kind != ArenaKind::kCudaIpc) {
      throw std::runtime_error("the decoder takes CUDA IPC arenas");
    }
    check(cudaSetDevice(setup.device), "cudaSetDevice");
    input_ = open(setup.input);
    output_ = open(setup.output);
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const auto& nvcomp = cuda::Nvcomp::instance();
    if (!nvcomp.loaded()) throw std::runtime_error(nvcomp.error());
    return nvcomp.library() + " on CUDA device " + std::to_string(setup.device);
  }

  std::vector<ChunkOutcome> decode(const DecodeBatch& batch) override {
    const auto kind = static_cast<DeviceDecoding::Kind>(batch.codec);
    const auto* d = batch.codec < DeviceDecoding::kKinds
                        ? cuda::Nvcomp::instance().decompressor(kind)
                        : nullptr;
    const std::size_t n = batch.chunks.size();
    std::vector<ChunkOutcome> out(n, ChunkOutcome{-1, 0});
    if (d == nullptr || n == 0) return out;  // not a codec nvCOMP decodes here: none decoded
    std::vector<const void*> inputs(n);
    std::vector<void*> outputs(n);
    std::vector<std::size_t> sizes(3 * n);
    std::size_t most = 0;
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const ChunkJob& c = batch.chunks[i];
      inputs[i] = input_ + c.input_offset;
      outputs[i] = output_ + c.output_offset;
      sizes[i] = c.input_bytes;
      sizes[n + i] = c.capacity;
      most = std::max<std::size_t>(most, c.capacity);
      total += c.capacity;
    }
    const std::size_t temp =
        d->temp_size(n, std::max<std::size_t>(most, 1), std::max<std::size_t>(total, 1));
    const std::size_t arrays =
        2 * n * sizeof(void*) + 3 * n * sizeof(std::size_t) + n * sizeof(int);
    std::byte* scratch = reserve(arrays + temp + 256);
    auto* device_pointers = reinterpret_cast<void**>(scratch);
    auto* device_sizes = reinterpret_cast<std::size_t*>(scratch + 2 * n * sizeof(void*));
    auto* statuses =
        reinterpret_cast<int*>(scratch + 2 * n * sizeof(void*) + 3 * n * sizeof(std::size_t));
    std::byte* temp_memory = scratch + (arrays + 255) / 256 * 256;
    check(cudaMemcpyAsync(device_pointers, inputs.data(), n * sizeof(void*), cudaMemcpyHostToDevice,
                          stream_),
          "copy");
    check(cudaMemcpyAsync(device_pointers + n, outputs.data(), n * sizeof(void*),
                          cudaMemcpyHostToDevice, stream_),
          "copy");
    check(cudaMemcpyAsync(device_sizes, sizes.data(), 3 * n * sizeof(std::size_t),
                          cudaMemcpyHostToDevice, stream_),
          "copy");
    check(cudaMemsetAsync(statuses, 0xFF, n * sizeof(int), stream_), "memset");
    d->decompress(device_pointers, device_sizes, device_sizes + n, device_sizes + 2 * n, n,
                  temp_memory, temp, device_pointers + n, statuses, stream_);
    std::vector<int> status(n);
    check(
        cudaMemcpyAsync(status.data(), statuses, n * sizeof(int), cudaMemcpyDeviceToHost, stream_),
        "copy back");
    check(cudaMemcpyAsync(sizes.data() + 2 * n, device_sizes + 2 * n, n * sizeof(std::size_t),
                          cudaMemcpyDeviceToHost, stream_),
          "copy back");
    check(cudaStreamSynchronize(stream_), "decode");
    for (std::size_t i = 0; i < n; ++i) out[i] = {status[i], sizes[2 * n + i]};
    return out;
  }

 private:
  static std::byte* open(const Arena& arena) {
    cudaIpcMemHandle_t handle{};
    std::memcpy(&handle, arena.handle.data(), sizeof(handle));
    void* memory = nullptr;
    check(cudaIpcOpenMemHandle(&memory, handle, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
    return static_cast<std::byte*>(memory);
  }

  std::byte* reserve(std::size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (scratch_ != nullptr) check(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      check(cudaMalloc(reinterpret_cast<void**>(&scratch_), bytes), "cudaMalloc");
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  std::byte* input_ = nullptr;
  std::byte* output_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::byte* scratch_ = nullptr;
  std::size_t scratch_bytes_ = 0;
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
