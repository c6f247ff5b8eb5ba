// Tests of the place stage: strided copies and fills between views, and the intersection of a
// selection with a regular chunk grid, each checked against a naive model on random cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "test_util.hpp"

namespace zarr_device {
namespace {

using test::Bytes;
using test::product;

constexpr std::byte kSentinel{0xA5};

// A destination view over a buffer of `shape` elements whose dimensions are laid out in a random
// order with random padding, so strides are neither C order nor dense.
struct Destination {
  Bytes buffer;
  StridedView view;
};

Destination random_destination(std::mt19937& rng, const std::vector<std::int64_t>& shape,
                               std::size_t es) {
  const std::size_t nd = shape.size();
  std::vector<std::size_t> order(nd);
  for (std::size_t i = 0; i < nd; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::int64_t> strides(nd);
  std::int64_t stride = static_cast<std::int64_t>(es) * (1 + rng() % 2);  // maybe a gap
  for (std::size_t k = nd; k-- > 0;) {
    const std::size_t d = order[k];
    strides[d] = stride;
    stride *= shape[d] + static_cast<std::int64_t>(rng() % 2);  // maybe padding
  }
  Destination out;
  out.buffer.assign(static_cast<std::size_t>(stride) + es, kSentinel);
  out.view = {out.buffer.data(), shape, strides};
  return out;
}

// Byte offsets a view's elements occupy.
std::vector<std::int64_t> element_offsets(const StridedView& view) {
  std::vector<std::int64_t> offsets;
  test::for_each_index(view.shape, [&](const std::vector<std::int64_t>& idx) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off += idx[d] * view.byte_strides[d];
    offsets.push_back(off);
  });
  return offsets;
}

void swap_units(std::byte* p, std::size_t es, std::size_t unit) {
  if (unit <= 1) return;
  for (std::size_t u = 0; u < es; u += unit) std::reverse(p + u, p + u + unit);
}

// ---------------------------------------------------------------------------------------------
// Strides and views

TEST(Place, CStridesAndContiguity) {
  const std::vector<std::int64_t> shape = {3, 4, 5};
  EXPECT_EQ(place::c_strides(shape, 2), (std::vector<std::int64_t>{40, 10, 2}));
  EXPECT_TRUE(place::c_strides({}, 4).empty());
  std::byte dummy{};
  EXPECT_TRUE(place::is_c_contiguous({&dummy, {3, 4, 5}, {40, 10, 2}}, 2));
  EXPECT_FALSE(place::is_c_contiguous({&dummy, {3, 4, 5}, {80, 10, 2}}, 2));
  EXPECT_FALSE(place::is_c_contiguous({&dummy, {3, 4, 5}, {40, 10, 4}}, 2));
  EXPECT_FALSE(place::is_c_contiguous({&dummy, {3, 5}, {2, 6}}, 2));  // Fortran order
  // Extent-1 dimensions may have any stride.
  EXPECT_TRUE(place::is_c_contiguous({&dummy, {3, 1, 5}, {10, 999, 2}}, 2));
  EXPECT_TRUE(place::is_c_contiguous({&dummy, {}, {}}, 8));
}

TEST(Place, SelectInCOrderAndIsFull) {
  const std::vector<std::int64_t> shape = {4, 6};
  const std::vector<DimSlice> sel = {{1, 2, 2}, {3, 1, 3}};
  const auto s = place::select_in_c_order(shape, sel, 4);
  EXPECT_EQ(s.offset, 1 * 24 + 3 * 4);
  EXPECT_EQ(s.strides, (std::vector<std::int64_t>{48, 4}));

  EXPECT_TRUE(place::is_full(test::full_selection(shape), shape));
  EXPECT_FALSE(place::is_full(std::vector<DimSlice>{{0, 1, 4}, {0, 1, 5}}, shape));
  EXPECT_FALSE(place::is_full(std::vector<DimSlice>{{1, 1, 4}, {0, 1, 6}}, shape));
  EXPECT_FALSE(place::is_full(std::vector<DimSlice>{{0, 2, 4}, {0, 1, 6}}, shape));
  // A step does not matter where a dimension has one element.
  const std::vector<std::int64_t> thin = {1, 6};
  EXPECT_TRUE(place::is_full(std::vector<DimSlice>{{0, 5, 1}, {0, 1, 6}}, thin));
}

TEST(Place, Subview) {
  Bytes data(200);
  StridedView v{data.data(), {10, 5}, {20, 4}};
  const std::vector<std::int64_t> offsets = {2, 3};
  const std::vector<std::int64_t> shape = {4, 2};
  const auto sub = place::subview(v, offsets, shape);
  EXPECT_EQ(sub.data, data.data() + 2 * 20 + 3 * 4);
  EXPECT_EQ(sub.shape, shape);
  EXPECT_EQ(sub.byte_strides, v.byte_strides);
}

TEST(Place, IsAllFill) {
  for (std::size_t n : {0, 1, 7, 8, 9, 64, 67}) {
    SCOPED_TRACE(n);
    Bytes zeros(n, std::byte{0});
    EXPECT_TRUE(place::is_all_fill(zeros, Bytes{std::byte{0}}));
    if (n == 0) continue;
    // A non-zero byte anywhere, including in the tail after the last full word.
    for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      Bytes d = zeros;
      d[at] = std::byte{1};
      EXPECT_FALSE(place::is_all_fill(d, Bytes{std::byte{0}})) << at;
    }
  }
  // Multi-byte elements, zero and not.
  const Bytes one_f32 = test::le_bytes(0x3f800000, 4);
  Bytes ones;
  for (int i = 0; i < 9; ++i) ones.insert(ones.end(), one_f32.begin(), one_f32.end());
  EXPECT_TRUE(place::is_all_fill(ones, one_f32));
  EXPECT_FALSE(place::is_all_fill(ones, Bytes(4, std::byte{0})));
  ones[35] = std::byte{0};  // the last element's top byte: 0x3f -> 0
  EXPECT_FALSE(place::is_all_fill(ones, one_f32));
  EXPECT_TRUE(place::is_all_fill(Bytes(16, std::byte{0}), Bytes(8, std::byte{0})));
  EXPECT_FALSE(place::is_all_fill(test::le_bytes(0x100, 8), Bytes(8, std::byte{0})));
}

TEST(Place, ByteswapInPlace) {
  Bytes data = test::bytes_of("abcdefgh");
  place::byteswap_in_place(data, 1);
  EXPECT_EQ(data, test::bytes_of("abcdefgh"));
  place::byteswap_in_place(data, 2);
  EXPECT_EQ(data, test::bytes_of("badcfehg"));
  data = test::bytes_of("abcdefgh");
  place::byteswap_in_place(data, 4);
  EXPECT_EQ(data, test::bytes_of("dcbahgfe"));
  data = test::bytes_of("abcdefgh");
  place::byteswap_in_place(data, 8);
  EXPECT_EQ(data, test::bytes_of("hgfedcba"));
}

// ---------------------------------------------------------------------------------------------
// copy_strided

TEST(Place, CopyStridedMatchesNaiveModel) {
  std::mt19937 rng(1234);
  struct Type {
    std::size_t size;
    std::size_t swap;
  };
  const Type types[] = {{1, 1}, {2, 1}, {2, 2}, {4, 1}, {4, 4}, {8, 8}, {8, 4}, {16, 8}, {16, 1}};
  for (int iteration = 0; iteration < 600; ++iteration) {
    const auto [es, swap] = types[rng() % std::size(types)];
    const std::size_t nd = rng() % 5;
    std::vector<std::int64_t> src_shape;
    for (std::size_t d = 0; d < nd; ++d) src_shape.push_back(1 + rng() % 6);
    const auto sel = test::random_selection(rng, src_shape);
    const auto counts = test::selection_shape(sel);
    SCOPED_TRACE("es " + std::to_string(es) + " swap " + std::to_string(swap) + " shape " +
                 test::describe(src_shape) + " sel " + test::describe(sel));
    const Bytes src = test::random_bytes(product(src_shape) * es, rng());
    const auto source = place::select_in_c_order(src_shape, sel, es);
    auto dest = random_destination(rng, counts, es);
    place::copy_strided(src.data() + source.offset, source.strides, dest.view, es, swap);

    // Model: each selected element, byte-swapped, at its destination offset; nothing else touched.
    Bytes expected(dest.buffer.size(), kSentinel);
    const Bytes picked = test::naive_select(src, src_shape, sel, es);
    const auto offsets = element_offsets(dest.view);
    ASSERT_EQ(offsets.size() * es, picked.size());
    for (std::size_t k = 0; k < offsets.size(); ++k) {
      std::memcpy(expected.data() + offsets[k], picked.data() + k * es, es);
      swap_units(expected.data() + offsets[k], es, swap);
    }
    ASSERT_EQ(dest.buffer, expected);
  }
}

TEST(Place, CopyStridedMergedAndDegenerateDims) {
  // A fully contiguous copy (all dimensions merge into one run).
  const std::vector<std::int64_t> shape = {3, 4, 5};
  const Bytes src = test::random_bytes(60 * 2, 1);
  Bytes dst(src.size());
  auto view = test::c_view(dst, shape, 2);
  place::copy_strided(src.data(), place::c_strides(shape, 2), view, 2);
  EXPECT_EQ(dst, src);

  // Inner two dimensions contiguous in both, the outer one padded in the destination: the inner
  // pair merges, the outer must not.
  Bytes padded(3 * 48, kSentinel);
  StridedView pv{padded.data(), shape, {48, 10, 2}};
  place::copy_strided(src.data(), place::c_strides(shape, 2), pv, 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        std::equal(src.begin() + i * 40, src.begin() + (i + 1) * 40, padded.begin() + i * 48));
    EXPECT_TRUE(std::all_of(padded.begin() + i * 48 + 40, padded.begin() + (i + 1) * 48,
                            [](std::byte b) { return b == kSentinel; }));
  }

