// The device stage of a batch: one transfer of its slot, batched nvCOMP decodes into place or
// into a decode region, and the placement of every chunk (copies merged where adjacent, strided
// kernels, fills); and what a finished batch reports back (decode statuses and sizes).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "kernels.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::cuda {

using device_read::kInPlace;  // (align_up, kStagingAlignment and Leaf come with read_ring.hpp)
using device_read::kPlaced;
using device_read::Route;

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

namespace {

// Whole chunks that land in contiguous, adjacent places of one output are copied together (never
// across outputs: two allocations adjacent in memory are still two, and one copy may not span
// them).
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
};

// Chunks of one decode call decoded into `scratch` (at their `scratch` offsets) moved to their
// places, before the next call reuses it; `before_writing` first.
void place_from_scratch(std::span<Leaf> batch, std::span<const std::size_t> members,
                        std::byte* scratch, CopyMerger& copies,
                        const std::function<void()>& before_writing) {
  ChunkUnshuffles unshuffles;
  for (const std::size_t m : members) {
    auto& leaf = batch[m];
    if (leaf.staging.scratch == kInPlace) continue;
    before_writing();
    const auto& planned = leaf.planned();
    const ChunkSpec& spec = *planned.spec;
    const std::byte* decoded = scratch + leaf.staging.scratch;
    if (leaf.decoding.unshuffle > 1) {
      // Unshuffled into place, or into the scratch's second half and placed from there.
      if (unshuffles_in_place(leaf)) {
        unshuffles.add(decoded, planned.destination.data, spec.nbytes(), leaf.decoding.unshuffle,
                       copies.stream);
        leaf.staging.scratch = kPlaced;
        continue;
      }
      std::byte* unshuffled =
          scratch + leaf.staging.scratch + align_up(spec.nbytes(), kStagingAlignment);
      launch_chunk_unshuffle(decoded, unshuffled, spec.nbytes(), leaf.decoding.unshuffle,
                             copies.stream);
      ZD_CUDA_CHECK(cudaGetLastError());
      decoded = unshuffled;
    }
    if (placed_by_copy(leaf)) {
      // Chunks decoded side by side into the scratch for adjacent places (a tensor's rows) move
      // in one copy, not one per chunk.
      copies.add(planned.destination.data, decoded, spec.nbytes(), planned.target);
    } else {
      copies.flush();
      place_on_device(decoded, spec, planned.selection, planned.destination, leaf.decoding.swap,
                      copies.stream);
    }
    leaf.staging.scratch = kPlaced;
  }
  unshuffles.launch(copies.stream);
  ZD_CUDA_CHECK(cudaGetLastError());
  copies.flush();
}

// The batch's leaves that are not device decodes (fills, copies, CPU decodes) placed from the
// batch's copy on the device (`staged_copy`: where its slot's bytes are).
void place_staged(std::span<Leaf> batch, const std::byte* staged_copy, CopyMerger& copies) {
  const cudaStream_t stream = copies.stream;
  for (auto& leaf : batch) {
    if (leaf.staging.scratch == kPlaced) continue;
    const std::byte* staged = staged_copy + leaf.staging.offset;
    const auto& planned = leaf.planned();
    const std::size_t es = planned.spec->dtype->size;
    switch (leaf.decoding.route) {
      case Route::kFill: {
        const auto& fill = planned.chain->spec().fill_value;
        const bool zero =
            std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; });
        const auto& dst = planned.decoded_destination();
        if (zero && place::is_c_contiguous(dst, es)) {
          std::size_t n = es;
          for (auto e : dst.shape) n *= static_cast<std::size_t>(e);
          ZD_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, n, stream));
        } else {
          const std::vector<std::int64_t> zeros(dst.shape.size(), 0);
          launch_strided_copy(plan_strided_copy(staged, zeros, dst, es, false, 1), stream);
          ZD_CUDA_CHECK(cudaGetLastError());
        }
        break;
      }
      case Route::kCopy:
        if (placed_by_copy(leaf)) {
          copies.add(planned.destination.data, staged, planned.spec->nbytes(), planned.target);
          break;
        }
        place_on_device(staged, *planned.spec, planned.selection, planned.destination,
                        leaf.decoding.swap, stream);
        break;
      case Route::kDeviceDecode:    // decoded in place or placed after its call
      case Route::kIsolatedDecode:  // placed from the decoder's memory (decode_isolated)
        break;
      case Route::kCpuDecode: {
        const auto [counts, strides] = staged_layout(leaf);
        const auto& dst = planned.decoded_destination();
        if (place::is_c_contiguous(dst, es)) {
          ZD_CUDA_CHECK(cudaMemcpyAsync(dst.data, staged, leaf.staging.bytes,
                                        cudaMemcpyDeviceToDevice, stream));
        } else {
          launch_strided_copy(plan_strided_copy(staged, strides, dst, es, false, 1), stream);
          ZD_CUDA_CHECK(cudaGetLastError());
        }
        break;
      }
    }
  }
  copies.flush();
}

