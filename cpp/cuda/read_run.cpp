// The run stage of a read onto a CUDA GPU (Reader::run, after its plan, route and layout): its
// batches fetched on the thread pool ahead of their slot's transfer, submitted to the device in
// order, finished as their slots are needed again, and its targets handed on as the batches that
// hold them end; then the batches still on the device waited for once the ring is given back.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "device_read/leaf_parts.hpp"
#include "device_read/target_completion.hpp"
#include "engine/read_ahead.hpp"

namespace zarr_device::cuda {

using device_read::Route;

namespace {

// The long ranges a batch needs are announced to their stores as its CPU stage starts on the
// pool. Shorter ranges are left alone: the stage's parallel reads keep the disk busy, and asking
// costs an open per chunk and slows warm reads (BENCHMARKS.md, Appendix: decisions, and what was
// measured and not kept).
constexpr std::uint64_t kAnnouncedBytes = std::uint64_t{8} << 20;

}  // namespace

// One read's batches through the ring. Batch b uses slot b % slots; the CPU stages of the batches
// after it run on the pool while it is copied and decoded (device_read::fetch_ahead says how far),
// queued behind each other's helpers, so the threads that finish their share of one batch go on
// to the next instead of waiting for its slowest read.
class Reader::Run {
 public:
  Run(Reader& reader, std::vector<Leaf>& leaves, DevicePlan& plan, std::size_t targets,
      const std::function<void(std::size_t)>& completed)
      : reader_(reader),
        leaves_(leaves),
        batches_(plan.batches),
        ctx_(**plan.context),
        base_(plan.base),
        slots_(ctx_.slots_.size()),
        completion_(leaves, plan.batches, targets, completed),
        // Cold data: the leaves ahead of those fetched are announced to their stores by a thread
        // of the read's own, once a read has waited for the disk.
        read_ahead_(leaves.size(), plan.need.total / std::max<std::size_t>(leaves.size(), 1),
                    [&leaves](std::size_t i) { announce(leaves[i]); }),
        ahead_(batches_.size()) {
    // (The rule scans the batch: once each.)
    for (std::size_t b = 0; b < batches_.size(); ++b) {
      ahead_[b] = device_read::fetch_ahead(batch_of(b), slots_);
    }
  }

  // Fetches, submits and finishes the batches in order, handing targets on as they complete.
  void all_batches() {
    completion_.batches_finished(0);  // targets with nothing to stage (read from files, or empty)
    for (std::size_t b = 0; b < batches_.size(); ++b) {
      fetch_ahead_of(b);
      wait_for_fetch();
      submit(b);
      finish_through(b + 1, false);  // hands on what is already complete
    }
    // The decoder process's calls still in flight, placed before the batches are awaited.
    reader_.complete_isolated(nullptr);
  }

  // Once every batch is queued: a read that completes in stream order has the consumers' streams
  // wait for the last batch of each slot (its slots stay busy: the next read starts past them);
  // any other keeps its batches still on the device to be awaited once the ring is given back.
  void end_queue(bool stream_ordered, std::span<const std::uintptr_t> streams) {
    const std::size_t count = batches_.size();
    if (stream_ordered) {
      for (std::size_t i = 0; i < std::min(count, slots_); ++i) {
        for (const std::uintptr_t stream : streams) {
          ZD_CUDA_CHECK(
              cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(stream), slot_of(i).done, 0));
        }
      }
    } else if (reader_.off_slot_) {
      // Their slots hold nothing to check: the batches are awaited by their decodes.
      awaited_.reserve(off_slot_.size());
      for (auto& batch : off_slot_) awaited_.push_back(std::move(batch));
      off_slot_.clear();
    } else {
      awaited_.reserve(count - finished_);
      for (std::size_t b = finished_; b < count; ++b) {
        awaited_.emplace_back(reader_.device_, slot_of(b), b);
      }
    }
    // Otherwise the next read starts from the first slot again (DeviceContext::start_batch).
    ctx_.next_batch = stream_ordered ? base_ + count : 0;
  }

  // What the run did, for the read's trace.
  void add_to(ReadTrace& trace) const {
    trace.batches = batches_.size();
    trace.slots = slots_;
    trace.first_slot = base_ % slots_;
    trace.most_ahead = most_ahead_;
    trace.fetch_waits = waited_fetch_;
    if (read_observer()) {  // a string made only for an observer
      trace.decode_memory =
          reader_.off_slot_
              ? "decoded off the slots in an arena of " + std::to_string(ctx_.arena_memory()) + " B"
              : std::to_string(ctx_.decode_regions()) + " decode regions of " +
                    std::to_string(ctx_.decode_budget) + " B";
    }
  }