  // Contiguous in the destination but not in the source: must not merge either.
  Bytes dst2(60 * 2, kSentinel);
  auto v2 = test::c_view(dst2, shape, 2);
  const std::vector<std::int64_t> strided_src = {2 * 48, 10, 2};  // every other row of 48 bytes
  Bytes big_src = test::random_bytes(6 * 48, 2);
  place::copy_strided(big_src.data(), strided_src, v2, 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        std::equal(big_src.begin() + i * 96, big_src.begin() + i * 96 + 40, dst2.begin() + i * 40));
  }

  // Extent-1 dimensions with nonsense strides are ignored.
  Bytes one_src = test::random_bytes(10, 3);
  Bytes one_dst(10, kSentinel);
  StridedView v3{one_dst.data(), {1, 5, 1}, {123456, 2, -999}};
  const std::vector<std::int64_t> s3 = {-777, 2, 1 << 30};
  place::copy_strided(one_src.data(), s3, v3, 2);
  EXPECT_EQ(one_dst, one_src);

  // Zero dimensions: one element. A zero extent: nothing.
  Bytes scalar_dst(8, kSentinel);
  place::copy_strided(src.data(), {}, {scalar_dst.data(), {}, {}}, 8);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 8, scalar_dst.begin()));
  Bytes empty_dst(16, kSentinel);
  place::copy_strided(src.data(), std::vector<std::int64_t>{8, 8},
                      {empty_dst.data(), {2, 0}, {8, 8}}, 8);
  EXPECT_EQ(empty_dst, Bytes(16, kSentinel));
}

