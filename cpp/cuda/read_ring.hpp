// The per-device staging ring of reads onto a CUDA GPU: pinned slots (and their device copies)
// that batches are filled into, copied from and decoded out of, kept between reads because pinned
// allocations are slow and synchronise the device. Internal to cpp/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "decode_arena.hpp"
#include "device_memory.hpp"
#include "device_read/read_batches.hpp"
#include "device_read/read_leaf.hpp"
#include "device_read/staging_shape.hpp"
#include "devices/device.hpp"
#include "zarr_device/cuda_io.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {

using device_read::align_up;
using device_read::kMaxBatch;
using device_read::kStagingAlignment;
using device_read::Leaf;

// A device decode whose status and size are checked when its batch is off the slot. It names its
// chunk itself: a read that does not wait (ReadOptions::non_blocking) leaves its checks to a
// later call, after its leaves are gone.
struct PendingCheck {
  std::string where;     // the array and chunk, for the error
  std::size_t index;     // in the batch's status arrays
  std::size_t expected;  // decoded bytes
};

// The per-batch arrays nvCOMP reads and writes, one set per slot (host and device), kept apart
// from the slots' data so that a slot holds a chunk as large as the slot.
struct BatchArrays {
  const void** inputs;
  std::size_t* input_sizes;
  std::size_t* capacities;
  std::size_t* sizes;
  void** outputs;
  int* statuses;
  // The bytes of arrays of `entries` each (a slot's hold kMaxBatch; a batch decoded in the
  // decode arena takes as many as it has decodes), and those arrays laid out from `base`.
  static constexpr std::size_t bytes(std::size_t entries = kMaxBatch) {
    return entries * (5 * sizeof(void*) + sizeof(int));
  }
  static BatchArrays at(std::byte* base, std::size_t entries = kMaxBatch) {
    BatchArrays a{};
    a.inputs = reinterpret_cast<const void**>(base);
    a.input_sizes = reinterpret_cast<std::size_t*>(base + entries * 8);
    a.capacities = reinterpret_cast<std::size_t*>(base + entries * 16);
    a.sizes = reinterpret_cast<std::size_t*>(base + entries * 24);
    a.outputs = reinterpret_cast<void**>(base + entries * 32);
    a.statuses = reinterpret_cast<int*>(base + entries * 40);
    return a;
  }
};

struct Slot {
  std::byte* host = nullptr;    // pinned data
  std::byte* device = nullptr;  // its copy on the GPU (DeviceContext::device_copy)
  std::size_t capacity = 0;     // data bytes
  BatchArrays host_arrays{};    // pinned
  BatchArrays device_arrays{};
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;
  std::vector<PendingCheck> checks;
  std::uint64_t owner = 0;  // the read whose batch is on the slot (Reader::id)
  bool busy = false;
};

// Waits for a slot's batch and checks its device decodes (their statuses and sizes): the first
// failure's message, or empty. The slot is free afterwards.
std::string settle(Slot& slot);

// The first of `checks` whose decode reported a failure or another size than expected, as a
// message naming its chunk; empty when none did.
std::string first_failure(std::span<const PendingCheck> checks, const int* statuses,
                          const std::size_t* sizes);

// Pinned room of its own for the statuses and sizes of a batch's device decodes, and an event
// marking when the batch's work, and their copy there, are done. A read that gives its ring back
// before its decodes end, so that other threads' reads use the ring meanwhile, checks them here:
// the slot's own arrays are the next read's by then.
struct DecodeReport {
  int* statuses = nullptr;  // kMaxBatch of each
  std::size_t* sizes = nullptr;
  cudaEvent_t done = nullptr;
};
// A report of `device` kept from an earlier read, or a new one (DeviceError when it cannot be
// made); give it back once read. Reports are few: one per batch awaited at once.
DecodeReport take_report(int device);
void give_back_report(int device, DecodeReport report) noexcept;

// A batch whose decodes are waited for apart from its slot: a read that gave the ring back
// before its last batches ended (the end of Reader::read), or a batch decoded in the decode arena
// (Reader::submit_off_slot), whose slot is filled again before its decodes end. Its decodes'
// checks and a report of its own (their statuses and sizes, copied there on `stream` after its
// decodes) go with it: the slot's arrays are the next batch's.
class AwaitedBatch {
 public:
  // The decodes' statuses and sizes are in device memory at `statuses` and `sizes`, written by
  // work queued on `stream`; `checks` index them.
  AwaitedBatch(int device, cudaStream_t stream, const int* statuses, const std::size_t* sizes,
               std::vector<PendingCheck> checks, std::size_t batch);
  // A slot's batch: its checks move here, and the slot stays busy (whoever uses it next waits for
  // the batch and checks nothing).
  AwaitedBatch(int device, Slot& slot, std::size_t batch);
  ~AwaitedBatch() {
    if (report_.done) give_back_report(device_, report_);
  }
  AwaitedBatch(AwaitedBatch&& other) noexcept
      : device_(other.device_),
        batch_(other.batch_),
        report_(std::exchange(other.report_, DecodeReport{})),
        checks_(std::move(other.checks_)) {}
  AwaitedBatch(const AwaitedBatch&) = delete;
  AwaitedBatch& operator=(const AwaitedBatch&) = delete;
  AwaitedBatch& operator=(AwaitedBatch&&) = delete;

