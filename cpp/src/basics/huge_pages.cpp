#include "basics/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>

namespace zarr_device::engine {

std::byte* map_huge_pages(std::size_t bytes) noexcept {
  // One huge page more than asked, so that an aligned span fits; the slack goes back at once.
  void* raw = ::mmap(nullptr, bytes + kHugePageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const std::uintptr_t end = start + bytes + kHugePageBytes;
  if (end > aligned + bytes) {
    ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  }
  auto* memory = reinterpret_cast<std::byte*>(aligned);
  ::madvise(memory, bytes, MADV_HUGEPAGE);  // advice only: regular pages where refused
  return memory;
}

void unmap_huge_pages(std::byte* memory, std::size_t bytes) noexcept {
  if (memory) ::munmap(memory, bytes);
}

}  // namespace zarr_device::engine