// The batch's device decodes still to do, by codec: their indices in the batch, in order.
std::map<GpuCodec, std::vector<std::size_t>> decodes_by_codec(std::span<const Leaf> batch) {
  std::map<GpuCodec, std::vector<std::size_t>> decodes;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].decoding.route != Route::kDeviceDecode || batch[i].staging.scratch == kPlaced) {
      continue;
    }
    decodes[batch[i].decoding.codec].push_back(i);
  }
  return decodes;
}

}  // namespace

void Reader::wait_for_consumers(DeviceContext& ctx, cudaStream_t stream) const {
  for (std::size_t i = 0; i < consumers_; ++i) {
    ZD_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(ctx.consumer_events[i]), 0));
  }
}

void Reader::prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves, bool in_place,
                             bool may_leave_slots, std::size_t batch_bytes) {
  std::size_t max_chunk = 0;
  std::array<bool, DeviceDecoding::kKinds> present{};
  for (const auto& leaf : leaves) {
    if (leaf.decoding.route != Route::kDeviceDecode) continue;
    max_chunk = std::max(max_chunk, leaf.planned().spec->nbytes());
    present[static_cast<std::size_t>(leaf.decoding.codec)] = true;
  }
  off_slot_ = false;
  if (max_chunk == 0) return;
  device_read::PerKind alignment{};
  for (std::size_t c = 0; c < present.size(); ++c) {
    if (!present[c]) continue;
    const auto* d = nvcomp_.decompressor(static_cast<GpuCodec>(c));
    const std::size_t first = d->temp_size(1, max_chunk, max_chunk);
    costs_[c] = {first,
                 std::max<std::size_t>(d->temp_size(2, max_chunk, 2 * max_chunk) - first, 1)};
    alignment[c] = d->output_alignment;
  }
  const std::size_t capacity = ctx.slots_.front().capacity;
  const std::size_t regions = device_read::plan_decode_regions(
      leaves, costs_, alignment, ctx.slots_.size(), batch_bytes, ctx.decode_memory(),
      in_place);  // (and each chunk's scratch)
  off_slot_ = may_leave_slots &&
              device_read::decodes_off_slots(leaves, capacity, ctx.arena_memory(), costs_);
  if (off_slot_) {
    ctx.use_arena();
    off_slot_streams_ = device_read::off_slot_streams(leaves, ctx.arena_memory());
  } else {
    ctx.use_decode_regions(regions);
  }
}

void Reader::finish(Slot& slot) {
  complete_isolated(&slot);  // its chunks for the decoder process placed, before its checks
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
  for (const auto& leaf : batch) used = std::max(used, leaf.staging.offset + leaf.staging.bytes);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  std::byte* const device_copy = ctx.device_copy(slot);
  ZD_CUDA_CHECK(cudaMemcpyAsync(device_copy, slot.host, used, cudaMemcpyHostToDevice, slot.stream));

  // A codec's decodes are decoded in as few calls as fit the batch's decode region (a batch is
  // cut where its region is full, so one call unless codecs are mixed).
  const auto decodes = decodes_by_codec(batch);
  const BatchArrays& host_arrays = slot.host_arrays;
  const BatchArrays& device_arrays = slot.device_arrays;
  CopyMerger copies{slot.stream};
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
    for (std::size_t i : members) {
      max_chunk = std::max(max_chunk, batch[i].planned().spec->nbytes());
    }
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
          const std::size_t own = leaf.staging.scratch_bytes;
          if (e > b && cost.region(e - b + 1, scratch + own) > ctx.decode_budget) break;
          leaf.staging.scratch = own ? scratch : kInPlace;
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
        const std::size_t expected = leaf.planned().spec->nbytes();
        host_arrays.inputs[next] = device_copy + leaf.staging.offset + leaf.decoding.header;
        host_arrays.input_sizes[next] =
            leaf.stored.length - leaf.decoding.header - leaf.decoding.trailer;
        host_arrays.capacities[next] = expected;
        host_arrays.outputs[next] = leaf.staging.scratch == kInPlace
                                        ? static_cast<void*>(leaf.planned().destination.data)
                                        : scratch + leaf.staging.scratch;
        slot.checks.push_back({leaf.planned().where(), next, expected});
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
      place_from_scratch(batch, {members.data() + call.begin, call.end - call.begin},
                         memory + align_up(call.temp_bytes, kStagingAlignment), copies,
                         before_writing);
    }
    region.release(slot.stream);
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.statuses + first, device_arrays.statuses + first,
                                  count * sizeof(int), cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.sizes + first, device_arrays.sizes + first,
                                  count * sizeof(std::size_t), cudaMemcpyDeviceToHost,
                                  slot.stream));
  }

  decode_isolated(ctx, batch, slot.host, device_copy, slot.stream, &slot);
  before_writing();
  place_staged(batch, device_copy, copies);
  ZD_CUDA_CHECK(cudaEventRecord(slot.done, slot.stream));
  slot.owner = id_;
  slot.busy = true;
}

