// The device stages of a read onto a CUDA GPU, as one object per read: the pipeline
// (cuda_reader.cpp; its run stage, read_run.cpp: fetch on the pool, submit, finish, hand on), the
// device decode and placement of a batch (read_submit.cpp) and GPUDirect Storage reads
// (read_direct.cpp). The host stages
// they drive (plan, route, batch, fetch, check) are in cpp/src/device_read. Internal to cpp/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "engine/thread_pool.hpp"
#include "nvcomp_api.hpp"
#include "read_ring.hpp"
#include "read_trace.hpp"
#include "zarr_device/cuda_io.hpp"

namespace zarr_device::cuda {

// Which device decoders nvCOMP offers here, in this process and in `device`'s decoder process.
device_read::DeviceDecoders present_decoders(const Nvcomp& nvcomp, int device);

// Attempts of a read whose chunks are replaced while it reads them.
inline constexpr int kReadAttempts = 3;

// Moves a C-ordered chunk of `spec` in device memory (`src`), restricted to `selection`, into
// `dst`: one copy when the layouts agree, else the strided kernel.
void place_on_device(const std::byte* src, const ChunkSpec& spec,
                     std::span<const DimSlice> selection, const StridedView& dst, bool swap,
                     cudaStream_t stream);

// GPU reads in flight in this process: all of them, which share the thread pool, and those of one
// device, which share its SMs. A read weighs the CPU against the GPU with its share of each: four
// threads each reading tensors of a state dict one by one all found the CPU sooner and decoded on
// it together, at a fraction of the rate of one call that decoded on the GPU (the benchmark
// notebook, "Several threads, each reading tensors one by one (machine 1)").
class ReadsInFlight {
 public:
  explicit ReadsInFlight(int device)
      : on_device_(counters().per_device[static_cast<std::size_t>(
            std::clamp(device, 0, static_cast<int>(kCountedDevices) - 1))]) {
    ++counters().all;
    ++on_device_;
  }
  ~ReadsInFlight() {
    --counters().all;
    --on_device_;
  }
  ReadsInFlight(const ReadsInFlight&) = delete;
  ReadsInFlight& operator=(const ReadsInFlight&) = delete;

  // This read's share of `count` things that all reads in flight share (at least one).
  [[nodiscard]] std::size_t share_of_all(std::size_t count) const {
    return std::max<std::size_t>(count / std::max<std::size_t>(counters().all.load(), 1), 1);
  }
  [[nodiscard]] std::size_t share_of_device(std::size_t count) const {
    return std::max<std::size_t>(count / std::max<std::size_t>(on_device_.load(), 1), 1);
  }

 private:
  static constexpr std::size_t kCountedDevices = 64;  // devices past it share the last count
  struct Counters {
    std::atomic<std::size_t> all{0};
    std::array<std::atomic<std::size_t>, kCountedDevices> per_device{};
  };
  static Counters& counters() {
    static Counters counters;
    return counters;
  }
  std::atomic<std::size_t>& on_device_;
};

// What the layout stage makes of a read's leaves for the run stage: the ring it is lent, where its
// batches start on the ring, and the batches.
struct IsolatedCall;   // a call of the decoder process in flight (read_isolated.cpp)
struct IsolatedCalls;  // a read's calls in flight

struct DevicePlan {
  std::optional<ReadContexts::Lease> context;
  std::size_t base = 0;  // batch b takes slot (base + b) % slots
  std::vector<device_read::Batch> batches;
  device_read::StagingNeed need;
  std::size_t batch_target = 0;
  bool decodes = false;  // some leaf decodes on the device
  std::size_t shared = 0;
  std::size_t parted = 0;
};

class Reader {
 public:
  Reader(int device, const ReadOptions& options)
      : device_(device),
        options_(options),
        staging_(device_read::StagingShape::of(options.staging_bytes,
                                               static_cast<std::size_t>(std::max(options.slots, 1)),
                                               options.decode_bytes)),
        nvcomp_(Nvcomp::instance()),
        workers_(engine::worker_count(options.threads)),
        pool_(engine::ThreadPool::shared(workers_)),
        id_(next_id()) {}

  // `streams`: the consumer streams whose earlier work must finish before the outputs are written.
  // `completed(t)` is called (on this thread) as each target's output becomes complete.
  // `complete_on_host`: return only once the outputs are complete for every stream and the host
  // (some output has no consumer stream to order later work on).
  void read(std::span<const device_read::ReadTarget> targets,
            std::span<const std::uintptr_t> streams,
            const std::function<void(std::size_t)>& completed, bool complete_on_host);

 private:
  // The stages of read(), in order (after device_read::plan_reads):
  // route: GPUDirect Storage reads what it can straight from files; returns the other leaves.
  std::vector<Leaf> route(std::span<const device_read::ReadTarget> targets,
                          std::vector<Leaf> leaves, std::span<const std::uintptr_t> streams);
  // layout (read_layout.cpp): decode sharing, parts, the ring lent and the batches.
  DevicePlan lay_out(std::vector<Leaf>& leaves, std::span<const std::uintptr_t> streams,
                     bool may_stream_order, const ReadsInFlight& in_flight);
  // run (read_run.cpp): fetch batches on the pool ahead of their transfer, decode and placement,
  // finish them and hand outputs on as they complete; then settle and report to the read's
  // observer.
  class Run;  // the state of one run, and its steps
  void run(std::span<const device_read::ReadTarget> targets, std::vector<Leaf>& leaves,
           DevicePlan& plan, std::span<const std::uintptr_t> streams, bool may_stream_order,
           const std::function<void(std::size_t)>& completed, ReadTrace& trace);