  // Waits for the batch: the first failure of its decodes (a message naming the chunk), or empty.
  [[nodiscard]] std::string settle() const;
  // Whether the batch has ended (settle() would not wait).
  [[nodiscard]] bool ended() const;
  [[nodiscard]] std::size_t batch() const { return batch_; }

 private:
  int device_;
  std::size_t batch_;
  DecodeReport report_;
  std::vector<PendingCheck> checks_;
};

// Failures of device decodes found after the read that queued them had returned (it did not
// wait: ReadOptions::non_blocking): kept per device until raise_deferred_failures reports
// them. Safe from any thread.
void defer_failure(int device, std::string message);
// CodecError with the failures deferred on `device` (which are then forgotten), if any.
void raise_deferred_failures(int device);
// Settles a slot of `device` whose batch belongs to a read that has returned: a failure is kept
// for raise_deferred_failures.
void settle_later(int device, Slot& slot);

// A device's staging ring, made once and kept: pinned allocations are slow and synchronise.
class DeviceContext {
 public:
  DeviceContext(int device, const device_read::StagingShape& shape)
      : device_(device), staging_bytes_(shape.bytes), gpu_(get_device("cuda", device)) {
    cut(shape.slots);
    // The driver's own device memory for the ring's streams and the decoders' kernels (the
    // benchmark notebook, "GPU reads with decode regions sized from the data, checks in the read
    // pieces") comes out of the decode memory, so that a read's device memory stays within its
    // output, the staging and decode_bytes.
    constexpr std::size_t kDriverShare = std::size_t{16} << 20;
    const std::size_t decode = decode_memory_for(shape.decode_bytes, gpu_->memory_bytes());
    decode_memory_ = decode >= 8 * kDriverShare ? decode - kDriverShare : decode;
  }
  ~DeviceContext() {
    for (auto& s : slots_) {
      // A read that did not wait may have left its checks here: they are reported later, not lost.
      try {
        settle_later(device_, s);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device is being let go of
      }
      release(s);
    }
    for (auto* s : decode_streams_) {
      try {
        gpu_->synchronize_stream(s);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device is being let go of
      }
      gpu_->destroy_stream(s);
    }
    if (sizing_stream_) {
      try {
        gpu_->synchronize_stream(sizing_stream_);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device is being let go of
      }
      gpu_->destroy_stream(sizing_stream_);
    }
    gpu_->deallocate_host(arrays_host_);
    gpu_->deallocate(arrays_device_);
    for (auto* e : consumer_events) gpu_->destroy_event(e);
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Makes the slots hold a staged leaf of `largest` bytes: when they do not, the staging is cut
  // again into as many slots as hold it (OutOfMemoryError naming `where` when none does). The cut
  // only ever coarsens: a ring that once read large chunks keeps its larger slots for smaller
  // ones, rather than freeing and pinning its memory again each time reads of large and small
  // chunks alternate (a pinned allocation synchronises the device and costs milliseconds).
  void fit(std::size_t largest, const std::string& where) {
    if (largest <= slots_.front().capacity) return;
    const std::size_t count = staging_bytes_ / align_up(largest, device_read::kSlotPage);
    if (count == 0) {
      throw OutOfMemoryError(where + ": a chunk of " + std::to_string(largest) +
                             " bytes does not fit the staging of " +
                             std::to_string(staging_bytes_) + " bytes; raise staging_bytes");
    }
    for (auto& s : slots_) {
      settle_later(device_, s);  // an earlier read that did not wait may still use the slot
      release(s);
    }
    streams.clear();
    cut(count);
    if (arena_) {  // made for the staging's old cut (arena_memory)
      synchronize_decode_streams();
      arena_.reset();
    }
  }

  // Slots are allocated when first used: a small read pins one slot, not the whole ring.
  Slot& slot(std::size_t b) {
    const std::size_t index = b % slots_.size();
    Slot& s = slots_[index];
    if (!s.host) {
      allocate_arrays();
      s.host_arrays = BatchArrays::at(arrays_host_ + index * BatchArrays::bytes());
      s.device_arrays = BatchArrays::at(arrays_device_ + index * BatchArrays::bytes());
      s.host = static_cast<std::byte*>(gpu_->allocate_host(s.capacity));
      try {
        s.stream = static_cast<cudaStream_t>(gpu_->create_stream());
        s.done = static_cast<cudaEvent_t>(gpu_->create_event());
      } catch (...) {
        release(s);
        throw;
      }
      streams.push_back(s.stream);
    }
    return s;
  }

  // The copy of a slot's bytes on the device, for batches decoded in regions or copied from it
  // (Reader::submit), made when first needed. Reads that decode off their slots lend the arena
  // that memory (use_arena); it comes back here once the arena's decodes are done.
  std::byte* device_copy(Slot& s) {
    if (!s.device) {
      if (arena_ && arena_->holds_memory()) {
        synchronize_decode_streams();
        arena_->clear();
      }
      s.device = static_cast<std::byte*>(gpu_->allocate(s.capacity));
    }
    return s.device;
  }

  // Frees what a slot holds (the Device's frees accept null) once its stream is idle.
  void release(Slot& s) noexcept {
    try {
      if (s.stream) gpu_->synchronize_stream(s.stream);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a failed device is being let go of
    }
    gpu_->deallocate_host(s.host);
    gpu_->deallocate(s.device);
    gpu_->destroy_event(s.done);
    gpu_->destroy_stream(s.stream);
    const std::size_t capacity = s.capacity;
    s = Slot{};
    s.capacity = capacity;
  }

  std::vector<Slot> slots_;
  int device_;
  std::size_t staging_bytes_;
  std::shared_ptr<Device> gpu_;
  std::vector<StreamHandle> streams;  // of the slots allocated

  // Records, on each of `consumers` (streams whose memory a read writes), an event marking the
  // work queued there so far (kept in consumer_events; the count used is returned), for the
  // read's slot streams to wait on: the device waits, not the host.
  std::size_t record_consumers(std::span<const std::uintptr_t> consumers) {
    while (consumer_events.size() < consumers.size()) {
      consumer_events.push_back(gpu_->create_event());
    }
    for (std::size_t i = 0; i < consumers.size(); ++i) {
      gpu_->record(consumer_events[i], reinterpret_cast<StreamHandle>(consumers[i]));
    }
    return consumers.size();
  }
  std::vector<EventHandle> consumer_events;

  // Where a read's batches start (batch b takes slot (start + b) % slots): at next_batch when the
  // device is done with that slot, else at the first slot it is done with, so that a read does
  // not wait for the batches another thread's read left on the device (one that waits for them
  // after giving the ring back); at next_batch when every slot is in use.
  [[nodiscard]] std::size_t start_batch() const {
    auto done = [&](std::size_t i) {
      const Slot& s = slots_[i % slots_.size()];
      return !s.busy || cudaEventQuery(s.done) == cudaSuccess;
    };
    if (done(next_batch)) return next_batch;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (done(i)) return i;
    }
    return next_batch;
  }
  // Reads that leave batches on the device (non_blocking) number theirs on from where the previous
  // read stopped, so that a read's first batch takes the slot used longest ago and overlaps the
  // previous read instead of waiting for it; other reads start from the first slot again, so that
  // a loop of small reads keeps to the first slots and pins no more of the ring.
  std::size_t next_batch = 0;
  // Decode memory (nvCOMP's temporary memory, then decoded chunks on their way to a strided
  // place): decode_bytes in all, split into regions that batches use in turn; batches in
  // different regions decode at once. A region takes memory as its calls need it. See
  // Reader::prepare_decodes for how many. The count only grows: reads of other data then reuse the
  // regions (and their memory) instead of reallocating them, which would synchronise the device on
  // every read.
  void use_decode_regions(std::size_t count) {
    if (arena_ && arena_->holds_memory()) {  // decode memory is one or the other, never both
      synchronize_decode_streams();
      arena_->clear();
    }
    if (regions_.size() >= count) return;
    for (auto* s : streams) gpu_->synchronize_stream(s);  // their work may use the old regions
    regions_.clear();
    for (std::size_t i = 0; i < count; ++i) regions_.push_back(std::make_unique<SharedTemp>(gpu_));
    decode_budget = decode_memory_ / count / kStagingAlignment * kStagingAlignment;
  }
  SharedTemp& decode_region(std::size_t batch) { return *regions_[batch % regions_.size()]; }
  [[nodiscard]] std::size_t decode_regions() const { return regions_.size(); }
  [[nodiscard]] std::size_t decode_memory() const { return decode_memory_; }
  std::size_t decode_budget = 0;  // bytes per region

