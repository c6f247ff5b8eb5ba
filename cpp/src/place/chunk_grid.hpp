// Which chunks of a regular grid a selection touches, and for each, which of its elements and
// where they go in the output. Used for the array's chunk grid and for a shard's inner grid.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "zarr_device/strided.hpp"

namespace zarr_device::place {

// The part of one dimension's selection that falls in one chunk.
struct DimPart {
  std::int64_t chunk;       // chunk index along the dimension
  DimSlice within;          // the selected elements inside that chunk
  std::int64_t out_offset;  // where the first of them goes in the output
};

// The chunks along one dimension that hold at least one selected element.
std::vector<DimPart> intersect_dimension(const DimSlice& selection, std::int64_t chunk_extent);

// The position of `coords` in a C-ordered (row-major) grid of `shape`: how a shard's index orders
// its inner chunks, and how every reader and writer finds one of them.
std::size_t c_order_index(std::span<const std::int64_t> coords,
                          std::span<const std::int64_t> shape);
// The inverse: the coordinates (into `coords`, of the grid's rank) of position `index`.
void c_order_coords(std::size_t index, std::span<const std::int64_t> shape,
                    std::span<std::int64_t> coords);

// The Cartesian product of the per-dimension parts, addressable by a linear index so that workers
// can pull chunks from one counter without building a list of them.
class GridIntersection {
 public:
  GridIntersection(std::span<const DimSlice> selection, std::span<const std::int64_t> chunk_shape);

  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::size_t rank() const { return parts_.size(); }

  struct Item {
    std::vector<std::int64_t> chunk;       // chunk grid coordinates
    std::vector<DimSlice> within;          // selection inside the chunk
    std::vector<std::int64_t> out_offset;  // offset of the region in the output
    std::vector<std::int64_t> count;       // shape of the region
  };
  // Fills `item` for the i-th chunk (C order over the grid).
  void at(std::size_t i, Item& item) const;

 private:
  std::vector<std::vector<DimPart>> parts_;
  std::size_t size_ = 1;
};

}  // namespace zarr_device::place
