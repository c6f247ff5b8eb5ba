#include "codecs/byte_shuffle.hpp"

#include <algorithm>
#include <cstring>

namespace zarr_device::codecs {
namespace {

// Elements taken at a time: the rows read (or written) for one tile stay in the cache while its
// `typesize` streams are gathered, instead of one pass over the whole chunk per byte of an element.
constexpr std::size_t kTile = 4096;

// Moves byte j of element i between `elements`-long streams (`streams`) and interleaved
// elements (`interleaved`), tile by tile, one way or the other.
template <bool kToStreams>
void transpose(const std::byte* in, std::byte* out, std::size_t elements, std::size_t typesize) {
  for (std::size_t begin = 0; begin < elements; begin += kTile) {
    const std::size_t end = std::min(elements, begin + kTile);
    for (std::size_t j = 0; j < typesize; ++j) {
      for (std::size_t i = begin; i < end; ++i) {
        if constexpr (kToStreams) {
          out[j * elements + i] = in[i * typesize + j];
        } else {
          out[i * typesize + j] = in[j * elements + i];
        }
      }
    }
  }
}

}  // namespace

void byte_shuffle(const std::byte* in, std::byte* out, std::size_t bytes, std::size_t typesize) {
  if (typesize <= 1) {
    std::memcpy(out, in, bytes);
    return;
  }
  const std::size_t elements = bytes / typesize;
  transpose<true>(in, out, elements, typesize);
  const std::size_t whole = elements * typesize;
  std::memcpy(out + whole, in + whole, bytes - whole);
}

void byte_unshuffle(const std::byte* shuffled, std::byte* out, std::size_t bytes,
                    std::size_t typesize) {
  if (typesize <= 1) {
    std::memcpy(out, shuffled, bytes);
    return;
  }
  const std::size_t elements = bytes / typesize;
  transpose<false>(shuffled, out, elements, typesize);
  const std::size_t whole = elements * typesize;
  std::memcpy(out + whole, shuffled + whole, bytes - whole);
}

}  // namespace zarr_device::codecs