  // After a failure: the batches being fetched ended and the device drained (Reader::abandon).
  void abandon() {
    reader_.abandon(ctx_, fetching_);
    off_slot_.clear();
  }

  // Waits for every awaited batch, so that nothing writes into the outputs after the read
  // returns, and hands targets on up to the first failure, which it returns (empty: none).
  std::string settle_awaited() {
    std::string failure;
    for (const auto& batch : awaited_) {
      std::string found = batch.settle();
      if (failure.empty() && found.empty()) completion_.batches_finished(batch.batch() + 1);
      if (failure.empty()) failure = std::move(found);
    }
    return failure;
  }

 private:
  // Tells a leaf's store it will be read (engine::ReadAhead).
  static void announce(const Leaf& leaf) {
    if (leaf.decoding.route == Route::kFill) return;
    const auto& stored = leaf.stored;
    try {
      leaf.planned().source().will_need(leaf.planned().key, stored.offset,
                                        stored.sized ? stored.length : 0);
    } catch (const Error&) {  // NOLINT(bugprone-empty-catch): only a hint; the fetch will say
    }
  }

  [[nodiscard]] std::span<Leaf> batch_of(std::size_t b) const {
    return {leaves_.data() + batches_[b].begin, batches_[b].end - batches_[b].begin};
  }
  [[nodiscard]] bool decodes_in(std::size_t b) const {
    const auto batch = batch_of(b);
    return std::any_of(batch.begin(), batch.end(), [](const Leaf& leaf) {
      return device_read::decodes_on_device(leaf.decoding.route);
    });
  }
  Slot& slot_of(std::size_t b) { return ctx_.slot(base_ + b); }

  // Starts the fetches of the batches up to fetch_ahead past batch `b`, as their slots come free.
  void fetch_ahead_of(std::size_t b) {
    while (started_ < batches_.size() && started_ <= b + ahead_[started_]) {
      if (!free_slot(started_, b)) break;
      start_fetch(started_);
      most_ahead_ = std::max(most_ahead_, started_ - b);
      ++started_;
    }
  }

  // Frees the slot of batch `next` to be fetched into while batch `b` is next to the device;
  // false where that would wait for a decode.
  bool free_slot(std::size_t next, std::size_t b) {
    if (next < slots_) {
      reader_.finish(slot_of(next));  // an earlier read's last batch, left on the device
      return true;
    }
    // The slot's last batch must be off it. While that batch still decodes, batches already
    // fetched go to the device first: waiting here would hold them on the host for as long as a
    // decode takes (tens of milliseconds for a large zstd chunk on its thread block: the benchmark
    // notebook, "Where waiting reads and 64 MiB chunks spend their time, kernel by kernel"), and
    // large chunks would
    // decode in waves of the batches fetched ahead. A batch that only copies is off its slot
    // within a copy's time: waiting for it starts the next fetch soonest.
    const std::size_t end = next - slots_ + 1;
    finish_through(end, next == b || !decodes_in(end - 1));
    return finished_ >= end;
  }

  // Batch `s`'s CPU stage: its long ranges announced, its bytes fetched into its slot.
  void start_fetch(std::size_t s) {
    Slot& slot = slot_of(s);
    device_read::lend_part_staging(batch_of(s), slot.host);  // before later batches' fetches
    auto stage = [this, &slot, s] {
      device_read::announce_long_ranges(batch_of(s), kAnnouncedBytes);
      reader_.fetch(ctx_, slot, batch_of(s));
      read_ahead_.read(batches_[s].end - 1);
    };
    if (batches_.size() > 1) {
      fetching_.push_back(reader_.pool_.submit(std::move(stage)));
      return;
    }
    // Nothing to overlap it with: this thread fetches, sparing a small read two hand-offs
    // between threads and the pool's queue, which many threads of such reads contend for.
    std::promise<void> fetched;
    try {
      stage();
      fetched.set_value();
    } catch (...) {
      fetched.set_exception(std::current_exception());
    }
    fetching_.push_back(fetched.get_future());
  }

