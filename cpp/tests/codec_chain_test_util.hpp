// What the codec chain's tests share (test_codec_chain.cpp, test_codec_chain_compression.cpp): a
// selection of a stored chunk decoded through a chain, into a C-contiguous buffer or one with gaps.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "codecs/codec_chain.hpp"
#include "test_util.hpp"

namespace zarr_device {

// Decodes `selection` of `encoded` through `chain` into a fresh C-contiguous buffer (and, where
// `padded`, into a destination with gaps between rows, which must come back unchanged).
inline test::Bytes decode_selection(const codecs::CodecChain& chain, const test::Bytes& encoded,
                                    const std::vector<DimSlice>& selection, bool padded = false) {
  const std::size_t es = chain.spec().dtype->size;
  const auto shape = test::selection_shape(selection);
  if (!padded || shape.empty()) {
    test::Bytes out(test::product(shape) * es, std::byte{0xEE});
    chain.decode_into(Buffer::copy_of(encoded), selection, test::c_view(out, shape, es));
    return out;
  }
  // One element of padding after each innermost row.
  auto strides = test::c_strides(shape, static_cast<std::int64_t>(es));
  const std::int64_t row = (shape.back() + 1) * static_cast<std::int64_t>(es);
  std::int64_t s = row;
  for (std::size_t d = shape.size() - 1; d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  test::Bytes buffer(static_cast<std::size_t>(s), std::byte{0xEE});
  chain.decode_into(Buffer::copy_of(encoded), selection, {buffer.data(), shape, strides});
  test::Bytes out;
  test::for_each_index(shape, [&](const std::vector<std::int64_t>& idx) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    out.insert(out.end(), buffer.begin() + off, buffer.begin() + off + es);
  });
  for (std::int64_t r = 0; r < s; r += row) {  // the gaps
    for (std::size_t b = 0; b < es; ++b) {
      EXPECT_EQ(buffer[static_cast<std::size_t>(r + row) - es + b], std::byte{0xEE});
    }
  }
  return out;
}

}  // namespace zarr_device
