// Moving elements between strided views: the "place" stage. Decoded chunks are copied (or filled)
// straight into their region of the output, whatever the selection's steps and the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "zarr_device/strided.hpp"

namespace zarr_device::place {

// A copy's dimensions with extent-1 dimensions dropped and dimensions contiguous in both source
// and destination merged, so that the innermost loop is as long as possible.
struct CopyLoop {
  std::vector<std::int64_t> shape, src, dst;
};
CopyLoop simplify_copy(std::span<const std::int64_t> shape, std::span<const std::int64_t> src,
                       std::span<const std::int64_t> dst);

std::vector<std::int64_t> c_strides(std::span<const std::int64_t> shape, std::size_t element_size);

// True when the view covers one C-ordered run of bytes.
bool is_c_contiguous(const StridedView& view, std::size_t element_size);

// Copies the elements of a source view (src + strides, the shape of `destination`) into
// `destination`. `swap_unit` > 1 reverses the bytes of each swap_unit-sized piece (a byte order
// change; complex numbers swap each half).
void copy_strided(const std::byte* src, std::span<const std::int64_t> src_strides,
                  const StridedView& destination, std::size_t element_size,
                  std::size_t swap_unit = 1);

// The view's memory as runs of contiguous bytes in C order of its elements, when every run is at
// least `min_run` bytes long (or the view is one run); false otherwise (`runs` is then undefined).
bool contiguous_runs(const StridedView& view, std::size_t element_size, std::size_t min_run,
                     std::vector<std::span<std::byte>>& runs);

// Writes `element` into every position of `destination`.
void fill_strided(const StridedView& destination, std::span<const std::byte> element);

// Applies a selection to a C-contiguous chunk of `shape`: the base pointer offset and the strides
// of the selected elements.
struct SelectedSource {
  std::int64_t offset;
  std::vector<std::int64_t> strides;
};
SelectedSource select_in_c_order(std::span<const std::int64_t> shape,
                                 std::span<const DimSlice> selection, std::size_t element_size);

// True when the selection takes every element of `shape` in order.
bool is_full(std::span<const DimSlice> selection, std::span<const std::int64_t> shape);

// The view of `destination`'s elements shifted by `offsets` and cut to `shape` (a sub-region).
StridedView subview(const StridedView& destination, std::span<const std::int64_t> offsets,
                    std::span<const std::int64_t> shape);

// True when every element of `data` equals `element` (a chunk that need not be stored).
bool is_all_fill(std::span<const std::byte> data, std::span<const std::byte> element);

void byteswap_in_place(std::span<std::byte> data, std::size_t swap_unit);

}  // namespace zarr_device::place
