#include "codecs/byte_shuffle.hpp"

#include <algorithm>
#include <cstring>

namespace zarr_device::codecs {
namespace {

// Elements taken at a time: the rows read (or written) for one tile stay in the cache while its
// `typesize` streams are gathered, instead of one pass over the whole chunk per byte of an element.
constexpr std::size_t kTile = 4096;

// Moves byte j of element i between `elements`-long streams and interleaved elements, one way or
// the other, tile by tile; bytes past the last whole element are copied as they are.
template <bool kToStreams>
void regroup(const std::byte* in, std::byte* out, std::size_t bytes, std::size_t typesize) {
  if (typesize <= 1) {
    if (bytes > 0) std::memcpy(out, in, bytes);
    return;
  }
  const std::size_t elements = bytes / typesize;
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
  const std::size_t whole = elements * typesize;
  if (bytes > whole) std::memcpy(out + whole, in + whole, bytes - whole);
}

}  // namespace

void byte_shuffle(const std::byte* in, std::byte* out, std::size_t bytes, std::size_t typesize) {
  regroup<true>(in, out, bytes, typesize);
}

void byte_unshuffle(const std::byte* shuffled, std::byte* out, std::size_t bytes,
                    std::size_t typesize) {
  regroup<false>(shuffled, out, bytes, typesize);
}

}  // namespace zarr_device::codecs
