// Tests of the byte buffers passed between stores, codecs and the engine: large arrays are
// mapped on huge-page boundaries (fewer page faults when a fresh one is filled) and behave as
// heap ones do.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "basics/huge_pages.hpp"
#include "zarr_device/buffer.hpp"

namespace zarr_device {
namespace {

TEST(ByteArray, LargeArraysStartOnAHugePageAndKeepTheirBytes) {
  for (const std::size_t size : {std::size_t{1000}, std::size_t{5} << 20, std::size_t{32} << 20,
                                 (std::size_t{33} << 20) + 123}) {
    SCOPED_TRACE(size);
    ByteArray array(size);
    ASSERT_EQ(array.size(), size);
    if (size >= (std::size_t{32} << 20)) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(array.data()) % engine::kHugePageBytes, 0u);
    }
    for (std::size_t i = 0; i < size; ++i) array.data()[i] = static_cast<std::byte>(i * 7);
    ByteArray moved = std::move(array);
    moved.shrink(size - 10);
    const Buffer frozen = std::move(moved).freeze();
    const Buffer part = frozen.slice(size / 2, 10);
    ASSERT_EQ(frozen.size(), size - 10);
    for (std::size_t i = 0; i < frozen.size(); i += 4093) {
      ASSERT_EQ(frozen.data()[i], static_cast<std::byte>(i * 7));
    }
    EXPECT_EQ(part.data()[0], static_cast<std::byte>((size / 2) * 7));
  }
}

TEST(ByteArray, HugePageMappingsAreZeroedAndAligned) {
  constexpr std::size_t kBytes = std::size_t{6} << 20;
  std::byte* memory = engine::map_huge_pages(kBytes);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(memory) % engine::kHugePageBytes, 0u);
  for (std::size_t i = 0; i < kBytes; i += 4096) ASSERT_EQ(memory[i], std::byte{0});
  memory[kBytes - 1] = std::byte{1};
  engine::unmap_huge_pages(memory, kBytes);
}

}  // namespace
}  // namespace zarr_device
