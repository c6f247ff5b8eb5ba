// The pipeline of a read onto a CUDA GPU. The host stages (cpp/src/device_read: plan, route, batch,
// fetch and check) fill batches of chunks into pinned staging slots on the thread pool, ahead of
// the device stage (read_submit.cpp: each slot crosses to the GPU in one transfer, nvCOMP decodes
// what it can in batched calls, small kernels place every chunk) and of the hand-on of complete
// outputs (the run stage, read_run.cpp). One read can span many arrays: their chunks are one
// stream through the ring.
#include "cuda_reader.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <set>
#include <span>
#include <utility>

#include "cuda_check.hpp"
#include "device_memory.hpp"
#include "device_read/read_staging.hpp"
#include "kernels.hpp"
#include "shared_decoder.hpp"

namespace zarr_device {
namespace cuda {

device_read::DeviceDecoders present_decoders(const Nvcomp& nvcomp, int device) {
  device_read::DeviceDecoders decoders;
  // The decoder process loads the nvCOMP this process found (ZARR_DEVICE_NVCOMP_LIBRARY is
  // inherited), so it decodes the same kinds.
  const bool isolated = SharedDecoder::of(device).available();
  for (std::size_t k = 0; k < DeviceDecoding::kKinds; ++k) {
    decoders.present[k] = nvcomp.decompressor(static_cast<GpuCodec>(k)) != nullptr;
    decoders.isolated[k] = isolated && decoders.present[k];
  }
  return decoders;
}

void Reader::fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch) {
  const auto decoded = device_read::fetch_batch(batch, slot.host, pool_, workers_);
  // Rare (unusual framing): chunks decoded on the CPU go to their place by a synchronous detour
  // through a temporary device buffer.
  if (decoded.empty()) return;
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  for (const auto& d : decoded) {
    // On the slot's stream, idle while its batch is fetched: no other read waits for this.
    if (defer_consumers_) wait_for_consumers(ctx, slot.stream);
    place_cpu_decoded(ctx, slot.stream, batch[d.leaf], d.bytes);
  }
}

void Reader::read(std::span<const device_read::ReadTarget> targets,
                  std::span<const std::uintptr_t> streams,
                  const std::function<void(std::size_t)>& completed, bool complete_on_host) {
  ReadTrace trace;
  trace.start = std::chrono::steady_clock::now();
  trace.targets = targets.size();
  const ReadsInFlight in_flight(device_);
  check_device(device_);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  // Plan: the read's chunks (read::ReadPlan) laid out as leaves, each with its route.
  auto leaves = device_read::plan_reads(targets, present_decoders(nvcomp_, device_),
                                        options_.gpu_decode, pool_, workers_);
  trace.planned = std::chrono::steady_clock::now();
  // Route: what GPUDirect Storage reads straight from files, the rest through the ring.
  leaves = route(targets, std::move(leaves), streams);
  trace.leaves = leaves.size();
  // A read that may complete in stream order: it returns once queued, even with device decodes
  // when the caller does not wait for them (non_blocking); see the end of run().
  const bool may_stream_order = !completed && !complete_on_host && !streams.empty();
  // Layout: decode sharing, parts, the ring lent and the batches (the device plan).
  DevicePlan plan = lay_out(leaves, streams, may_stream_order, in_flight);
  trace.laid_out = std::chrono::steady_clock::now();
  trace.batch_target = plan.batch_target;
  trace.shared = plan.shared;
  trace.parted = plan.parted;
  // Run: fetch on the pool, submit, finish, hand on.
  run(targets, leaves, plan, streams, may_stream_order, completed, trace);
}

void Reader::abandon(DeviceContext& ctx, std::deque<std::future<void>>& fetching) {
  // Let queued reads end (they write into the slots and read the leaves), then drain what was
  // enqueued on the GPU, so nothing writes into the outputs after the read returns.
  abandon_isolated();
  for (auto& f : fetching) {
    try {
      f.get();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
    }
  }
  for (auto& slot : ctx.slots_) {
    if (slot.busy && slot.owner != id_) {  // an earlier read's, which did not wait
      try {
        settle_later(device_, slot);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
      }
    }
    if (slot.stream) cudaStreamSynchronize(slot.stream);
    slot.busy = false;
    slot.checks.clear();
  }
  ctx.drain_arena();
}

std::uint64_t Reader::next_id() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

void synchronize_reads(int device) {
  if (device < 0) {  // every device read onto so far
    std::exception_ptr first;
    std::set<int> devices;
    for (auto* rings : read_rings()) {
      for (const int d : rings->devices()) devices.insert(d);
    }
    for (const int d : devices) {
      try {
        synchronize_reads(d);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return;
  }
  check_device(device);
  ZD_CUDA_CHECK(cudaSetDevice(device));
  for (auto* rings : read_rings()) {
    rings->for_each_idle(device, [&](DeviceContext& ctx) {
      for (auto& slot : ctx.slots_) settle_later(device, slot);
    });
  }
  raise_deferred_failures(device);
}

}  // namespace cuda

}  // namespace zarr_device
