// The GPU write path, the read path's stages backwards: chunks the selection covers whole are laid
// out as stored on the GPU (transposes, byte order), checked there for holding only the fill
// value, compressed there (nvCOMP zstd, standard frames), packed and copied to pinned host memory
// in one transfer per batch; CPU threads add checksums, assemble shards and store them while the
// GPU works on the next batch. Chunks covered in part go through the CPU's read-modify-write.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>

#include "codecs/codec_chain.hpp"
#include "codecs/shard_layout.hpp"
#include "cuda_check.hpp"
#include "device_memory.hpp"
#include "device_read/staging_alignment.hpp"
#include "device_read/write_slots.hpp"
#include "devices/device.hpp"
#include "engine/thread_pool.hpp"
#include "kernels.hpp"
#include "nvcomp_api.hpp"
#include "place/chunk_grid.hpp"
#include "place/strided_copy.hpp"
#include "write_plan.hpp"
#include "write_ring.hpp"
#include "zarr_device/cuda.hpp"

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

class Writer {
 public:
  Writer(const Array& array, int device, const CudaWriteOptions& options)
      : array_(array),
        device_(device),
        options_(options),
        workers_(engine::worker_count(options.io.threads)),
        pool_(engine::ThreadPool::shared(workers_)) {}

  void write(std::span<const DimSlice> selection, const void* values, std::size_t nbytes);

 private:
  // Leaves of a chunk the selection covers whole (its origin at `origin` in `values`).
  void plan_item(WriteItem& item, std::span<const std::int64_t> chunk,
                 std::span<const std::int64_t> origin);
  void launch(WriteSlot& slot, std::span<WriteItem> items);
  void copy_back(WriteSlot& slot, std::span<WriteItem> items);
  void store(WriteSlot& slot, std::span<WriteItem> items);
  void write_through_host(std::span<const DimSlice> selection,
                          const place::GridIntersection::Item& item);
  [[nodiscard]] std::string where(const std::string& key) const {
    return array_.describe() + ", chunk '" + key + "'";
  }

  const Array& array_;
  int device_;
  CudaWriteOptions options_;
  std::size_t workers_;
  engine::ThreadPool& pool_;
  const codecs::CodecChain* leaf_chain_ = nullptr;  // the chain each leaf is encoded with
  const codecs::ShardLayout* shard_ = nullptr;
  EncodePlan plan_;
  std::size_t leaf_bytes_ = 0;
  std::size_t max_output_ = 0;  // the compressor's bound for one leaf
  const std::byte* values_ = nullptr;
  std::vector<std::int64_t> value_strides_;
  WriteContext* ctx_ = nullptr;
};

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