  // The decode memory as one arena instead (DecodeArena: reads of chunks a slot holds few of),
  // the regions' memory freed first. Such reads copy a batch's bytes from its pinned slot straight
  // into the arena, so the slots' device copies are freed too and their memory is the arena's:
  // a read's device memory stays within its output, the staging and decode_bytes, and the arena
  // holds about 1.4 times the large chunks in flight that decode_bytes alone would (64 MiB zstd
  // chunks of bf16 weights, at the default settings).
  DecodeArena& use_arena() {
    if (!regions_.empty()) {
      for (auto* s : streams) gpu_->synchronize_stream(s);  // their work may use the regions
      synchronize_decode_streams();
      regions_.clear();
      decode_budget = 0;
    }
    for (auto& s : slots_) {
      if (!s.device) continue;
      gpu_->synchronize_stream(s.stream);  // an earlier read's batch may still read it
      gpu_->deallocate(s.device);
      s.device = nullptr;
    }
    if (!arena_) arena_ = std::make_unique<DecodeArena>(gpu_, arena_memory());
    return *arena_;
  }
  // The arena's size: the decode memory and the staging's device copies.
  [[nodiscard]] std::size_t arena_memory() const {
    return decode_memory_ + slots_.size() * slots_.front().capacity;
  }
  // The streams batches that decode in the arena run on, the first `count` of them in turn
  // (device_read::off_slot_streams; at most kMaxDecodeRegions), made as first used. The index comes
  // with it (a read's consumers are waited for once per stream).
  std::pair<std::size_t, StreamHandle> next_decode_stream(std::size_t count) {
    const std::size_t index =
        next_decode_stream_++ % std::clamp<std::size_t>(count, 1, device_read::kMaxDecodeRegions);
    while (decode_streams_.size() <= index) decode_streams_.push_back(gpu_->create_stream());
    return {index, decode_streams_[index]};
  }
  // A stream of its own for sizing nvCOMP's memory from frames still in a pinned slot: a decode
  // stream would make that synchronising call wait for every decode queued on it.
  StreamHandle sizing_stream() {
    if (!sizing_stream_) sizing_stream_ = gpu_->create_stream();
    return sizing_stream_;
  }
  void synchronize_decode_streams() {
    for (auto* s : decode_streams_) gpu_->synchronize_stream(s);
  }
  // Synchronises the decode streams without throwing, then forgets the arena's ranges (a read
  // that failed drains what it queued).
  void drain_arena() noexcept {
    for (auto* s : decode_streams_) cudaStreamSynchronize(static_cast<cudaStream_t>(s));
    if (arena_) arena_->reset();
  }