TEST(Place, CopyStridedByteSwapsComplexHalves) {
  // complex64 big endian: each 4-byte half reversed on its own.
  const Bytes src = test::bytes_of("ABCDabcdEFGHefgh");
  Bytes dst(16);
  const std::vector<std::int64_t> shape = {2};
  auto view = test::c_view(dst, shape, 8);
  place::copy_strided(src.data(), std::vector<std::int64_t>{8}, view, 8, 4);
  EXPECT_EQ(dst, test::bytes_of("DCBAdcbaHGFEhgfe"));
}

// ---------------------------------------------------------------------------------------------
// fill_strided

TEST(Place, FillStridedMatchesNaiveModel) {
  std::mt19937 rng(99);
  for (int iteration = 0; iteration < 300; ++iteration) {
    const std::size_t es = std::vector<std::size_t>{1, 2, 3, 4, 8, 16}[rng() % 6];
    const std::size_t nd = rng() % 4;
    std::vector<std::int64_t> shape;
    for (std::size_t d = 0; d < nd; ++d) shape.push_back(1 + rng() % 7);
    Bytes element = (rng() % 3 == 0) ? Bytes(es, std::byte{0}) : test::random_bytes(es, rng());
    if (rng() % 4 == 0) element.assign(es, std::byte{0x5c});  // all bytes equal, not zero
    SCOPED_TRACE("es " + std::to_string(es) + " shape " + test::describe(shape));
    auto dest = random_destination(rng, shape, es);
    place::fill_strided(dest.view, element);
    Bytes expected(dest.buffer.size(), kSentinel);
    for (auto off : element_offsets(dest.view)) {
      std::memcpy(expected.data() + off, element.data(), es);
    }
    ASSERT_EQ(dest.buffer, expected);
  }
}