void Writer::launch(WriteSlot& slot, std::span<WriteItem> items) {
  const std::size_t es = leaf_chain_->spec().dtype->size;
  const auto& leaf_shape = leaf_chain_->spec().shape;
  auto host = WriteArrays::at(slot.host + ctx_->slot_bytes);
  auto dev = WriteArrays::at(slot.arrays);
  const bool compress = plan_.compressor != nullptr;
  // Place every leaf: laid out in staging, or read where it is.
  std::size_t staged = 0;
  std::size_t outputs = 0;
  std::size_t host_bytes = 0;
  std::size_t n = 0;
  for (auto& item : items) {
    for (auto& leaf : item.leaves) {
      if (leaf.outside) continue;
      leaf.index = n++;
      const bool whole = leaf.region == leaf_shape;
      const StridedView in_values{const_cast<std::byte*>(leaf.source), leaf.region, value_strides_};
      const bool direct =
          whole && !plan_.swap && is_identity(plan_.order) &&
          place::is_c_contiguous(in_values, es) &&
          (!compress ||
           reinterpret_cast<std::uintptr_t>(leaf.source) % plan_.compressor->input_alignment == 0);
      if (direct) {
        leaf.staging = SIZE_MAX;
      } else {
        leaf.staging = staged;
        staged += device_read::align_up(leaf_bytes_, device_read::kStagingAlignment);
      }
      if (compress) {
        leaf.output = outputs;
        outputs += device_read::align_up(max_output_, device_read::kStagingAlignment);
      } else {
        leaf.host = host_bytes;
        host_bytes += device_read::align_up(leaf_bytes_, device_read::kStagingAlignment);
      }
    }
  }
  slot.leaves = n;
  std::byte* staging = slot.staging.reserve(std::max(staged, compress ? outputs : 0) +
                                            device_read::kStagingAlignment);
  std::byte* compressed = compress ? slot.compressed.reserve(outputs) : nullptr;
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  // Lay out what is not stored as it lies: fill value around edge regions, transposes, byte order.
  std::memcpy(host.fill, plan_.stored_fill.data(), plan_.stored_fill.size());
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev.fill, host.fill, plan_.stored_fill.size(),
                                cudaMemcpyHostToDevice, slot.stream));
  const std::vector<std::int64_t> zeros(leaf_shape.size(), 0);
  for (auto& item : items) {
    for (auto& leaf : item.leaves) {
      if (leaf.outside) continue;
      if (leaf.staging == SIZE_MAX) {
        leaf.input = leaf.source;
      } else {
        std::byte* at = staging + leaf.staging;
        leaf.input = at;
        if (leaf.region != leaf_shape) {
          launch_strided_copy(
              plan_strided_copy(dev.fill, zeros, StridedView{at, leaf_shape, plan_.stored_strides},
                                es, false, 1),
              slot.stream);
        }
        launch_strided_copy(plan_strided_copy(leaf.source, value_strides_,
                                              StridedView{at, leaf.region, plan_.stored_strides},
                                              es, plan_.swap, plan_.swap_unit),
                            slot.stream);
        ZD_CUDA_CHECK(cudaGetLastError());
      }
      host.inputs[leaf.index] = leaf.input;
      host.input_sizes[leaf.index] = leaf_bytes_;
      if (compress) host.outputs[leaf.index] = compressed + leaf.output;
    }
  }
  if (n == 0) {
    ZD_CUDA_CHECK(cudaEventRecord(slot.encoded, slot.stream));
    ZD_CUDA_CHECK(cudaEventRecord(slot.copied, slot.stream));
    slot.busy = true;
    return;
  }
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev.inputs, host.inputs, n * sizeof(void*), cudaMemcpyHostToDevice,
                                slot.stream));
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev.input_sizes, host.input_sizes, n * sizeof(std::size_t),
                                cudaMemcpyHostToDevice, slot.stream));
  if (compress) {
    ZD_CUDA_CHECK(cudaMemcpyAsync(dev.outputs, host.outputs, n * sizeof(void*),
                                  cudaMemcpyHostToDevice, slot.stream));
  }
  ZD_CUDA_CHECK(cudaMemsetAsync(dev.flags, 0, n * sizeof(int), slot.stream));
  launch_mark_non_fill(dev.inputs, dev.input_sizes, n, host.fill, static_cast<int>(es), dev.flags,
                       slot.stream);
  ZD_CUDA_CHECK(cudaGetLastError());
  if (compress) {
    const std::size_t temp_bytes = plan_.compressor->temp_size(n, leaf_bytes_, n * leaf_bytes_);
    std::byte* temp = temp_bytes
                          ? ctx_->temp.acquire(temp_bytes, temp_bytes, slot.stream, ctx_->streams)
                          : nullptr;
    plan_.compressor->compress(dev.inputs, dev.input_sizes, leaf_bytes_, n, temp, temp_bytes,
                               dev.outputs, dev.output_sizes, dev.statuses, slot.stream);
    if (temp) ctx_->temp.release(slot.stream);
    // The staging's laid-out chunks are consumed: the packed output goes there.
    launch_pack(dev.outputs, dev.output_sizes, n, staging, dev.offsets, slot.stream);
    ZD_CUDA_CHECK(cudaGetLastError());
    ZD_CUDA_CHECK(cudaMemcpyAsync(host.output_sizes, dev.output_sizes, n * sizeof(std::size_t),
                                  cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host.offsets, dev.offsets, n * sizeof(std::size_t),
                                  cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host.statuses, dev.statuses, n * sizeof(int),
                                  cudaMemcpyDeviceToHost, slot.stream));
  } else {
    // Sizes are known: the chunks cross now (adjacent ones in one copy).
    const std::byte* src = nullptr;
    std::size_t dst = 0;
    std::size_t len = 0;
    auto flush = [&] {
      if (len) {
        ZD_CUDA_CHECK(
            cudaMemcpyAsync(slot.host + dst, src, len, cudaMemcpyDeviceToHost, slot.stream));
      }
      len = 0;
    };
    for (auto& item : items) {
      for (auto& leaf : item.leaves) {
        if (leaf.outside) continue;
        if (len && leaf.input == src + len && leaf.host == dst + len) {
          len += leaf_bytes_;
          continue;
        }
        flush();
        src = leaf.input;
        dst = leaf.host;
        len = leaf_bytes_;
      }
    }
    flush();
  }
  ZD_CUDA_CHECK(
      cudaMemcpyAsync(host.flags, dev.flags, n * sizeof(int), cudaMemcpyDeviceToHost, slot.stream));
  ZD_CUDA_CHECK(cudaEventRecord(slot.encoded, slot.stream));
  if (!compress) ZD_CUDA_CHECK(cudaEventRecord(slot.copied, slot.stream));
  slot.busy = true;
}

