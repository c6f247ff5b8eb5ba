#include "place/strided_copy.hpp"

#include <algorithm>
#include <cstring>

namespace zarr_device::place {
namespace {

void swap_element(std::byte* p, std::size_t size, std::size_t unit) {
  for (std::size_t u = 0; u < size; u += unit) std::reverse(p + u, p + u + unit);
}

using Loop = CopyLoop;

template <typename Inner>
void for_each_row(const Loop& loop, const std::byte* src, std::byte* dst, Inner inner) {
  const std::size_t nd = loop.shape.size();
  if (nd == 0) {
    inner(src, dst, 1, 0, 0);
    return;
  }
  for (auto e : loop.shape) {
    if (e == 0) return;
  }
  const std::int64_t n = loop.shape[nd - 1];
  const std::int64_t ss = loop.src[nd - 1];
  const std::int64_t ds = loop.dst[nd - 1];
  std::vector<std::int64_t> index(nd - 1, 0);
  while (true) {
    inner(src, dst, n, ss, ds);
    int d = static_cast<int>(nd) - 2;
    for (; d >= 0; --d) {
      src += loop.src[d];
      dst += loop.dst[d];
      if (++index[d] < loop.shape[d]) break;
      src -= loop.src[d] * loop.shape[d];
      dst -= loop.dst[d] * loop.shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

CopyLoop simplify_copy(std::span<const std::int64_t> shape, std::span<const std::int64_t> src,
                       std::span<const std::int64_t> dst) {
  CopyLoop loop;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!loop.shape.empty() && loop.src.back() == src[i] * shape[i] &&
        loop.dst.back() == dst[i] * shape[i]) {
      loop.shape.back() *= shape[i];
      loop.src.back() = src[i];
      loop.dst.back() = dst[i];
      continue;
    }
    loop.shape.push_back(shape[i]);
    loop.src.push_back(src[i]);
    loop.dst.push_back(dst[i]);
  }
  return loop;
}

std::vector<std::int64_t> c_strides(std::span<const std::int64_t> shape, std::size_t element_size) {
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t s = static_cast<std::int64_t>(element_size);
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

bool is_c_contiguous(const StridedView& view, std::size_t element_size) {
  std::int64_t expected = static_cast<std::int64_t>(element_size);
  for (std::size_t i = view.shape.size(); i-- > 0;) {
    if (view.shape[i] != 1 && view.byte_strides[i] != expected) return false;
    expected *= view.shape[i];
  }
  return true;
}

void copy_strided(const std::byte* src, std::span<const std::int64_t> src_strides,
                  const StridedView& destination, std::size_t element_size, std::size_t swap_unit) {
  const Loop loop = simplify_copy(destination.shape, src_strides, destination.byte_strides);
  const auto es = static_cast<std::int64_t>(element_size);
  const bool swap = swap_unit > 1;
  for_each_row(
      loop, src, destination.data,
      [&](const std::byte* s, std::byte* d, std::int64_t n, std::int64_t ss, std::int64_t ds) {
        if (!swap && (n == 1 || (ss == es && ds == es))) {
          std::memcpy(d, s, static_cast<std::size_t>(n) * element_size);
          return;
        }
        for (std::int64_t i = 0; i < n; ++i, s += ss, d += ds) {
          std::memcpy(d, s, element_size);
          if (swap) swap_element(d, element_size, swap_unit);
        }
      });
}

bool contiguous_runs(const StridedView& view, std::size_t element_size, std::size_t min_run,
                     std::vector<std::span<std::byte>>& runs) {
  runs.clear();
  const auto es = static_cast<std::int64_t>(element_size);
  const auto elements = c_strides(view.shape, element_size);  // the view's own C order
  const CopyLoop loop = simplify_copy(view.shape, elements, view.byte_strides);
  if (loop.shape.empty()) {
    runs.emplace_back(view.data, element_size);
    return true;
  }
  for (auto e : loop.shape) {
    if (e == 0) return true;
  }
  if (loop.dst.back() != es) return false;
  const auto run = static_cast<std::size_t>(loop.shape.back()) * element_size;
  if (loop.shape.size() > 1 && run < min_run) return false;
  for_each_row(loop, view.data, view.data,
               [&](const std::byte*, std::byte* d, std::int64_t, std::int64_t, std::int64_t) {
                 runs.emplace_back(d, run);
               });
  return true;
}

void fill_strided(const StridedView& destination, std::span<const std::byte> element) {
  const std::size_t es = element.size();
  std::vector<std::int64_t> zero(destination.shape.size(), 0);
  const Loop loop = simplify_copy(destination.shape, zero, destination.byte_strides);
  const bool all_zero =
      std::all_of(element.begin(), element.end(), [](std::byte b) { return b == std::byte{0}; });
  for_each_row(loop, element.data(), destination.data,
               [&](const std::byte*, std::byte* d, std::int64_t n, std::int64_t, std::int64_t ds) {
                 if (ds == static_cast<std::int64_t>(es) || n == 1) {
                   if (all_zero) {
                     std::memset(d, 0, static_cast<std::size_t>(n) * es);
                     return;
                   }
                   if (es == 1) {
                     std::memset(d, static_cast<int>(element[0]), static_cast<std::size_t>(n));
                     return;
                   }
                 }
                 for (std::int64_t i = 0; i < n; ++i, d += ds) std::memcpy(d, element.data(), es);
               });
}

SelectedSource select_in_c_order(std::span<const std::int64_t> shape,
                                 std::span<const DimSlice> selection, std::size_t element_size) {
  const auto strides = c_strides(shape, element_size);
  SelectedSource out{0, std::vector<std::int64_t>(shape.size())};
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out.offset += selection[i].start * strides[i];
    out.strides[i] = selection[i].step * strides[i];
  }
  return out;
}

bool is_full(std::span<const DimSlice> selection, std::span<const std::int64_t> shape) {
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto& s = selection[i];
    if (s.count != shape[i] || (s.start != 0) || (s.step != 1 && shape[i] > 1)) return false;
  }
  return true;
}

StridedView subview(const StridedView& destination, std::span<const std::int64_t> offsets,
                    std::span<const std::int64_t> shape) {
  StridedView v{destination.data, {shape.begin(), shape.end()}, destination.byte_strides};
  for (std::size_t i = 0; i < offsets.size(); ++i)
    v.data += offsets[i] * destination.byte_strides[i];
  return v;
}

bool is_all_fill(std::span<const std::byte> data, std::span<const std::byte> element) {
  const std::size_t es = element.size();
  if (std::all_of(element.begin(), element.end(), [](std::byte b) { return b == std::byte{0}; })) {
    // Compare word-wise against zero: the common case, and the hot one on writes.
    std::size_t i = 0;
    for (; i + 8 <= data.size(); i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, data.data() + i, 8);
      if (w != 0) return false;
    }
    for (; i < data.size(); ++i) {
      if (data[i] != std::byte{0}) return false;
    }
    return true;
  }
  for (std::size_t i = 0; i + es <= data.size(); i += es) {
    if (std::memcmp(data.data() + i, element.data(), es) != 0) return false;
  }
  return true;
}

void byteswap_in_place(std::span<std::byte> data, std::size_t swap_unit) {
  if (swap_unit <= 1) return;
  for (std::size_t i = 0; i + swap_unit <= data.size(); i += swap_unit) {
    std::reverse(data.data() + i, data.data() + i + swap_unit);
  }
}

}  // namespace zarr_device::place