  // Waits for the oldest fetch started (the next batch's), raising what it raised.
  void wait_for_fetch() {
    auto fetched = std::move(fetching_.front());
    fetching_.pop_front();
    const auto start = std::chrono::steady_clock::now();
    fetched.get();
    waited_fetch_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Batch `b`'s device stage, in its slot or off it.
  void submit(std::size_t b) {
    if (!reader_.off_slot_) {
      reader_.submit(ctx_, slot_of(b), batch_of(b), base_ + b);
      return;
    }
    off_slot_.push_back(reader_.submit_off_slot(ctx_, slot_of(b), batch_of(b), b));
    // Hands on the targets of the batches decoded off their slots that have ended, in order.
    while (!off_slot_.empty() && off_slot_.front().ended()) {
      if (auto failure = off_slot_.front().settle(); !failure.empty()) throw CodecError(failure);
      completion_.batches_finished(off_slot_.front().batch() + 1);
      off_slot_.pop_front();
    }
  }

  // Finishes the batches before `end` (their slots' checks), up to the first still on the device
  // unless `wait`, handing on the targets they complete.
  void finish_through(std::size_t end, bool wait) {
    for (; finished_ < end; ++finished_) {
      Slot& slot = slot_of(finished_);
      if (!wait && (reader_.isolated_pending(slot) ||
                    (slot.busy && cudaEventQuery(slot.done) == cudaErrorNotReady))) {
        break;
      }
      reader_.finish(slot);
      // (A batch decoded off its slot is handed on once its decodes end: submit.)
      if (!reader_.off_slot_) completion_.batches_finished(finished_ + 1);
    }
  }

  Reader& reader_;
  std::vector<Leaf>& leaves_;
  std::span<const device_read::Batch> batches_;
  DeviceContext& ctx_;
  std::size_t base_;   // batch b takes slot (base_ + b) % slots_
  std::size_t slots_;  // of the ring
  // A target is complete once the batch holding its last leaf is: targets are handed on in that
  // order while later batches are still on their way.
  device_read::TargetCompletion completion_;
  engine::ReadAhead read_ahead_;
  std::vector<std::size_t> ahead_;  // how far ahead of each batch the read fetches
  std::size_t finished_ = 0;        // batches [0, finished_) are off their slots and handed on
  std::size_t started_ = 0;         // batches whose fetch has started
  std::size_t most_ahead_ = 0;      // for the trace
  double waited_fetch_ = 0;         // seconds
  std::deque<std::future<void>> fetching_;
  std::vector<AwaitedBatch> awaited_;  // batches waited for after the ring is given back
  std::deque<AwaitedBatch> off_slot_;  // batches decoding off their slots, in order
};

void Reader::run(std::span<const device_read::ReadTarget> targets, std::vector<Leaf>& leaves,
                 DevicePlan& plan, std::span<const std::uintptr_t> streams, bool may_stream_order,
                 const std::function<void(std::size_t)>& completed, ReadTrace& trace) {
  Run run(*this, leaves, plan, targets.size(), completed);
  try {
    run.all_batches();
    trace.queued = std::chrono::steady_clock::now();
    // Copies and CPU-decoded chunks were checked on the host before they left it: nothing is left
    // to check on the device, so the read completes in stream order. The consumers' streams wait
    // for the last batch of each slot, and the host goes on to the next read while the copy engine
    // finishes this one (its slots stay busy until then). Device decodes report their statuses to
    // the host, and a read that hands outputs on as they complete needs to know when they are:
    // those wait (below, once the ring is given back), unless the caller asked not to
    // (non_blocking), taking a late report of a chunk the GPU failed to decode
    // (raise_deferred_failures) for the overlap of its reads. The read waits for its last batches
    // (their decodes take milliseconds, a chunk on one thread block: the benchmark notebook,
    // "Where waiting reads and 64 MiB chunks spend their time, kernel by kernel")
    // after giving the ring back, so that other threads' reads use it meanwhile instead of
    // queueing for one of the device's few rings.
    run.end_queue((!plan.decodes || options_.non_blocking) && may_stream_order, streams);
    run.add_to(trace);
  } catch (...) {
    run.abandon();
    throw;
  }
  trace.drain_from = std::chrono::steady_clock::now();
  plan.context.reset();
  const std::string failure = run.settle_awaited();
  trace.end = std::chrono::steady_clock::now();
  trace.decode_calls = decode_calls_;
  trace.decoded_chunks = decoded_chunks_;
  trace.sized_calls = sized_calls_;
  trace.sized_in_slots = sized_in_slots_;
  trace.isolated_calls = isolated_calls_;
  trace.isolated_chunks = isolated_chunks_;
  trace.isolated_on_cpu = isolated_on_cpu_;
  trace.isolated_times = isolated_times_;
  if (const auto& observe = read_observer()) observe(trace);
  if (!failure.empty()) throw CodecError(failure);
}

}  // namespace zarr_device::cuda