// Once the sizes are known: the packed compressed chunks cross to the host in one copy.
void Writer::copy_back(WriteSlot& slot, std::span<WriteItem> items) {
  if (plan_.compressor == nullptr || slot.leaves == 0) return;
  ZD_CUDA_CHECK(cudaEventSynchronize(slot.encoded));
  const auto host = WriteArrays::at(slot.host + ctx_->slot_bytes);
  for (const auto& item : items) {
    for (const auto& leaf : item.leaves) {
      if (leaf.outside) continue;
      const int status = host.statuses[leaf.index];
      if (status != 0) {
        throw CodecError(where(item.key) + ": the GPU compressor reported status " +
                         std::to_string(status));
      }
    }
  }
  const std::size_t last = slot.leaves - 1;
  const std::size_t total = host.offsets[last] + host.output_sizes[last];
  if (total > ctx_->slot_bytes) {
    throw CodecError(array_.describe() + ": compressed chunks of " + std::to_string(total) +
                     " bytes exceed a write slot of " + std::to_string(ctx_->slot_bytes) +
                     " bytes (half the staging); raise staging_bytes");
  }
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  ZD_CUDA_CHECK(
      cudaMemcpyAsync(slot.host, slot.staging.data(), total, cudaMemcpyDeviceToHost, slot.stream));
  ZD_CUDA_CHECK(cudaEventRecord(slot.copied, slot.stream));
}

// Checksums, shard assembly and the store, on CPU threads.
void Writer::store(WriteSlot& slot, std::span<WriteItem> items) {
  ZD_CUDA_CHECK(cudaEventSynchronize(slot.copied));
  slot.busy = false;
  const auto host = WriteArrays::at(slot.host + ctx_->slot_bytes);
  const bool compress = plan_.compressor != nullptr;
  const auto b2b = leaf_chain_->bytes_to_bytes();
  // Suffixes (checksums) are appended as a chunk is copied into its shard: no copy of the chunk
  // per codec.
  const auto cpu_codecs = b2b.subspan(plan_.cpu_codecs_from);
  const bool only_suffixes = std::all_of(cpu_codecs.begin(), cpu_codecs.end(),
                                         [](const auto& c) { return c->suffix_size() > 0; });
  std::size_t suffix_bytes = 0;
  for (const auto& codec : cpu_codecs) suffix_bytes += codec->suffix_size();
  Store& store = *array_.store();
  pool_.parallel_for(items.size(), workers_, [&](std::size_t i) {
    auto& item = items[i];
    try {
      // Views of the pinned memory, which stays untouched until this function returns: the
      // shard assembly or the store's write is the one copy.
      auto produced = [&](const WriteLeaf& leaf) -> std::optional<std::span<const std::byte>> {
        if (leaf.outside || host.flags[leaf.index] == 0) return std::nullopt;
        if (compress)
          return std::span{slot.host + host.offsets[leaf.index], host.output_sizes[leaf.index]};
        return std::span{slot.host + leaf.host, leaf_bytes_};
      };
      std::optional<Buffer> value;
      std::optional<codecs::ShardLayout::Pieces> pieces;  // a shard written as its pieces
      if (shard_ && only_suffixes) {
        std::vector<std::optional<std::size_t>> sizes(item.leaves.size());
        for (std::size_t j = 0; j < item.leaves.size(); ++j) {
          if (auto bytes = produced(item.leaves[j])) sizes[j] = bytes->size() + suffix_bytes;
        }
        value = shard_->assemble(sizes, [&](std::size_t j, std::span<std::byte> place) {
          const auto bytes = *produced(item.leaves[j]);
          std::memcpy(place.data(), bytes.data(), bytes.size());
          std::size_t n = bytes.size();
          for (const auto& codec : cpu_codecs) {
            const auto suffix = codec->suffix(Buffer({}, place.data(), n));
            std::memcpy(place.data() + n, suffix->data(), suffix->size());
            n += suffix->size();
          }
        });
      } else {
        std::vector<std::optional<Buffer>> encoded(item.leaves.size());
        for (std::size_t j = 0; j < item.leaves.size(); ++j) {
          const auto bytes = produced(item.leaves[j]);
          if (!bytes) continue;
          Buffer chunk({}, bytes->data(), bytes->size());
          for (const auto& codec : cpu_codecs) chunk = codec->encode(chunk);
          encoded[j] = std::move(chunk);
        }
        if (shard_) {
          pieces = shard_->pieces(std::move(encoded));
        } else {
          value = std::move(encoded[0]);
        }
      }
      // Under the chunk's lock, like every chunk write, so that a read-modify-write of the same
      // chunk elsewhere cannot put back what it read before this write.
      const auto lock = store.lock_chunk(array_.path(), item.key);
      if (pieces) {
        store.set_pieces(item.key, pieces->parts);
      } else if (value) {
        store.set(item.key, value->span());
      } else {
        store.erase(item.key);
      }
    } catch (Error& e) {
      e.add_context(where(item.key));
      throw;
    }
  });
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
  // Each of a slot's buffers (laid-out chunks, compressed outputs, pinned host) holds at most
  // slot_bytes.
  const std::size_t per_leaf =
      device_read::align_up(plan_.compressor ? std::max(max_output_, leaf_bytes_) : leaf_bytes_,
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

}  // namespace
}  // namespace cuda

void write_from_cuda(const Array& array, std::span<const DimSlice> selection, int device,
                     const void* values, std::size_t nbytes, const CudaWriteOptions& options) {
  cuda::Writer(array, device, options).write(selection, values, nbytes);
}

}  // namespace zarr_device
