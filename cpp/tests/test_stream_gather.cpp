// The GPU gather's fast way through blocks of byte planes (device_read::interleave_planes, four
// elements at a time from a word of each plane), done on the host as the kernel does it, against
// the CPU's unshuffle and against stream_byte, the byte-by-byte way.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "codecs/byte_shuffle.hpp"
#include "device_read/stream_gather.hpp"

namespace zarr_device {
namespace {

using device_read::has_planes;
using device_read::interleave_planes;
using device_read::stream_byte;

// A block's shuffled bytes cut into `streams` equal parts, gathered as gather_planes<TS> does:
// whole groups of four elements by words, the rest by stream_byte.
template <std::uint32_t TS>
std::vector<std::byte> gathered(const std::vector<std::byte>& shuffled, std::uint32_t streams) {
  const auto bytes = static_cast<std::uint32_t>(shuffled.size());
  const std::uint32_t elements = bytes / TS;
  const std::uint32_t part = bytes / streams;
  std::vector<const std::byte*> sources;
  for (std::uint32_t s = 0; s < streams; ++s) sources.push_back(shuffled.data() + s * part);
  std::vector<std::byte> out(bytes);
  const std::uint32_t groups = elements / 4;
  for (std::uint32_t g = 0; g < groups; ++g) {
    std::uint32_t in[TS];
    for (std::uint32_t j = 0; j < TS; ++j) {
      const std::byte* plane = streams == 1 ? sources[0] + j * elements : sources[j];
      std::memcpy(&in[j], plane + 4 * g, 4);  // a little-endian load, as the GPU's
    }
    std::uint32_t words[TS];
    interleave_planes<TS>(in, words);
    std::memcpy(out.data() + static_cast<std::size_t>(g) * 4 * TS, words, sizeof(words));
  }
  for (std::uint32_t at = groups * 4 * TS; at < bytes; ++at) {
    const auto from = stream_byte(at, bytes, TS, streams);
    out[at] = sources[from.stream][from.offset];
  }
  return out;
}

template <std::uint32_t TS>
void check_planes(std::mt19937& rng) {
  for (const std::uint32_t streams : {1U, TS}) {
    for (std::uint32_t elements : {0U, 1U, 3U, 4U, 5U, 7U, 64U, 1001U, 4096U}) {
      // A block of one stream may end in bytes past its last whole element; a split one may not.
      for (std::uint32_t extra = 0; extra < (streams == 1 ? TS : 1U); ++extra) {
        const std::uint32_t bytes = elements * TS + extra;
        if (bytes == 0) continue;
        ASSERT_TRUE(has_planes(bytes, TS, streams));
        std::vector<std::byte> shuffled(bytes);
        for (auto& b : shuffled) b = static_cast<std::byte>(rng());
        std::vector<std::byte> expected(bytes);
        codecs::byte_unshuffle(shuffled.data(), expected.data(), bytes, TS);
        EXPECT_EQ(gathered<TS>(shuffled, streams), expected)
            << "typesize " << TS << ", " << streams << " streams, " << bytes << " bytes";
      }
    }
  }
}

TEST(StreamGather, PlanesInterleavedFourElementsAtATimeMatchTheCpusUnshuffle) {
  std::mt19937 rng(11);
  check_planes<2>(rng);
  check_planes<4>(rng);
  check_planes<8>(rng);
  check_planes<16>(rng);
}

TEST(StreamGather, OnlyBlocksOfPlanesTakeTheFastWay) {
  EXPECT_TRUE(has_planes(4000, 4, 1));
  EXPECT_TRUE(has_planes(4003, 4, 1));   // the last bytes by stream_byte
  EXPECT_TRUE(has_planes(4000, 4, 4));   // a split block
  EXPECT_FALSE(has_planes(4003, 4, 4));  // planes would not be the streams
  EXPECT_FALSE(has_planes(4000, 4, 2));  // streams that are not planes
}

}  // namespace
}  // namespace zarr_device