AwaitedBatch Reader::submit_off_slot(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch,
                                     std::size_t batch_index) {
  // 3'. The slot's bytes cross into the decode arena, and the batch decodes and lands there, on a
  // stream of its own: the slot is free again once its bytes and arrays are across.
  std::size_t used = 0;
  for (const auto& leaf : batch) used = std::max(used, leaf.staging.offset + leaf.staging.bytes);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  const auto [stream_index, handle] = ctx.next_decode_stream(off_slot_streams_);
  auto* stream = static_cast<cudaStream_t>(handle);
  if (!waited_streams_[stream_index]) {
    wait_for_consumers(ctx, stream);
    waited_streams_[stream_index] = true;
  }
  DecodeArena& arena = ctx.use_arena();
  const auto decodes = decodes_by_codec(batch);
  std::size_t count = 0;
  for (const auto& [codec, members] : decodes) count += members.size();
  const std::string where = batch.front().planned().where();
  // nvCOMP's memory sized from the frames where they are, in the pinned slot (the device reads
  // them across PCIe), on a stream of its own, before any of the arena is taken: sized on the
  // decode stream, the host would wait for every decode queued there and for the arena's earlier
  // users of the memory the frames cross into.
  if (host_pointers_on_device_ < 0) {
    host_pointers_on_device_ = 0;
    ZD_CUDA_CHECK(cudaDeviceGetAttribute(&host_pointers_on_device_,
                                         cudaDevAttrCanUseHostPointerForRegisteredMem, device_));
  }
  std::map<GpuCodec, std::size_t> sized;
  if (host_pointers_on_device_ != 0) {
    auto* sizing = static_cast<cudaStream_t>(ctx.sizing_stream());
    std::size_t at = 0;
    for (const auto& [codec, members] : decodes) {
      const auto* d = nvcomp_.decompressor(codec);
      if (!d->temp_size_of) continue;
      std::size_t max_chunk = 0;
      std::size_t total = 0;
      for (std::size_t m = 0; m < members.size(); ++m) {
        const auto& leaf = batch[members[m]];
        max_chunk = std::max(max_chunk, leaf.planned().spec->nbytes());
        total += leaf.planned().spec->nbytes();
        slot.host_arrays.inputs[at + m] = slot.host + leaf.staging.offset + leaf.decoding.header;
        slot.host_arrays.input_sizes[at + m] =
            leaf.stored.length - leaf.decoding.header - leaf.decoding.trailer;
      }
      const std::size_t temp =
          d->temp_size_of(slot.host_arrays.inputs + at, slot.host_arrays.input_sizes + at,
                          members.size(), max_chunk, total, sizing);
      if (temp != SIZE_MAX) sized.emplace(codec, temp);
      at += members.size();
    }
  }
  // The slot's bytes, then the batch's arrays (count entries of each).
  const std::size_t arrays_at = align_up(used, kStagingAlignment);
  std::byte* copy = arena.take(arrays_at + BatchArrays::bytes(count), stream, where);
  const BatchArrays device_arrays = BatchArrays::at(copy + arrays_at, count);
  ZD_CUDA_CHECK(cudaMemcpyAsync(copy, slot.host, used, cudaMemcpyHostToDevice, stream));
  const BatchArrays& host_arrays = slot.host_arrays;
  std::vector<PendingCheck> checks;
  checks.reserve(count);
  CopyMerger copies{stream};
  std::size_t next = 0;
  for (const auto& group : decodes) {
    const GpuCodec codec = group.first;
    const std::vector<std::size_t>& members = group.second;
    const auto* d = nvcomp_.decompressor(codec);
    std::size_t max_chunk = 0;
    std::size_t total = 0;
    const std::size_t first = next;
    for (const std::size_t i : members) {
      const auto& leaf = batch[i];
      const std::size_t expected = leaf.planned().spec->nbytes();
      max_chunk = std::max(max_chunk, expected);
      total += expected;
      host_arrays.inputs[next] = copy + leaf.staging.offset + leaf.decoding.header;
      host_arrays.input_sizes[next] =
          leaf.stored.length - leaf.decoding.header - leaf.decoding.trailer;
      host_arrays.capacities[next] = expected;
      checks.push_back({leaf.planned().where(), next, expected});
      ++next;
    }
    const std::size_t n = next - first;
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.inputs + first, host_arrays.inputs + first,
                                  n * sizeof(void*), cudaMemcpyHostToDevice, stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.input_sizes + first,
                                  host_arrays.input_sizes + first, n * sizeof(std::size_t),
                                  cudaMemcpyHostToDevice, stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.capacities + first, host_arrays.capacities + first,
                                  n * sizeof(std::size_t), cudaMemcpyHostToDevice, stream));
    // nvCOMP plans its temporary memory for the worst case (3.05 bytes per decoded byte of zstd,
    // whatever the data) unless it sees the frames: sized from them, the same memory holds 2-3
    // times as many large chunks (bf16 weights need about 1.0), for a synchronisation of this
    // stream once the bytes are across (docs/architecture.md, "What large chunks need").
    std::size_t temp = SIZE_MAX;
    if (const auto it = sized.find(codec); it != sized.end()) {
      temp = it->second;
      ++sized_calls_;
      ++sized_in_slots_;
    } else if (d->temp_size_of) {
      temp = d->temp_size_of(device_arrays.inputs + first, device_arrays.input_sizes + first, n,
                             max_chunk, total, stream);
      if (temp != SIZE_MAX) ++sized_calls_;
    }
    if (temp == SIZE_MAX) temp = d->temp_size(n, max_chunk, total);
    std::size_t scratch = 0;
    for (const std::size_t i : members) {
      auto& leaf = batch[i];
      leaf.staging.scratch = leaf.staging.scratch_bytes ? scratch : kInPlace;
      scratch += leaf.staging.scratch_bytes;
    }
    std::byte* memory = arena.take(align_up(temp, kStagingAlignment) + scratch, stream, where);
    std::byte* scratch_at = memory + align_up(temp, kStagingAlignment);
    for (std::size_t m = 0; m < n; ++m) {
      const auto& leaf = batch[members[m]];
      host_arrays.outputs[first + m] = leaf.staging.scratch == kInPlace
                                           ? static_cast<void*>(leaf.planned().destination.data)
                                           : scratch_at + leaf.staging.scratch;
    }
    ZD_CUDA_CHECK(cudaMemcpyAsync(device_arrays.outputs + first, host_arrays.outputs + first,
                                  n * sizeof(void*), cudaMemcpyHostToDevice, stream));
    // The slot's bytes and arrays are across (its last read queued so far): refilled from here.
    ZD_CUDA_CHECK(cudaEventRecord(slot.done, stream));
    ++decode_calls_;
    decoded_chunks_ += n;
    d->decompress(device_arrays.inputs + first, device_arrays.input_sizes + first,
                  device_arrays.capacities + first, device_arrays.sizes + first, n,
                  temp ? memory : nullptr, temp, device_arrays.outputs + first,
                  device_arrays.statuses + first, stream);
    place_from_scratch(batch, members, scratch_at, copies, [] {});
  }
  decode_isolated(ctx, batch, slot.host, copy, stream, nullptr);
  if (decodes.empty()) ZD_CUDA_CHECK(cudaEventRecord(slot.done, stream));
  place_staged(batch, copy, copies);
  AwaitedBatch awaited(device_, stream, device_arrays.statuses, device_arrays.sizes,
                       std::move(checks), batch_index);
  arena.release(stream);  // after the last work that reads the arena: the statuses' copy
  slot.owner = id_;
  slot.busy = true;
  return awaited;
}

}  // namespace zarr_device::cuda
