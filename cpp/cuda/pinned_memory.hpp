// Page-locked host memory, the staging that chunk bytes pass through between the host and a GPU.
#pragma once

#include <cstddef>

namespace zarr_device::cuda {

// `bytes` of host memory locked for the current device's copies (and every other device's), or
// DeviceError / OutOfMemoryError. cudaHostAlloc faults in and locks its pages on one thread, which
// a process's first read pays before its first byte moves. Here the memory is mapped anonymously
// (as huge pages where the kernel offers them), its pages faulted in by the engine's threads, then
// registered with CUDA, in a fraction of that time (BENCHMARKS.md, Appendix: decisions, and what
// was measured and not kept).
// Where registering is refused, cudaHostAlloc's memory is used instead.
void* allocate_pinned(std::size_t bytes);

// Frees what allocate_pinned returned; null is ignored.
void free_pinned(void* pointer) noexcept;

}  // namespace zarr_device::cuda
