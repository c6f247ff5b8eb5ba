// The byte shuffle Blosc applies to each block and numcodecs' shuffle codec to a whole chunk: the
// bytes of `typesize`-byte elements regrouped by their position in the element (every element's
// first byte, then every second byte, ...), so that the slowly varying bytes of numbers (the sign
// and exponent of floats, the high bytes of integers) sit together and compress well.
#pragma once

#include <cstddef>

namespace zarr_device::codecs {

// Shuffles `bytes` bytes of `typesize`-byte elements from `in` into `out` (which must not overlap):
// byte j of element i goes to j * (bytes / typesize) + i; bytes past the last whole element stay
// where they are.
void byte_shuffle(const std::byte* in, std::byte* out, std::size_t bytes, std::size_t typesize);

// Undoes byte_shuffle.
void byte_unshuffle(const std::byte* shuffled, std::byte* out, std::size_t bytes,
                    std::size_t typesize);

}  // namespace zarr_device::codecs
