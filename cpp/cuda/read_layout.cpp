// The first stages of a read onto a CUDA GPU after its plan (cuda_reader.hpp): route (what
// GPUDirect Storage reads straight from files) and layout (which chunks the CPU decodes instead,
// which are staged a part at a time, the ring a read is lent, and the batches its leaves are
// packed into: the device plan that run() executes).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "cufile_api.hpp"
#include "device_read/decode_share.hpp"
#include "device_read/leaf_parts.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::cuda {

using device_read::Route;

std::vector<Leaf> Reader::route(std::span<const device_read::ReadTarget> targets,
                                std::vector<Leaf> leaves, std::span<const std::uintptr_t> streams) {
  const auto gds_files = [](const Array& array) {
    const auto* files = dynamic_cast<const FileBacked*>(array.store().get());
    return files && files->io() == LocalIo::kGds;
  };
  // Opening cuFile's driver is slow (BENCHMARKS.md, Appendix: decisions, and what was measured
  // and not kept): only reads of stores opened for GPUDirect Storage pay it.
  if (std::any_of(targets.begin(), targets.end(),
                  [&](const device_read::ReadTarget& t) { return gds_files(*t.array); }) &&
      CuFile::instance().available()) {
    std::vector<Leaf> direct;
    std::vector<Leaf> staged;
    for (auto& leaf : leaves) {
      // (A chunk planned without its size may not be stored: its fetch finds out.)
      const auto& planned = leaf.planned();
      const ChunkSpec& spec = *planned.spec;
      const bool eligible = gds_files(*planned.array) && leaf.stored.sized &&
                            leaf.decoding.route == Route::kCopy && leaf.decoding.crc32c == 0 &&
                            leaf.stored.length == spec.nbytes() && placed_by_copy(leaf);
      (eligible ? direct : staged).push_back(std::move(leaf));
    }
    if (!direct.empty()) {
      // The host writes these outputs: the consumers' earlier work on them must be done.
      for (const std::uintptr_t stream : streams) {
        ZD_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
      }
      for (auto& leaf : read_from_files(std::move(direct))) staged.push_back(std::move(leaf));
    }
    return staged;
  }

  return leaves;
}

DevicePlan Reader::lay_out(std::vector<Leaf>& leaves, std::span<const std::uintptr_t> streams,
                           bool may_stream_order, const ReadsInFlight& in_flight) {
  // Reads of few or large zstd chunks end sooner with a share of them decoded on the CPU, and reads
  // of gzip or zlib chunks unless they are many and small. A read
  // that does not wait for its decodes is not held up by their latency, and the next read overlaps
  // them: the GPU is then the faster way however few the chunks. Not in a process whose streams
  // share one hardware queue (device_read::hardware_queues): the next read's copies queue behind
  // the consumer's wait for these decodes, so such a read is shared as one that waits.
  static const std::size_t queues =
      device_read::hardware_queues(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  DevicePlan plan;
  if (options_.decode_sharing == DecodeSharing::kAuto &&
      !(options_.non_blocking && may_stream_order && queues > 1)) {
    device_read::DecodeRates rates;
    int sms = 0;
    ZD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
    rates.device_lanes = in_flight.share_of_device(static_cast<std::size_t>(sms));
    rates.cpu_threads = in_flight.share_of_all(workers_);
    rates.staging = staging_;
    rates.device_chunk =
        device_read::device_chunk_rate(leaves, device_read::DecodeKind::kZstd, rates);
    plan.shared = device_read::share_decodes(leaves, device_read::DecodeKind::kZstd, rates);
    const auto deflate = device_read::deflate_rates(rates);
    for (const auto kind : {device_read::DecodeKind::kGzip, device_read::DecodeKind::kDeflate}) {
      for (const auto route : {Route::kDeviceDecode, Route::kIsolatedDecode}) {
        plan.shared += device_read::share_decodes(leaves, kind, deflate, route);
      }
    }
  }
  // Chunks larger than a slot of the ring as configured, or decoded on the CPU and so large that
  // its slots would bound how many decode at once, are staged a part at a time.
  plan.parted = device_read::cut_into_parts(leaves, {staging_, in_flight.share_of_all(workers_)});
  // The ring's slots hold the largest chunk: fewer, larger slots in the same staging.
  plan.need = device_read::staging_need(leaves);
  const auto& need = plan.need;
  plan.context.emplace(context_for(device_, staging_, need));
  auto& ctx = **plan.context;
  plan.base = ctx.start_batch();  // batch b takes slot (base + b) % slots
  const std::size_t base = plan.base;
  plan.decodes = std::any_of(leaves.begin(), leaves.end(), [](const Leaf& leaf) {
    return leaf.decoding.route == Route::kDeviceDecode;
  });
  // The outputs may have been freed and reallocated on the consumers' streams, so the read's
  // writes wait for the work queued there. A read that does not wait for its decodes must not
  // make them wait too: the consumers' streams then wait for the previous such read, and its
  // decodes would queue behind that read's instead of overlapping them. Its chunks are decoded
  // into scratch, and only the writes into the outputs wait.
  defer_consumers_ = options_.non_blocking && may_stream_order && plan.decodes;
  // Pack the leaves into batches: as many as fit a slot, and whose GPU decodes fit a region (or
  // a batch's share of the decode arena, for a read whose batches decode off their slots: one
  // that waits for its decodes).
  const bool waits = !(options_.non_blocking && may_stream_order);
  const std::size_t capacity = ctx.slots_.front().capacity;
  const std::size_t decode_target = device_read::decode_batch_target(need, capacity, waits);
  prepare_decodes(ctx, leaves, !defer_consumers_, waits, decode_target);
  plan.batch_target = device_read::batch_target(need, capacity, ctx.slots_.size());
  const std::size_t decode_budget =
      off_slot_ ? device_read::off_slot_decode_budget(capacity, ctx.arena_memory())
                : ctx.decode_budget;
  plan.batches = device_read::pack_batches(
      leaves, capacity, plan.batch_target, costs_, decode_budget,
      off_slot_ ? capacity : decode_target);  // (few chunks a slot: no cut)
  // The device waits for the consumers' work, not the host, which goes on planning and reading.
  consumers_ = ctx.record_consumers(streams);
  if (!defer_consumers_) {
    for (std::size_t i = 0; i < std::min(plan.batches.size(), ctx.slots_.size()); ++i) {
      wait_for_consumers(ctx, ctx.slot(base + i).stream);
    }
  }
  return plan;
}

}  // namespace zarr_device::cuda
