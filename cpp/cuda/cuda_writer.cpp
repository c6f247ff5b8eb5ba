// The GPU write path, the read path's stages backwards: chunks the selection covers whole are laid
// out as stored on the GPU (transposes, byte order), checked there for holding only the fill
// value, compressed there (nvCOMP zstd, standard frames), packed and copied to pinned host memory
// in one transfer per batch; CPU threads add checksums, assemble shards and store them while the
// GPU works on the next batch. Chunks covered in part go through the CPU's read-modify-write.
#include "cuda_writer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "cuda_check.hpp"
#include "device_read/staging_alignment.hpp"
#include "device_read/write_slots.hpp"
#include "devices/device.hpp"
#include "nvcomp_api.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device {
namespace cuda {
namespace {

// Copies a box of device memory (`shape` elements at `src`, byte strides `src_strides`) to
// C-contiguous host memory: two-dimensional copies of its two innermost merged dimensions.
void copy_box_to_host(const std::byte* src, std::span<const std::int64_t> shape,
                      std::span<const std::int64_t> src_strides, std::byte* dst, std::size_t es) {
  const auto dst_strides = place::c_strides(shape, es);
  auto loop = place::simplify_copy(shape, src_strides, dst_strides);
  if (loop.shape.empty() || loop.src.back() != static_cast<std::int64_t>(es)) {
    // Single elements, or an innermost dimension that is not contiguous: add a unit one.
    loop.shape.push_back(1);
    loop.src.push_back(static_cast<std::int64_t>(es));
    loop.dst.push_back(static_cast<std::int64_t>(es));
  }
  const std::size_t r = loop.shape.size();
  const std::int64_t width = loop.shape[r - 1] * static_cast<std::int64_t>(es);
  const std::int64_t height = r >= 2 ? loop.shape[r - 2] : 1;
  const std::int64_t spitch = r >= 2 ? loop.src[r - 2] : width;
  const std::int64_t dpitch = r >= 2 ? loop.dst[r - 2] : width;
  const std::size_t outer_rank = r >= 2 ? r - 2 : 0;
  std::int64_t outer = 1;
  for (std::size_t d = 0; d < outer_rank; ++d) outer *= loop.shape[d];
  for (std::int64_t i = 0; i < outer; ++i) {
    std::int64_t rest = i;
    std::int64_t s = 0;
    std::int64_t t = 0;
    for (std::size_t d = outer_rank; d-- > 0;) {
      const std::int64_t index = rest % loop.shape[d];
      rest /= loop.shape[d];
      s += index * loop.src[d];
      t += index * loop.dst[d];
    }
    ZD_CUDA_CHECK(cudaMemcpy2D(dst + t, static_cast<std::size_t>(dpitch), src + s,
                               static_cast<std::size_t>(spitch), static_cast<std::size_t>(width),
                               static_cast<std::size_t>(height), cudaMemcpyDeviceToHost));
  }
}

}  // namespace

void Writer::plan_item(WriteItem& item, std::span<const std::int64_t> chunk,
                       std::span<const std::int64_t> origin) {
  const auto& meta = array_.metadata();
  const std::size_t rank = meta.shape.size();
  const auto& leaf_shape = leaf_chain_->spec().shape;
  // The leaves of the chunk: one, or the shard's inner chunks in C order.
  std::vector<std::int64_t> per(rank, 1);
  if (shard_) {
    const auto cps = shard_->chunks_per_shard();
    per.assign(cps.begin(), cps.end());
  }
  std::size_t count = 1;
  for (auto n : per) count *= static_cast<std::size_t>(n);
  item.leaves.resize(count);
  std::vector<std::int64_t> coords(rank, 0);
  for (std::size_t i = 0; i < count; ++i) {
    place::c_order_coords(i, per, coords);
    auto& leaf = item.leaves[i];
    leaf.region.resize(rank);
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      const std::int64_t within = coords[d] * leaf_shape[d];
      const std::int64_t start = chunk[d] * meta.chunk_shape[d] + within;
      leaf.region[d] = std::clamp<std::int64_t>(meta.shape[d] - start, 0, leaf_shape[d]);
      if (leaf.region[d] == 0) leaf.outside = true;
      offset += (origin[d] + within) * value_strides_[d];
    }
    if (!leaf.outside) leaf.source = values_ + offset;
  }
}

void Writer::write_through_host(std::span<const DimSlice> selection,
                                const place::GridIntersection::Item& item) {
  const std::size_t es = array_.metadata().dtype->size;
  std::size_t bytes = es;
  std::int64_t offset = 0;
  std::vector<DimSlice> part(selection.size());
  for (std::size_t d = 0; d < selection.size(); ++d) {
    bytes *= static_cast<std::size_t>(item.count[d]);
    offset += item.out_offset[d] * value_strides_[d];
    part[d] = {selection[d].start + item.out_offset[d] * selection[d].step, selection[d].step,
               item.count[d]};
  }
  ByteArray host(bytes);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  copy_box_to_host(values_ + offset, item.count, value_strides_, host.data(), es);
  IoOptions io = options_.io;
  io.threads = 1;
  array_.write(part, host.span(), io);
}

