// Anonymous memory mapped on huge-page boundaries with the advice to back it with huge pages:
// large host buffers fault in 2 MiB at a time instead of 4 KiB (the kernel's per-page fault work,
// not the zeroing, was a fifth of reading a 64 MiB zstd chunk into a fresh buffer). Advice only:
// where the kernel refuses huge pages, the memory is regular pages.
#pragma once

#include <cstddef>

namespace zarr_device::engine {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// `bytes` (a multiple of 4 KiB) of zeroed memory starting on a huge-page boundary, or null when
// the mapping fails. Freed with unmap_huge_pages(memory, bytes).
std::byte* map_huge_pages(std::size_t bytes) noexcept;
void unmap_huge_pages(std::byte* memory, std::size_t bytes) noexcept;

}  // namespace zarr_device::engine
