#include "pinned_memory.hpp"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "basics/huge_pages.hpp"
#include "cuda_check.hpp"
#include "engine/thread_pool.hpp"

namespace zarr_device::cuda {
namespace {

constexpr std::size_t kPage = 4096;
// Each thread faults in pieces of this size; smaller allocations are faulted in by the caller.
constexpr std::size_t kFaultPiece = std::size_t{16} << 20;
constexpr std::size_t kMaxFaultThreads = 16;

// A mapping and how it was made, by the address handed out.
struct Mapping {
  std::size_t bytes = 0;  // 0: cudaHostAlloc's memory
};

class Mappings {
 public:
  void add(void* pointer, Mapping mapping) {
    const std::lock_guard lock(mutex_);
    by_address_[pointer] = mapping;
  }
  Mapping take(void* pointer) {
    const std::lock_guard lock(mutex_);
    const auto it = by_address_.find(pointer);
    if (it == by_address_.end()) return {};
    const Mapping found = it->second;
    by_address_.erase(it);
    return found;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, Mapping> by_address_;
};

Mappings& mappings() {
  static auto* all = new Mappings;  // leaked: staging may be freed during static destruction
  return *all;
}

// An anonymous mapping of `bytes` starting on a huge page, or null.
std::byte* map_aligned(std::size_t bytes) {
  std::byte* memory = engine::map_huge_pages(bytes);
  if (!memory) return nullptr;
  // A forked child gets none of it, as with the driver's own pinned allocations: the parent's
  // pages stay the ones the GPU copies to and from, and the child (which cannot use CUDA) does
  // not copy the staging.
  ::madvise(memory, bytes, MADV_DONTFORK);
  return memory;
}

void fault_in(std::byte* memory, std::size_t bytes) {
  const std::size_t pieces = (bytes + kFaultPiece - 1) / kFaultPiece;
  const std::size_t threads = std::min({pieces, kMaxFaultThreads, engine::worker_count(0)});
  auto touch = [&](std::size_t piece) {
    const std::size_t begin = piece * kFaultPiece;
    const std::size_t end = std::min(bytes, begin + kFaultPiece);
    for (std::size_t at = begin; at < end; at += kPage) {
      *reinterpret_cast<volatile std::byte*>(memory + at) = std::byte{0};
    }
  };
  if (threads <= 1) {
    for (std::size_t p = 0; p < pieces; ++p) touch(p);
    return;
  }
  engine::ThreadPool::shared(threads).parallel_for(pieces, threads, touch);
}

void* host_alloc(std::size_t bytes) {
  void* p = nullptr;
  ZD_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  mappings().add(p, Mapping{0});
  return p;
}

}  // namespace

void* allocate_pinned(std::size_t bytes) {
  bytes = std::max<std::size_t>((bytes + kPage - 1) / kPage * kPage, kPage);
  std::byte* memory = map_aligned(bytes);
  if (!memory) return host_alloc(bytes);
  fault_in(memory, bytes);
  if (cudaHostRegister(memory, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped) !=
      cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it and take the driver's own allocation
    engine::unmap_huge_pages(memory, bytes);
    return host_alloc(bytes);
  }
  mappings().add(memory, Mapping{bytes});
  return memory;
}

void free_pinned(void* pointer) noexcept {
  if (!pointer) return;
  const Mapping mapping = mappings().take(pointer);
  if (mapping.bytes == 0) {
    cudaFreeHost(pointer);
    return;
  }
  cudaHostUnregister(pointer);
  engine::unmap_huge_pages(static_cast<std::byte*>(pointer), mapping.bytes);
}

}  // namespace zarr_device::cuda