 private:
  // `count` slots of the staging, each a whole number of pages.
  void cut(std::size_t count) {
    const std::size_t per_slot = device_read::slot_bytes_of(staging_bytes_, count);
    slots_.assign(count, Slot{});
    for (auto& s : slots_) s.capacity = per_slot;
    next_batch = 0;
  }

  // Every slot's batch arrays, in one small allocation of each kind (made for the first cut,
  // which has the most slots).
  void allocate_arrays() {
    if (arrays_host_) return;
    const std::size_t total = slots_.size() * BatchArrays::bytes();
    arrays_host_ = static_cast<std::byte*>(gpu_->allocate_host(total));
    try {
      arrays_device_ = static_cast<std::byte*>(gpu_->allocate(total));
    } catch (...) {
      gpu_->deallocate_host(arrays_host_);
      arrays_host_ = nullptr;
      throw;
    }
  }
  std::byte* arrays_host_ = nullptr;
  std::byte* arrays_device_ = nullptr;
  std::size_t decode_memory_ = 0;
  std::vector<std::unique_ptr<SharedTemp>> regions_;
  std::unique_ptr<DecodeArena> arena_;
  std::vector<StreamHandle> decode_streams_;
  StreamHandle sizing_stream_ = nullptr;
  std::size_t next_decode_stream_ = 0;
};

// A ring is made for one staging shape: one made for another is not reused.
using ReadContexts = ContextPool<DeviceContext, device_read::StagingShape>;

// A ring of `device` for these settings whose slots hold the read's largest leaf (see
// DeviceContext::fit), lent to one read. Up to kContextsPerDevice rings of the
// configured staging per device; a read that stages little takes one of a few small rings when
// those are all lent. Rings made with other settings are freed once no read holds them.
ReadContexts::Lease context_for(int device, const device_read::StagingShape& staging,
                                const device_read::StagingNeed& need);

// Every device's rings: those of the configured staging, and the small ones.
std::array<ReadContexts*, 2> read_rings();

}  // namespace zarr_device::cuda
