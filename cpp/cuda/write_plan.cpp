#include "write_plan.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "place/strided_copy.hpp"

namespace zarr_device::cuda {

EncodePlan plan_encoding(const codecs::CodecChain& chain, const Nvcomp& nvcomp, GpuEncode mode) {
  EncodePlan plan;
  const ChunkSpec& spec = chain.spec();
  const std::size_t rank = spec.shape.size();
  auto order = chain.stored_order();
  if (!order) {
    plan.order.resize(rank);
    std::iota(plan.order.begin(), plan.order.end(), std::size_t{0});
    return plan;
  }
  plan.order = std::move(*order);
  const auto layout = chain.array_to_bytes().plain_layout();
  if (!layout) return plan;
  const std::size_t es = spec.dtype->size;
  plan.swap = *layout == Endian::kBig && spec.dtype->swap_unit > 1;
  plan.swap_unit = plan.swap ? spec.dtype->swap_unit : 1;
  plan.stored_fill = spec.fill_value;
  if (plan.swap) {
    for (std::size_t u = 0; u < es; u += plan.swap_unit) {
      std::reverse(plan.stored_fill.begin() + static_cast<std::ptrdiff_t>(u),
                   plan.stored_fill.begin() + static_cast<std::ptrdiff_t>(u + plan.swap_unit));
    }
  }
  std::vector<std::int64_t> stored_shape(rank);
  for (std::size_t i = 0; i < rank; ++i) stored_shape[i] = spec.shape[plan.order[i]];
  const auto stored_c = place::c_strides(stored_shape, es);
  plan.stored_strides.resize(rank);
  for (std::size_t i = 0; i < rank; ++i) plan.stored_strides[plan.order[i]] = stored_c[i];
  const auto b2b = chain.bytes_to_bytes();
  // A byte shuffle right before the compressor is done on the GPU too (where the chunk is whole
  // elements of it: otherwise the CPU's codec reports the chunk), so that only compressed bytes
  // cross to the host.
  std::size_t first = 0;
  std::size_t shuffle = 0;
  if (b2b.size() >= 2 && b2b[0]->device_unshuffle() > 0 &&
      spec.nbytes() % b2b[0]->device_unshuffle() == 0) {
    shuffle = b2b[0]->device_unshuffle();
    first = 1;
  }
  const auto device_codec = b2b.size() > first ? b2b[first]->device_encoding() : std::nullopt;
  // libzstd's frames of shuffled chunks (16 KiB blocks, the low byte planes stored raw) read
  // back onto a GPU faster than nvCOMP's, whose large blocks it decodes slowly: under kAuto those
  // chunks cross raw and CPU threads compress them.
  const bool gpu_compresses = mode == GpuEncode::kOn || (mode == GpuEncode::kAuto && shuffle <= 1);
  if (gpu_compresses && device_codec) {
    const auto* compressor = nvcomp.compressor(*device_codec);
    if (compressor && spec.nbytes() > 0 && spec.nbytes() <= compressor->max_chunk) {
      plan.compressor = compressor;
      plan.shuffle = shuffle;
      plan.cpu_codecs_from = first + 1;
    }
  }
  plan.on_gpu = es <= 16;
  return plan;
}

bool is_identity(std::span<const std::size_t> order) {
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != i) return false;
  }
  return true;
}

}  // namespace zarr_device::cuda
