// The device stage of a batch: one transfer of its slot, batched nvCOMP decodes into place or
// into a decode region, and the placement of every chunk (copies merged where adjacent, strided
// kernels, fills); and what a finished batch reports back (decode statuses and sizes).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "kernels.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::cuda {

using gpu::kInPlace;  // (align_up, kStagingAlignment and Leaf come with read_ring.hpp)
using gpu::kPlaced;
using gpu::Route;

void place_on_device(const std::byte* src, const ChunkSpec& spec,
                     std::span<const DimSlice> selection, const StridedView& dst, bool swap,
                     cudaStream_t stream) {
  const std::size_t es = spec.dtype->size;
  const auto source = place::select_in_c_order(spec.shape, selection, es);
  if (!swap && place::is_full(selection, spec.shape) && place::is_c_contiguous(dst, es)) {
    ZD_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, spec.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  launch_strided_copy(
      plan_strided_copy(src + source.offset, source.strides, dst, es, swap, spec.dtype->swap_unit),
      stream);
  ZD_CUDA_CHECK(cudaGetLastError());
}

void Reader::wait_for_consumers(DeviceContext& ctx, cudaStream_t stream) const {
  for (std::size_t i = 0; i < consumers_; ++i) {
    ZD_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(ctx.consumer_events[i]), 0));
  }
}

void Reader::prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves, bool in_place) {
  std::size_t max_chunk = 0;
  std::array<bool, DeviceDecoding::kKinds> present{};
  for (const auto& leaf : leaves) {
    if (leaf.route != Route::kDeviceDecode) continue;
    max_chunk = std::max(max_chunk, leaf.spec->nbytes());
    present[static_cast<std::size_t>(leaf.codec)] = true;
  }
  if (max_chunk == 0) return;
  gpu::PerKind alignment{};
  for (std::size_t c = 0; c < present.size(); ++c) {
    if (!present[c]) continue;
    const auto* d = nvcomp_.decompressor(static_cast<GpuCodec>(c));
    const std::size_t first = d->temp_size(1, max_chunk, max_chunk);
    costs_[c] = {first,
                 std::max<std::size_t>(d->temp_size(2, max_chunk, 2 * max_chunk) - first, 1)};
    alignment[c] = d->output_alignment;
  }
  ctx.use_decode_regions(gpu::plan_decode_regions(leaves, costs_, alignment, ctx.slots_.size(),
                                                  ctx.slots_.front().capacity, ctx.decode_memory(),
                                                  in_place));
}

void Reader::finish(Slot& slot) {
  // A batch an earlier read left without waiting (non_blocking): its failure is that read's,
  // reported to whoever synchronises next, not to this read, whose data are unaffected.
  if (slot.owner != id_) {
    settle_later(device_, slot);
    return;
  }
  if (auto failure = settle(slot); !failure.empty()) throw CodecError(failure);
}

