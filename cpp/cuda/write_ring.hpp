// A GPU write's staging: two slots (one encoded on the GPU while the other's chunks are stored),
// each with its pinned and device buffers, stream and events, made once per device and kept, as
// the read rings are (read_ring.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "device_memory.hpp"
#include "device_read/write_slots.hpp"
#include "devices/device.hpp"

namespace zarr_device::cuda {

inline constexpr std::size_t kMaxWriteBatch = 8192;  // chunks per batch

// The per-batch arrays the kernels and nvCOMP read and write (host and device alike).
struct WriteArrays {
  const void** inputs;
  std::size_t* input_sizes;
  void** outputs;
  std::size_t* output_sizes;
  std::size_t* offsets;
  int* statuses;
  int* flags;
  const void** shuffled;  // the compressor's inputs where the GPU shuffles first
  std::byte* fill;
  static constexpr std::size_t bytes() { return kMaxWriteBatch * (6 * 8 + 2 * sizeof(int)) + 64; }
  static WriteArrays at(std::byte* base) {
    WriteArrays a{};
    a.inputs = reinterpret_cast<const void**>(base);
    a.input_sizes = reinterpret_cast<std::size_t*>(base + kMaxWriteBatch * 8);
    a.outputs = reinterpret_cast<void**>(base + kMaxWriteBatch * 16);
    a.output_sizes = reinterpret_cast<std::size_t*>(base + kMaxWriteBatch * 24);
    a.offsets = reinterpret_cast<std::size_t*>(base + kMaxWriteBatch * 32);
    a.statuses = reinterpret_cast<int*>(base + kMaxWriteBatch * 40);
    a.flags = reinterpret_cast<int*>(base + kMaxWriteBatch * 44);
    a.shuffled = reinterpret_cast<const void**>(base + kMaxWriteBatch * 48);
    a.fill = base + kMaxWriteBatch * 56;
    return a;
  }
};

struct WriteSlot {
  std::byte* host = nullptr;    // pinned: encoded chunks, then the arrays
  std::byte* arrays = nullptr;  // device: the arrays
  DeviceScratch staging;        // device: chunks laid out as stored; later packed output
  DeviceScratch compressed;     // device: nvCOMP's outputs, one bound-sized place per chunk
  cudaStream_t stream = nullptr;
  cudaEvent_t encoded = nullptr;   // statuses, sizes and flags are on the host
  cudaEvent_t copied = nullptr;    // the encoded bytes are on the host
  std::size_t begin = 0, end = 0;  // the batch's items
  std::size_t leaves = 0;
  bool busy = false;
};

// A device's write staging, made once and kept (pinned allocations are slow and synchronise).
class WriteContext {
 public:
  WriteContext(int device, std::size_t staging_bytes)
      : gpu(get_device("cuda", device)),
        slot_bytes(device_read::write_slot_bytes(staging_bytes)),
        temp(gpu) {
    try {
      for (auto& s : slots) {
        s.staging = DeviceScratch(gpu);
        s.compressed = DeviceScratch(gpu);
        s.host = static_cast<std::byte*>(gpu->allocate_host(slot_bytes + WriteArrays::bytes()));
        s.arrays = static_cast<std::byte*>(gpu->allocate(WriteArrays::bytes()));
        s.stream = static_cast<cudaStream_t>(gpu->create_stream());
        streams.push_back(s.stream);
        s.encoded = static_cast<cudaEvent_t>(gpu->create_event());
        s.copied = static_cast<cudaEvent_t>(gpu->create_event());
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~WriteContext() { release(); }
  WriteContext(const WriteContext&) = delete;
  WriteContext& operator=(const WriteContext&) = delete;

  std::shared_ptr<Device> gpu;
  // Each slot's buffers (laid-out chunks and compressed outputs on the device, encoded chunks in
  // pinned memory) hold this much: enough for several shards, whose stores then run in parallel.
  std::size_t slot_bytes;
  WriteSlot slots[device_read::kWriteSlots];
  std::vector<StreamHandle> streams;
  SharedTemp temp;

 private:
  void release() noexcept {
    for (auto& s : slots) {
      try {
        if (s.stream) gpu->synchronize_stream(s.stream);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device is being let go of
      }
      gpu->deallocate_host(s.host);  // the Device's frees accept null
      gpu->deallocate(s.arrays);
      gpu->destroy_event(s.encoded);
      gpu->destroy_event(s.copied);
      gpu->destroy_stream(s.stream);
      s = WriteSlot{};
    }
  }
};

using WriteContexts = ContextPool<WriteContext, std::size_t>;

// The write staging of `device` for `staging_bytes`, lent to one write.
WriteContexts::Lease write_context_for(int device, std::size_t staging_bytes);
// The pool write_context_for lends from (release_cuda_memory frees its idle contexts).
WriteContexts& write_contexts();

}  // namespace zarr_device::cuda
