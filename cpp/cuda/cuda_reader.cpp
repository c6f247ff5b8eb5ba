// The pipeline of a read onto a CUDA GPU. The host stages (cpp/src/device_read: plan, route, batch,
// fetch and check) fill batches of chunks into pinned staging slots on the thread pool, ahead of
// the device stage (read_submit.cpp: each slot crosses to the GPU in one transfer, nvCOMP decodes
// what it can in batched calls, small kernels place every chunk) and of the hand-on of complete
// outputs. One read can span many arrays: their chunks are one stream through the ring.
#include "cuda_reader.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "cuda_check.hpp"
#include "cufile_api.hpp"
#include "device_memory.hpp"
#include "device_read/decode_share.hpp"
#include "device_read/leaf_parts.hpp"
#include "device_read/read_staging.hpp"
#include "device_read/target_completion.hpp"
#include "engine/read_ahead.hpp"
#include "kernels.hpp"
#include "place/strided_copy.hpp"
#include "write_ring.hpp"

namespace zarr_device {
namespace cuda {

device_read::DeviceDecoders present_decoders(const Nvcomp& nvcomp) {
  device_read::DeviceDecoders decoders;
  for (std::size_t k = 0; k < DeviceDecoding::kKinds; ++k) {
    decoders.present[k] = nvcomp.decompressor(static_cast<GpuCodec>(k)) != nullptr;
  }
  return decoders;
}

using device_read::kPlaced;
using device_read::Route;

void Reader::fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch) {
  const auto decoded = device_read::fetch_batch(batch, slot.host, pool_, workers_);
  // Rare (unusual framing): chunks decoded on the CPU go to their place by a synchronous detour
  // through a temporary device buffer.
  if (decoded.empty()) return;
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  for (const auto& d : decoded) {
    auto& leaf = batch[d.leaf];
    const std::size_t nbytes = d.bytes.size();
    const DeviceBuffer tmp(ctx.gpu_, nbytes);
    auto* dev = static_cast<std::byte*>(tmp.data());
    // On the slot's stream, idle while its batch is fetched: no other read waits for this.
    ZD_CUDA_CHECK(
        cudaMemcpyAsync(dev, d.bytes.data(), nbytes, cudaMemcpyHostToDevice, slot.stream));
    const auto [counts, strides] = device_read::staged_layout(leaf);
    if (defer_consumers_) wait_for_consumers(ctx, slot.stream);
    launch_strided_copy(plan_strided_copy(dev, strides, leaf.planned().decoded_destination(),
                                          leaf.planned().spec->dtype->size, false, 1),
                        slot.stream);
    const cudaError_t launched = cudaGetLastError();
    const cudaError_t synced = cudaStreamSynchronize(slot.stream);
    ZD_CUDA_CHECK(launched);
    ZD_CUDA_CHECK(synced);
    leaf.staging.scratch = kPlaced;
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
  auto leaves = device_read::plan_reads(targets, present_decoders(nvcomp_), options_.gpu_decode,
                                        pool_, workers_);
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

void Reader::run(std::span<const device_read::ReadTarget> targets, std::vector<Leaf>& leaves,
                 DevicePlan& plan, std::span<const std::uintptr_t> streams, bool may_stream_order,
                 const std::function<void(std::size_t)>& completed, ReadTrace& trace) {
  auto& ctx = **plan.context;
  const auto& batches = plan.batches;
  const std::size_t base = plan.base;
  const bool decodes = plan.decodes;
  // A target is complete once the batch holding its last leaf is: targets are handed on in that
  // order while later batches are still on their way.
  device_read::TargetCompletion completion(leaves, batches, targets.size(), completed);
  auto hand_on = [&](std::size_t finished_batches) {
    completion.batches_finished(finished_batches);
  };
  // The long ranges a batch needs are announced to their stores as its CPU stage starts on the
  // pool. Shorter ranges are left alone: the stage's parallel reads keep the disk busy, and asking
  // costs an open per chunk and slows warm reads (measured on an H200, a warm 6 GiB read of 2 MiB
  // chunks: 46 GB/s without, 42 with).
  constexpr std::uint64_t kAnnouncedBytes = std::uint64_t{8} << 20;

  // Cold data: the leaves ahead of those fetched are announced to their stores by a thread of
  // the read's own (engine::ReadAhead), once a read has waited for the disk.
  engine::ReadAhead read_ahead(
      leaves.size(), plan.need.total / std::max<std::size_t>(leaves.size(), 1),
      [&leaves](std::size_t i) {
        const Leaf& leaf = leaves[i];
        if (leaf.decoding.route == Route::kFill) return;
        try {
          leaf.planned().source().will_need(leaf.planned().key, leaf.stored.offset,
                                            leaf.stored.sized ? leaf.stored.length : 0);
        } catch (const Error&) {  // NOLINT(bugprone-empty-catch): only a hint; the fetch will say
        }
      });

  // Batch b uses slot b % slots; the CPU stages of the batches after it run on the pool while it
  // is copied and decoded (device_read::fetch_ahead says how far), queued behind each other's
  // helpers, so the threads that finish their share of one batch go on to the next instead of
  // waiting for its slowest read.
  const std::size_t slots = ctx.slots_.size();
  auto batch_of = [&](std::size_t b) {
    return std::span<Leaf>{leaves.data() + batches[b].begin, batches[b].end - batches[b].begin};
  };
  auto decodes_in = [&](std::size_t b) {
    const auto batch = batch_of(b);
    return std::any_of(batch.begin(), batch.end(), [](const Leaf& leaf) {
      return leaf.decoding.route == Route::kDeviceDecode;
    });
  };
  // How far ahead of each batch the read fetches (the rule scans the batch: once each).
  std::vector<std::size_t> ahead(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b)
    ahead[b] = device_read::fetch_ahead(batch_of(b), slots);
  // Batches [0, finished) are off their slots, checked and handed on.
  std::size_t finished = 0;
  auto finish_through = [&](std::size_t end, bool wait) {
    for (; finished < end; ++finished) {
      Slot& slot = ctx.slot(base + finished);
      if (!wait && slot.busy && cudaEventQuery(slot.done) == cudaErrorNotReady) break;
      finish(slot);
      if (!off_slot_) hand_on(finished + 1);  // else once its decodes end (below)
    }
  };
  std::deque<std::future<void>> fetching;
  std::size_t started = 0;
  std::size_t most_ahead = 0;  // for the trace
  double waited_fetch = 0;
  std::vector<AwaitedBatch> awaited;  // batches waited for after the ring is given back
  std::deque<AwaitedBatch> off_slot;  // batches decoding off their slots, in order
  // Hands on the targets of the batches decoded off their slots that have ended, in order.
  auto settle_off_slot = [&] {
    while (!off_slot.empty() && off_slot.front().ended()) {
      if (auto failure = off_slot.front().settle(); !failure.empty()) throw CodecError(failure);
      hand_on(off_slot.front().batch() + 1);
      off_slot.pop_front();
    }
  };
  try {
    hand_on(0);  // targets with nothing to stage (read straight from their files, or empty)
    for (std::size_t b = 0; b < batches.size(); ++b) {
      while (started < batches.size() && started <= b + ahead[started]) {
        if (started >= slots) {
          // The slot's last batch must be off it. While that batch still decodes, batches already
          // fetched go to the device first: waiting here would hold them on the host for as long
          // as a decode takes (a 64 MiB zstd chunk 67 ms on an H200's thread block), and large
          // chunks would decode in waves of the batches fetched ahead. A batch that only copies is
          // off its slot within a copy's time: waiting for it starts the next fetch soonest.
          const std::size_t end = started - slots + 1;
          finish_through(end, started == b || !decodes_in(end - 1));
          if (finished < end) break;
        } else {
          finish(ctx.slot(base + started));  // an earlier read's last batch, left on the device
        }
        Slot& slot = ctx.slot(base + started);
        device_read::lend_part_staging(batch_of(started),
                                       slot.host);  // before later batches' fetches
        auto stage = [this, &ctx, &slot, &read_ahead, end = batches[started].end,
                      batch = batch_of(started)] {
          device_read::announce_long_ranges(batch, kAnnouncedBytes);
          fetch(ctx, slot, batch);
          read_ahead.read(end - 1);
        };
        if (batches.size() == 1) {
          // Nothing to overlap it with: this thread fetches, sparing a small read two hand-offs
          // between threads and the pool's queue, which many threads of such reads contend for.
          std::promise<void> fetched;
          try {
            stage();
            fetched.set_value();
          } catch (...) {
            fetched.set_exception(std::current_exception());
          }
          fetching.push_back(fetched.get_future());
        } else {
          fetching.push_back(pool_.submit(std::move(stage)));
        }
        most_ahead = std::max(most_ahead, started - b);
        ++started;
      }
      auto fetched = std::move(fetching.front());
      fetching.pop_front();
      const auto w0 = std::chrono::steady_clock::now();
      fetched.get();
      waited_fetch += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      if (off_slot_) {
        off_slot.push_back(submit_off_slot(ctx, ctx.slot(base + b), batch_of(b), b));
        settle_off_slot();
      } else {
        submit(ctx, ctx.slot(base + b), batch_of(b), base + b);
      }
      finish_through(b + 1, false);  // hands on what is already complete
    }
    const auto queued = std::chrono::steady_clock::now();
    // Copies and CPU-decoded chunks were checked on the host before they left it: nothing is left
    // to check on the device, so the read completes in stream order. The consumers' streams wait
    // for the last batch of each slot, and the host goes on to the next read while the copy engine
    // finishes this one (its slots stay busy until then). Device decodes report their statuses to
    // the host, and a read that hands outputs on as they complete needs to know when they are:
    // those wait (below, once the ring is given back), unless the caller asked not to
    // (non_blocking), taking a late report of a chunk the GPU failed to decode
    // (raise_deferred_failures) for the overlap of its reads.
    const bool stream_ordered = (!decodes || options_.non_blocking) && may_stream_order;
    if (stream_ordered) {
      for (std::size_t i = 0; i < std::min(batches.size(), slots); ++i) {
        for (const std::uintptr_t stream : streams) {
          ZD_CUDA_CHECK(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream),
                                            ctx.slot(base + i).done, 0));
        }
      }
    } else {
      // The read waits for its last batches (their decodes take milliseconds: a 2 MiB zstd chunk
      // about 9 ms on an H200's thread block) after giving the ring back, so that other threads'
      // reads use it meanwhile instead of queueing for one of the device's few rings.
      if (off_slot_) {
        // Their slots hold nothing to check: the batches are awaited by their decodes.
        awaited.reserve(off_slot.size());
        for (auto& batch : off_slot) awaited.push_back(std::move(batch));
        off_slot.clear();
      } else {
        awaited.reserve(batches.size() - finished);
        for (std::size_t b = finished; b < batches.size(); ++b) {
          awaited.emplace_back(device_, ctx.slot(base + b), b);
        }
      }
    }
    // Slots left busy by a read that does not wait: the next read starts past them. Otherwise
    // from the first slot again (DeviceContext::start_batch).
    ctx.next_batch = stream_ordered ? base + batches.size() : 0;
    trace.batches = batches.size();
    trace.slots = slots;
    trace.first_slot = base % slots;
    trace.most_ahead = most_ahead;
    if (read_observer()) {  // a string made only for an observer
      trace.decode_memory =
          off_slot_
              ? "decoded off the slots in an arena of " + std::to_string(ctx.arena_memory()) + " B"
              : std::to_string(ctx.decode_regions()) + " decode regions of " +
                    std::to_string(ctx.decode_budget) + " B";
    }
    trace.fetch_waits = waited_fetch;
    trace.queued = queued;
  } catch (...) {
    abandon(ctx, fetching);
    off_slot.clear();
    throw;
  }
  trace.drain_from = std::chrono::steady_clock::now();
  plan.context.reset();
  // Every awaited batch is waited for, so that nothing writes into the outputs after the read
  // returns; targets are handed on up to the first failure.
  std::string failure;
  for (const auto& batch : awaited) {
    std::string found = batch.settle();
    if (failure.empty() && found.empty()) hand_on(batch.batch() + 1);
    if (failure.empty()) failure = std::move(found);
  }
  trace.end = std::chrono::steady_clock::now();
  trace.decode_calls = decode_calls_;
  trace.decoded_chunks = decoded_chunks_;
  trace.sized_calls = sized_calls_;
  trace.sized_in_slots = sized_in_slots_;
  if (const auto& observe = read_observer()) observe(trace);
  if (!failure.empty()) throw CodecError(failure);
}

void Reader::abandon(DeviceContext& ctx, std::deque<std::future<void>>& fetching) {
  // Let queued reads end (they write into the slots and read the leaves), then drain what was
  // enqueued on the GPU, so nothing writes into the outputs after the read returns.
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