  // GPUDirect Storage: reads the leaves that are stored as their elements and land whole and
  // contiguous straight from their files into place; returns those it could not (for the ring).
  std::vector<Leaf> read_from_files(std::vector<Leaf> leaves);
  // Sizes what device decodes cost and splits the decode memory into regions for them, or, for
  // chunks a slot holds fewer than device_read::kFewPerSlot of, when `may_leave_slots`, makes it an
  // arena (off_slot_). `batch_bytes`: the most a batch of device decodes stages (a slot, or less
  // for a read that waits: device_read::decode_batch_target), which the regions are planned for.
  void prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves, bool in_place,
                       bool may_leave_slots, std::size_t batch_bytes);
  // Orders `stream`'s later work after the consumers' work recorded at the read's start: at once
  // for every slot, or, where a read defers it, before a batch's first write (see read()).
  void wait_for_consumers(DeviceContext& ctx, cudaStream_t stream) const;
  // A batch's CPU stage (device_read::fetch_batch), then the chunks it decoded on the CPU placed.
  void fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch);
  // Its device stage: one transfer, decoding, placing. The next batch's CPU stage runs meanwhile.
  void submit(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch, std::size_t region);
  // The same for a read whose batches decode in the decode arena (off_slot_): the batch's bytes
  // cross into the arena and it decodes there on a stream of its own, its slot free once they are
  // across; the batch is awaited by what this returns.
  AwaitedBatch submit_off_slot(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch,
                               std::size_t batch_index);
  // The batch's chunks for the decoder process (Route::kIsolatedDecode, read_isolated.cpp): their
  // stored bytes (at `staged` on the device, at `host` in the slot) copied into its arena on
  // `stream` and sent, in calls that stay in flight while later batches are staged, as many as
  // the arenas hold. A call is completed (its answer checked, its chunks placed on `stream`, those
  // the process did not decode decoded on the CPU, the codec's typed error naming the chunk where
  // that fails too) when its room is needed, when its slot is finished (`slot`), or at once for a
  // batch decoded off the slots (no slot).
  void decode_isolated(DeviceContext& ctx, std::span<Leaf> batch, const std::byte* host,
                       const std::byte* staged, cudaStream_t stream, Slot* slot);
  // Completes the calls in flight in order: through the last of `through`'s, or all (none).
  void complete_isolated(const Slot* through);
  // Whether calls of the batch in `slot` are in flight.
  [[nodiscard]] bool isolated_pending(const Slot& slot) const;
  // After a failure: the answers of the calls in flight taken, nothing placed.
  void abandon_isolated() noexcept;
  // A call's answer received and its chunks placed on its stream (those not decoded, on the CPU);
  // those of the calls whose answers are already there, in order; the oldest call answered and its
  // placements waited for, so that its arena ranges are free.
  void answer_isolated(IsolatedCall& call);
  void answer_waiting_isolated();
  void retire_oldest_isolated();
  // The device's decoder (and fresh rings over its arenas), held from the read's first call to
  // its end; given back.
  void hold_decoder();
  void release_decoder();
  void decode_isolated_on_cpu(DeviceContext& ctx, Leaf& leaf, const std::byte* host,
                              cudaStream_t stream);
  // A chunk decoded on the CPU (`bytes`, in its staged layout) moved into place on `stream`
  // through a temporary device buffer; synchronises `stream`.
  void place_cpu_decoded(DeviceContext& ctx, cudaStream_t stream, Leaf& leaf,
                         const ByteArray& bytes);
  void finish(Slot& slot);
  // After a failure: waits for the batches being fetched and drains what the read enqueued on the
  // device, so that nothing writes into the outputs once the error is raised.
  void abandon(DeviceContext& ctx, std::deque<std::future<void>>& fetching);

  int device_;
  ReadOptions options_;
  // The staging the options configure, worked out once for the stages that plan against it and
  // the ring made for it.
  device_read::StagingShape staging_;
  const Nvcomp& nvcomp_;
  device_read::DecodeCosts costs_{};
  std::size_t decode_calls_ = 0;  // for the read's trace (read_trace.hpp)
  std::size_t decoded_chunks_ = 0;
  std::size_t sized_calls_ = 0;      // whose temporary memory was sized from the frames
  std::size_t sized_in_slots_ = 0;   // of those, sized from the frames in their pinned slot
  std::size_t isolated_calls_ = 0;   // calls of the decoder process
  std::size_t isolated_chunks_ = 0;  // chunks sent to it
  std::size_t isolated_on_cpu_ = 0;  // chunks for it decoded on the CPU instead
  IsolatedTimes isolated_times_;
  std::shared_ptr<IsolatedCalls> isolated_;  // the calls in flight (read_isolated.cpp)
  int host_pointers_on_device_ = -1;  // registered host memory at its own address: unknown (-1)
  // The read's batches decode in the decode arena, off their slots (submit_off_slot).
  bool off_slot_ = false;
  std::size_t off_slot_streams_ = 1;  // the decode streams it uses in turn
  std::array<bool, device_read::kMaxDecodeRegions> waited_streams_{};  // decode streams (consumers)
  std::size_t workers_;
  engine::ThreadPool& pool_;
  std::uint64_t id_;  // tells this read's batches on the ring from earlier reads' (Slot::owner)
  std::size_t consumers_ = 0;     // events in ctx.consumer_events the read's writes wait on
  bool defer_consumers_ = false;  // waited on before a batch's first write, not before its decodes
  static std::uint64_t next_id();
};

// Finishes the batches that reads onto `device` left on the GPU without waiting (non_blocking)
// in the rings no read holds now, then raises what any of them found (raise_deferred_failures).
// A negative `device`: every device read onto so far.
void synchronize_reads(int device);

}  // namespace zarr_device::cuda