void Writer::write(std::span<const DimSlice> selection, const void* values, std::size_t nbytes) {
  const auto& meta = array_.metadata();
  const std::size_t es = meta.dtype->size;
  const auto value_shape =
      check_selection_and_buffer(selection, meta.shape, es, nbytes, "values hold");
  check_device(device_);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  if (options_.producer_stream != 0) {
    ZD_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(options_.producer_stream)));
  }
  values_ = static_cast<const std::byte*>(values);
  value_strides_ = place::c_strides(value_shape, es);

  // What the GPU can encode: a chunk's chain, or a shard's inner chain.
  const auto& chain = array_.chain();
  const auto& nvcomp = Nvcomp::instance();
  shard_ = chain.shard_layout();
  leaf_chain_ = shard_ ? &shard_->inner() : &chain;
  plan_ = plan_encoding(*leaf_chain_, nvcomp, options_.gpu_encode);
  leaf_bytes_ = leaf_chain_->spec().nbytes();
  if (plan_.compressor) max_output_ = plan_.compressor->max_output(leaf_bytes_);

  const place::GridIntersection grid(selection, meta.chunk_shape);
  std::vector<WriteItem> items;
  std::vector<std::size_t> through_host;
  place::GridIntersection::Item cell;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    grid.at(i, cell);
    bool covers = plan_.on_gpu;
    for (std::size_t d = 0; d < meta.shape.size() && covers; ++d) {
      const std::int64_t inside =
          std::min(meta.chunk_shape[d], meta.shape[d] - cell.chunk[d] * meta.chunk_shape[d]);
      const auto& w = cell.within[d];
      covers = w.start == 0 && w.count == inside && (w.step == 1 || inside == 1);
    }
    if (!covers) {
      through_host.push_back(i);
      continue;
    }
    WriteItem item;
    item.cell = i;
    item.key = array_.chunk_key(cell.chunk);
    plan_item(item, cell.chunk, cell.out_offset);
    items.push_back(std::move(item));
  }

  // Chunks covered in part (or of chains the GPU cannot lay out): read-modify-write on the CPU.
  pool_.parallel_for(through_host.size(), workers_, [&](std::size_t k) {
    place::GridIntersection::Item part;
    grid.at(through_host[k], part);
    write_through_host(selection, part);
  });
  if (items.empty()) return;

  // Batches of whole items that fit a slot; an item too large alone goes through the
  // CPU path.
  const auto context = write_context_for(device_, options_.staging_bytes);
  auto& ctx = *context;
  ctx_ = &ctx;
  // Each of a slot's buffers (laid-out chunks, and their shuffles where the GPU shuffles;
  // compressed outputs; pinned host) holds at most slot_bytes.
  const std::size_t staged_per_leaf = plan_.shuffle > 1 ? 2 * leaf_bytes_ : leaf_bytes_;
  const std::size_t per_leaf =
      device_read::align_up(plan_.compressor ? std::max(max_output_, staged_per_leaf) : leaf_bytes_,
                            device_read::kStagingAlignment);
  std::vector<std::pair<std::size_t, std::size_t>> batches;
  std::vector<std::size_t> too_large;
  for (std::size_t begin = 0; begin < items.size();) {
    std::size_t leaves = 0;
    std::size_t end = begin;
    while (end < items.size()) {
      const std::size_t more = items[end].leaves.size();
      const bool fits =
          (leaves + more) * per_leaf <= ctx.slot_bytes && leaves + more <= kMaxWriteBatch;
      if (!fits) break;
      leaves += more;
      ++end;
    }
    if (end == begin) {
      too_large.push_back(begin);
      ++begin;
      continue;
    }
    batches.emplace_back(begin, end);
    begin = end;
  }
  for (std::size_t k : too_large) {
    grid.at(items[k].cell, cell);
    write_through_host(selection, cell);
  }
  if (batches.empty()) return;

  auto span_of = [&](std::size_t b) {
    return std::span<WriteItem>(items.data() + batches[b].first,
                                batches[b].second - batches[b].first);
  };
  try {
    for (std::size_t b = 0; b < batches.size(); ++b) {
      WriteSlot& slot = ctx.slots[b % device_read::kWriteSlots];
      launch(slot, span_of(b));
      if (b > 0) {
        WriteSlot& previous = ctx.slots[(b - 1) % device_read::kWriteSlots];
        copy_back(previous, span_of(b - 1));
        store(previous, span_of(b - 1));
      }
    }
    const std::size_t last = batches.size() - 1;
    copy_back(ctx.slots[last % device_read::kWriteSlots], span_of(last));
    store(ctx.slots[last % device_read::kWriteSlots], span_of(last));
  } catch (...) {
    for (auto& slot : ctx.slots) {
      cudaStreamSynchronize(slot.stream);
      slot.busy = false;
    }
    throw;
  }
}

}  // namespace cuda

void write_from_cuda(const Array& array, std::span<const DimSlice> selection, int device,
                     const void* values, std::size_t nbytes, const CudaWriteOptions& options) {
  cuda::Writer(array, device, options).write(selection, values, nbytes);
}

}  // namespace zarr_device