TEST(Place, FillStridedContiguousRuns) {
  // The memset fast paths: zero, and one-byte elements.
  Bytes d(100, kSentinel);
  place::fill_strided({d.data() + 10, {80}, {1}}, Bytes{std::byte{7}});
  for (std::size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i], (i >= 10 && i < 90) ? std::byte{7} : kSentinel) << i;
  }
  Bytes z(100, kSentinel);
  place::fill_strided({z.data(), {4, 5}, {20, 4}}, Bytes(4, std::byte{0}));
  for (std::size_t i = 0; i < 80; ++i) EXPECT_EQ(z[i], std::byte{0});
  for (std::size_t i = 80; i < 100; ++i) EXPECT_EQ(z[i], kSentinel);
  // A multi-byte, non-zero element in a contiguous run.
  Bytes w(24, kSentinel);
  place::fill_strided({w.data(), {3, 2}, {8, 4}}, test::le_bytes(0x01020304, 4));
  for (std::size_t i = 0; i < 24; i += 4) EXPECT_EQ(test::le_bits({w.data() + i, 4}), 0x01020304u);
}

// ---------------------------------------------------------------------------------------------
// Chunk grid intersection

// The brute-force model: walk the selected elements in order and group runs in one chunk.
std::vector<place::DimPart> brute_force_parts(const DimSlice& s, std::int64_t extent) {
  std::vector<place::DimPart> parts;
  for (std::int64_t k = 0; k < s.count; ++k) {
    const std::int64_t e = s.start + k * s.step;
    const std::int64_t chunk = e / extent;
    if (!parts.empty() && parts.back().chunk == chunk) {
      ++parts.back().within.count;
    } else {
      parts.push_back({chunk, {e - chunk * extent, s.step, 1}, k});
    }
  }
  return parts;
}

bool same_parts(const std::vector<place::DimPart>& a, const std::vector<place::DimPart>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto& x = a[i];
    const auto& y = b[i];
    if (x.chunk != y.chunk || x.out_offset != y.out_offset || x.within.start != y.within.start ||
        x.within.count != y.within.count ||
        (x.within.count > 1 && x.within.step != y.within.step)) {
      return false;
    }
  }
  return true;
}

TEST(Place, IntersectDimensionMatchesBruteForce) {
  std::mt19937 rng(2024);
  for (int iteration = 0; iteration < 20000; ++iteration) {
    const std::int64_t size = 1 + rng() % 200;
    const std::int64_t extent = 1 + rng() % (iteration % 3 == 0 ? 5 : 40);
    DimSlice s;
    s.start = rng() % size;
    s.step = 1 + rng() % (iteration % 2 ? 4 : 60);
    s.count = (size - 1 - s.start) / s.step + 1;
    s.count = rng() % 5 == 0 ? s.count : static_cast<std::int64_t>(rng() % (s.count + 1));
    const auto parts = place::intersect_dimension(s, extent);
    const auto expected = brute_force_parts(s, extent);
    ASSERT_TRUE(same_parts(parts, expected))
        << "start " << s.start << " step " << s.step << " count " << s.count << " chunk " << extent
        << ": got " << parts.size() << " parts, expected " << expected.size();
  }
  EXPECT_TRUE(place::intersect_dimension({5, 1, 0}, 4).empty());
  // Huge extents and indices do not overflow.
  const std::int64_t big = std::int64_t{1} << 60;
  const auto parts = place::intersect_dimension({big - 2, 1, 4}, big);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].chunk, 0);
  EXPECT_EQ(parts[0].within.count, 2);
  EXPECT_EQ(parts[1].chunk, 1);
  EXPECT_EQ(parts[1].within.start, 0);
  EXPECT_EQ(parts[1].out_offset, 2);
}

