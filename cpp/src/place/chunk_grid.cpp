#include "place/chunk_grid.hpp"

namespace zarr_device::place {

std::vector<DimPart> intersect_dimension(const DimSlice& s, std::int64_t extent) {
  std::vector<DimPart> parts;
  if (s.count <= 0) return parts;
  const std::int64_t last = s.start + (s.count - 1) * s.step;
  std::int64_t k = 0;  // index of the next selected element
  while (k < s.count) {
    const std::int64_t element = s.start + k * s.step;
    const std::int64_t chunk = element / extent;
    // Selected elements in [element, element + span): to the chunk's end or the selection's.
    // Written so that nothing overflows near the largest extents (2^63 - 1) metadata may give.
    const std::int64_t left_in_chunk = extent - (element - chunk * extent);
    const std::int64_t span = std::min(left_in_chunk, last - element + 1);
    const std::int64_t n = (span - 1) / s.step + 1;
    parts.push_back({chunk, {element - chunk * extent, s.step, n}, k});
    k += n;
  }
  return parts;
}

std::size_t c_order_index(std::span<const std::int64_t> coords,
                          std::span<const std::int64_t> shape) {
  std::size_t linear = 0;
  for (std::size_t d = 0; d < coords.size(); ++d) {
    linear = linear * static_cast<std::size_t>(shape[d]) + static_cast<std::size_t>(coords[d]);
  }
  return linear;
}

void c_order_coords(std::size_t index, std::span<const std::int64_t> shape,
                    std::span<std::int64_t> coords) {
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto extent = static_cast<std::size_t>(shape[d]);
    coords[d] = static_cast<std::int64_t>(index % extent);
    index /= extent;
  }
}

GridIntersection::GridIntersection(std::span<const DimSlice> selection,
                                   std::span<const std::int64_t> chunk_shape) {
  // An empty selection touches no chunk: the other dimensions' parts (which metadata can make
  // huge) are not built.
  for (const auto& s : selection) {
    if (s.count == 0) {
      size_ = 0;
      return;
    }
  }
  for (std::size_t d = 0; d < selection.size(); ++d) {
    parts_.push_back(intersect_dimension(selection[d], chunk_shape[d]));
    size_ *= parts_.back().size();
  }
}

void GridIntersection::at(std::size_t i, Item& item) const {
  const std::size_t nd = parts_.size();
  item.chunk.resize(nd);
  item.within.resize(nd);
  item.out_offset.resize(nd);
  item.count.resize(nd);
  for (std::size_t d = nd; d-- > 0;) {
    const auto& dim = parts_[d];
    const auto& part = dim[i % dim.size()];
    i /= dim.size();
    item.chunk[d] = part.chunk;
    item.within[d] = part.within;
    item.out_offset[d] = part.out_offset;
    item.count[d] = part.within.count;
  }
}

}  // namespace zarr_device::place