void Reader::submit(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch,
                    std::size_t region_index) {
  // 3. One transfer of the slot's data, then decode and place on the GPU.
  std::size_t used = 0;
  for (const auto& leaf : batch) used = std::max(used, leaf.staging + leaf.staged);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  ZD_CUDA_CHECK(cudaMemcpyAsync(slot.device, slot.host, used, cudaMemcpyHostToDevice, slot.stream));

  // Group the GPU decodes by codec. A group is decoded in as few calls as fit the batch's decode
  // region (a batch is cut where its region is full, so one call unless codecs are mixed).
  std::map<GpuCodec, std::vector<std::size_t>> decodes;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& leaf = batch[i];
    if (leaf.route != Route::kDeviceDecode || leaf.scratch == kPlaced) continue;
    decodes[leaf.codec].push_back(i);
  }
  const BatchArrays& host_arrays = slot.host_arrays;
  const BatchArrays& device_arrays = slot.device_arrays;
  // Whole chunks that land in contiguous, adjacent places of one output are copied together
  // (never across outputs: two allocations adjacent in memory are still two, and one copy may not
  // span them).
  struct CopyMerger {
    cudaStream_t stream;
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    std::size_t n = 0;
    std::size_t target = 0;
    void add(std::byte* d, const std::byte* s, std::size_t bytes, std::size_t of) {
      if (n && of == target && d == dst + n && s == src + n) {
        n += bytes;
        return;
      }
      flush();
      dst = d;
      src = s;
      n = bytes;
      target = of;
    }
    void flush() {
      if (n) ZD_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
      n = 0;
    }
  } copies{slot.stream};
  std::size_t next = 0;
  // A read that defers its wait for the consumers writes its outputs only after it, once its
  // decoding (into scratch) is queued: the decoding overlaps the consumers' work.
  bool waited = !defer_consumers_;
  auto before_writing = [&] {
    if (waited) return;
    wait_for_consumers(ctx, slot.stream);
    waited = true;
  };
  for (const auto& group : decodes) {
    const GpuCodec codec = group.first;
    const std::vector<std::size_t>& members = group.second;  // named: the lambda below uses it
    const auto* d = nvcomp_.decompressor(codec);
    std::size_t max_chunk = 0;
    for (std::size_t i : members) max_chunk = std::max(max_chunk, batch[i].spec->nbytes());
    struct Call {
      std::size_t begin, end;  // in members
      std::size_t temp_bytes;  // then the scratch, from align_up(temp_bytes)
      std::size_t region_bytes;
    };
    std::vector<Call> calls;
    std::size_t region_bytes = 0;
    const auto& cost = costs_[static_cast<std::size_t>(codec)];
    // Greedy calls within the budget; then again with calls of equal length, so that a group
    // a little over the budget is not decoded as one full call and one small one.
    auto plan_calls = [&](std::size_t most) {
      calls.clear();
      region_bytes = 0;
      for (std::size_t b = 0; b < members.size();) {
        std::size_t e = b;
        std::size_t scratch = 0;
        for (; e < members.size() && e - b < most; ++e) {
          auto& leaf = batch[members[e]];
          const std::size_t own = leaf.decode_scratch;
          if (e > b && cost.region(e - b + 1, scratch + own) > ctx.decode_budget) break;
          leaf.scratch = own ? scratch : kInPlace;
          scratch += own;
        }
        const std::size_t temp = d->temp_size(e - b, max_chunk, (e - b) * max_chunk);
        calls.push_back({b, e, temp, align_up(temp, kStagingAlignment) + scratch});
        region_bytes = std::max(region_bytes, calls.back().region_bytes);
        b = e;
      }
    };
    plan_calls(SIZE_MAX);
    if (calls.size() > 1) plan_calls((members.size() + calls.size() - 1) / calls.size());
    auto& region = ctx.decode_region(region_index);
    std::byte* memory = region.acquire(region_bytes, ctx.decode_budget, slot.stream, ctx.streams);
    const std::size_t first = next;
    for (const auto& call : calls) {
      std::byte* scratch = memory + align_up(call.temp_bytes, kStagingAlignment);
      for (std::size_t m = call.begin; m < call.end; ++m, ++next) {
        const auto& leaf = batch[members[m]];
        const std::size_t expected = leaf.spec->nbytes();
        host_arrays.inputs[next] = slot.device + leaf.staging + leaf.header;
        host_arrays.input_sizes[next] = leaf.length - leaf.header - leaf.trailer;
        host_arrays.capacities[next] = expected;
        host_arrays.outputs[next] = leaf.scratch == kInPlace
                                        ? static_cast<void*>(leaf.destination.data)
                                        : scratch + leaf.scratch;
        slot.checks.push_back({leaf.where(), next, expected});
      }
    }
    const std::size_t count = next - first;
    // The arrays travel with the batch (small: a few entries per chunk).
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.inputs + first, host_arrays.inputs + first,
                                  count * sizeof(void*), cudaMemcpyHostToDevice, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.input_sizes + first,
                                  host_arrays.input_sizes + first, count * sizeof(std::size_t),
                                  cudaMemcpyHostToDevice, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.capacities + first, host_arrays.capacities + first,
                                  count * sizeof(std::size_t), cudaMemcpyHostToDevice,
                                  slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.outputs + first, host_arrays.outputs + first,
                                  count * sizeof(void*), cudaMemcpyHostToDevice, slot.stream));
    for (const auto& call : calls) {
      const std::size_t at = first + call.begin;
      const std::size_t n = call.end - call.begin;
      ++decode_calls_;
      decoded_chunks_ += n;
      d->decompress(device_arrays.inputs + at, device_arrays.input_sizes + at,
                    device_arrays.capacities + at, device_arrays.sizes + at, n,
                    call.temp_bytes ? memory : nullptr, call.temp_bytes, device_arrays.outputs + at,
                    device_arrays.statuses + at, slot.stream);
      // Chunks decoded into the scratch move to their place before the next call reuses it.
      std::byte* scratch = memory + align_up(call.temp_bytes, kStagingAlignment);
      for (std::size_t m = call.begin; m < call.end; ++m) {
        auto& leaf = batch[members[m]];
        if (leaf.scratch == kInPlace) continue;
        before_writing();
        if (!leaf.swap && place::is_full(leaf.selection, leaf.spec->shape) &&
            place::is_c_contiguous(leaf.destination, leaf.spec->dtype->size)) {
          // Chunks decoded side by side into the scratch for adjacent places (a tensor's rows)
          // move in one copy, not one per chunk.
          copies.add(leaf.destination.data, scratch + leaf.scratch, leaf.spec->nbytes(),
                     leaf.target);
        } else {
          copies.flush();
          place_on_device(scratch + leaf.scratch, *leaf.spec, leaf.selection, leaf.destination,
                          leaf.swap, slot.stream);
        }
        leaf.scratch = kPlaced;
      }
      copies.flush();  // before the next call reuses the scratch
    }
    region.release(slot.stream);
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.statuses + first, device_arrays.statuses + first,
                                  count * sizeof(int), cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.sizes + first, device_arrays.sizes + first,
                                  count * sizeof(std::size_t), cudaMemcpyDeviceToHost,
                                  slot.stream));
  }

  before_writing();
  for (auto& leaf : batch) {
    if (leaf.scratch == kPlaced) continue;
    const std::byte* staged = slot.device + leaf.staging;
    const std::size_t es = leaf.spec->dtype->size;
    switch (leaf.route) {
      case Route::kFill: {
        const auto& fill = leaf.chain->spec().fill_value;
        const bool zero =
            std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; });
        const auto& dst = leaf.decoded_destination();
        if (zero && place::is_c_contiguous(dst, es)) {
          std::size_t n = es;
          for (auto e : dst.shape) n *= static_cast<std::size_t>(e);
          ZD_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, n, slot.stream));
        } else {
          const std::vector<std::int64_t> zeros(dst.shape.size(), 0);
          launch_strided_copy(plan_strided_copy(staged, zeros, dst, es, false, 1), slot.stream);
          ZD_CUDA_CHECK(cudaGetLastError());
        }
        break;
      }
      case Route::kCopy:
        if (!leaf.swap && place::is_full(leaf.selection, leaf.spec->shape) &&
            place::is_c_contiguous(leaf.destination, es)) {
          copies.add(leaf.destination.data, staged, leaf.spec->nbytes(), leaf.target);
          break;
        }
        place_on_device(staged, *leaf.spec, leaf.selection, leaf.destination, leaf.swap,
                        slot.stream);
        break;
      case Route::kDeviceDecode:  // decoded in place or placed after its call
        break;
      case Route::kCpuDecode: {
        const auto [counts, strides] = staged_layout(leaf);
        const auto& dst = leaf.decoded_destination();
        if (place::is_c_contiguous(dst, es)) {
          ZD_CUDA_CHECK(cudaMemcpyAsync(dst.data, staged, leaf.staged, cudaMemcpyDeviceToDevice,
                                        slot.stream));
        } else {
          launch_strided_copy(plan_strided_copy(staged, strides, dst, es, false, 1), slot.stream);
          ZD_CUDA_CHECK(cudaGetLastError());
        }
        break;
      }
    }
  }
  copies.flush();
  ZD_CUDA_CHECK(cudaEventRecord(slot.done, slot.stream));
  slot.owner = id_;
  slot.busy = true;
}

}  // namespace zarr_device::cuda