TEST(Place, GridIntersectionCoversSelectionExactlyOnce) {
  std::mt19937 rng(77);
  for (int iteration = 0; iteration < 400; ++iteration) {
    const std::size_t nd = rng() % 4;
    std::vector<std::int64_t> shape, chunks;
    for (std::size_t d = 0; d < nd; ++d) {
      shape.push_back(1 + rng() % 12);
      chunks.push_back(1 + rng() % 5);
    }
    const auto sel = test::random_selection(rng, shape, 4);
    const auto counts = test::selection_shape(sel);
    SCOPED_TRACE("shape " + test::describe(shape) + " chunks " + test::describe(chunks) + " sel " +
                 test::describe(sel));
    const place::GridIntersection grid(sel, chunks);
    EXPECT_EQ(grid.rank(), nd);
    std::vector<int> covered(static_cast<std::size_t>(product(counts)), 0);
    std::vector<std::int64_t> previous_chunk;
    place::GridIntersection::Item item;
    for (std::size_t i = 0; i < grid.size(); ++i) {
      grid.at(i, item);
      ASSERT_EQ(item.chunk.size(), nd);
      // C order over the grid.
      if (i > 0) EXPECT_LT(previous_chunk, item.chunk);
      previous_chunk = item.chunk;
      for (std::size_t d = 0; d < nd; ++d) {
        const auto& w = item.within[d];
        EXPECT_EQ(item.count[d], w.count);
        ASSERT_GT(w.count, 0);
        EXPECT_GE(w.start, 0);
        EXPECT_LT(w.start + (w.count - 1) * w.step, chunks[d]);  // inside the chunk
      }
      test::for_each_index(item.count, [&](const std::vector<std::int64_t>& j) {
        std::int64_t linear = 0;
        for (std::size_t d = 0; d < nd; ++d) {
          const std::int64_t out = item.out_offset[d] + j[d];
          const std::int64_t element =
              item.chunk[d] * chunks[d] + item.within[d].start + j[d] * item.within[d].step;
          ASSERT_LT(out, counts[d]);
          ASSERT_EQ(element, sel[d].start + out * sel[d].step);  // the right element goes there
          linear = linear * counts[d] + out;
        }
        ++covered[static_cast<std::size_t>(linear)];
      });
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
  }
}

TEST(Place, GridIntersectionEmptyAndScalar) {
  const std::vector<std::int64_t> chunks = {3, 3};
  const std::vector<DimSlice> empty = {{0, 1, 0}, {0, 1, 4}};
  EXPECT_EQ(place::GridIntersection(empty, chunks).size(), 0u);
  const place::GridIntersection scalar(std::span<const DimSlice>{},
                                       std::span<const std::int64_t>{});
  ASSERT_EQ(scalar.size(), 1u);
  place::GridIntersection::Item item;
  scalar.at(0, item);
  EXPECT_TRUE(item.chunk.empty());
}

}  // namespace
// Found by fuzzing: an empty selection of an array with a huge other dimension built that
// dimension's parts (gigabytes) before finding there was nothing to do.
TEST(Place, EmptySelectionsBuildNothing) {
  const std::vector<DimSlice> selection = {{0, 1, 0}, {0, 1, 666666666}, {0, 1, 5}};
  const std::vector<std::int64_t> chunks = {1, 3, 2};
  const place::GridIntersection grid(selection, chunks);
  EXPECT_EQ(grid.size(), 0u);
  // At the largest extent metadata allows, nothing overflows either.
  const std::int64_t last = std::numeric_limits<std::int64_t>::max() - 1;
  const auto parts = place::intersect_dimension({last, 1, 1}, 4);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].within.count, 1);
  EXPECT_EQ(parts[0].chunk, last / 4);
}

}  // namespace zarr_device
