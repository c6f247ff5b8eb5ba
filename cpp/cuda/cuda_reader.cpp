// The device stage of a read onto a CUDA GPU. The host stages (cpp/src/gpu: plan, route, batch,
// fetch and check) hand it batches of chunks in a pinned staging slot; here each slot crosses to
// the GPU in one transfer, nvCOMP decodes what it can in batched calls, and small kernels place
// every chunk (byte order, transposes, strided selections) while the next slot is being filled.
// One read can span many arrays: their chunks are one stream through the ring.
#include <cuda_runtime_api.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "cuda_check.hpp"
#include "cufile_api.hpp"
#include "decode_measure.hpp"
#include "device_memory.hpp"
#include "engine/thread_pool.hpp"
#include "gpu/read_batches.hpp"
#include "gpu/read_plan.hpp"
#include "gpu/read_staging.hpp"
#include "kernels.hpp"
#include "nvcomp_api.hpp"
#include "place/strided_copy.hpp"
#include "read_ring.hpp"
#include "zarr_device/cuda.hpp"
#include "zarr_device/device.hpp"

namespace zarr_device {
namespace cuda {

gpu::DeviceDecoders present_decoders(const Nvcomp& nvcomp) {
  gpu::DeviceDecoders decoders;
  for (std::size_t k = 0; k < DeviceDecoding::kKinds; ++k) {
    decoders.present[k] = nvcomp.decompressor(static_cast<GpuCodec>(k)) != nullptr;
  }
  return decoders;
}

std::size_t worker_count(const IoOptions& io) {
  return io.threads > 0 ? static_cast<std::size_t>(io.threads)
                        : std::max(1U, std::thread::hardware_concurrency());
}

namespace {

using gpu::kInPlace;  // (align_up, kStagingAlignment and Leaf come with read_ring.hpp)
using gpu::kPlaced;
using gpu::Route;

constexpr int kReadAttempts = 3;

// Moves a C-ordered chunk of `spec` in device memory (`src`), restricted to `selection`, into
// `dst`: one copy when the layouts agree, else the strided kernel.
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

class Reader {
 public:
  Reader(int device, const CudaReadOptions& options)
      : device_(device),
        options_(options),
        nvcomp_(Nvcomp::instance()),
        workers_(worker_count(options.io)),
        pool_(engine::ThreadPool::shared(workers_)) {}

  // `streams`: the consumer streams whose earlier work must finish before the outputs are written.
  // `completed(t)` is called (on this thread) as each target's output becomes complete.
  void read(std::span<const gpu::ReadTarget> targets, std::span<const std::uintptr_t> streams,
            const std::function<void(std::size_t)>& completed);

 private:
  // GPUDirect Storage: reads the leaves that are stored as their elements and land whole and
  // contiguous straight from their files into place; returns those it could not (for the ring).
  std::vector<Leaf> read_from_files(std::vector<Leaf> leaves);
  // Sizes what device decodes cost and splits the decode memory into regions for them.
  void prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves);
  // A batch's CPU stage (gpu::fetch_batch), then the chunks it decoded on the CPU placed.
  void fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch);
  // Its device stage: one transfer, decoding, placing. The next batch's CPU stage runs meanwhile.
  void submit(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch, std::size_t region);
  void finish(Slot& slot);

  int device_;
  CudaReadOptions options_;
  const Nvcomp& nvcomp_;
  gpu::DecodeCosts costs_{};
  std::size_t decode_calls_ = 0;  // for ZARR_DEVICE_TRACE
  std::size_t decoded_chunks_ = 0;
  std::size_t workers_;
  engine::ThreadPool& pool_;
};

std::vector<Leaf> Reader::read_from_files(std::vector<Leaf> leaves) {
  constexpr std::uint64_t kGdsPiece = std::uint64_t{16} << 20;
  const auto& cufile = CuFile::instance();
  // One registered file per stored value: keys are per store, so the array is part of the name.
  using FileKey = std::pair<const Array*, std::string>;
  std::map<FileKey, std::unique_ptr<CuFile::File>> opened;
  std::map<FileKey, const Leaf*> first_leaf;
  for (const auto& leaf : leaves) {
    opened.emplace(FileKey{leaf.array, leaf.key}, nullptr);
    first_leaf.emplace(FileKey{leaf.array, leaf.key}, &leaf);
  }
  std::vector<std::map<FileKey, std::unique_ptr<CuFile::File>>::iterator> slots;
  for (auto it = opened.begin(); it != opened.end(); ++it) slots.push_back(it);
  pool_.parallel_for(slots.size(), workers_, [&](std::size_t i) {
    const Leaf& leaf = *first_leaf.at(slots[i]->first);
    const auto* files = dynamic_cast<const FileBacked*>(leaf.array->store().get());
    // GPUDirect needs O_DIRECT; file systems without it (tmpfs) still work in compat mode. A
    // shard's chunks come from the version whose index was read; a chunk's file must still be
    // the size planned.
    const int fd = leaf.value ? leaf.value->open_file(true) : files->open_file(leaf.key, true);
    if (fd < 0) return;
    struct stat st {};
    if (!leaf.value &&
        (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != leaf.length)) {
      ::close(fd);
      throw gpu::ValueChanged(leaf.where() + ": the chunk was replaced while it was read");
    }
    try {
      slots[i]->second = cufile.open(fd, leaf.key);
    } catch (const Error&) {
      // Not registrable (file system, driver): those chunks take the staging ring instead.
    }
  });
  struct Piece {
    std::size_t leaf;
    std::uint64_t offset;
    std::uint64_t length;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (!opened[{leaves[i].array, leaves[i].key}]) continue;
    for (std::uint64_t o = 0; o < leaves[i].length; o += kGdsPiece) {
      pieces.push_back({i, o, std::min(kGdsPiece, leaves[i].length - o)});
    }
  }
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  pool_.parallel_for(pieces.size(), workers_, [&](std::size_t p) {
    const auto& piece = pieces[p];
    const auto& leaf = leaves[piece.leaf];
    try {
      ZD_CUDA_CHECK(cudaSetDevice(device_));
      const std::size_t got = opened.at({leaf.array, leaf.key})
                                  ->read(leaf.destination.data, piece.length,
                                         static_cast<off_t>(leaf.offset + piece.offset),
                                         static_cast<off_t>(piece.offset));
      if (got != piece.length) throw CodecError("chunk changed or vanished while it was read");
    } catch (Error& e) {
      e.add_context(leaf.where());
      throw;
    }
  });
  std::vector<Leaf> rest;
  for (auto& leaf : leaves) {
    if (!opened[{leaf.array, leaf.key}]) rest.push_back(std::move(leaf));
  }
  return rest;
}

void Reader::prepare_decodes(DeviceContext& ctx, std::span<Leaf> leaves) {
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
  ctx.use_decode_regions(gpu::plan_decode_regions(leaves, costs_, alignment, ctx.slots_.size()));
}

void Reader::finish(Slot& slot) {
  if (!slot.busy) return;
  slot.busy = false;
  ZD_CUDA_CHECK(cudaEventSynchronize(slot.done));
  const auto arrays = BatchArrays::at(slot.host + slot.capacity);
  for (const auto& check : slot.checks) {
    const int status = arrays.statuses[check.index];
    const std::size_t size = arrays.sizes[check.index];
    if (status != 0 || size != check.expected) {
      throw CodecError(check.leaf->where() + ": the GPU decoder reported status " +
                       std::to_string(status) + " and " + std::to_string(size) +
                       " bytes, expected " + std::to_string(check.expected));
    }
  }
  slot.checks.clear();
}

void Reader::fetch(DeviceContext& ctx, Slot& slot, std::span<Leaf> batch) {
  const auto decoded = gpu::fetch_batch(batch, slot.host, pool_, workers_);
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
    const auto [counts, strides] = gpu::staged_layout(leaf);
    launch_strided_copy(
        plan_strided_copy(dev, strides, leaf.decoded_destination, leaf.spec->dtype->size, false, 1),
        slot.stream);
    const cudaError_t launched = cudaGetLastError();
    const cudaError_t synced = cudaStreamSynchronize(slot.stream);
    ZD_CUDA_CHECK(launched);
    ZD_CUDA_CHECK(synced);
    leaf.scratch = kPlaced;
  }
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
  auto host_arrays = BatchArrays::at(slot.host + slot.capacity);
  auto device_arrays = BatchArrays::at(slot.device + slot.capacity);
  std::size_t next = 0;
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
    std::byte* memory = region.acquire(region_bytes, slot.stream, ctx.streams);
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
        slot.checks.push_back({&leaf, next, expected});
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
        place_on_device(scratch + leaf.scratch, *leaf.spec, leaf.selection, leaf.destination,
                        leaf.swap, slot.stream);
        leaf.scratch = kPlaced;
      }
    }
    region.release(slot.stream);
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.statuses + first, device_arrays.statuses + first,
                                  count * sizeof(int), cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host_arrays.sizes + first, device_arrays.sizes + first,
                                  count * sizeof(std::size_t), cudaMemcpyDeviceToHost,
                                  slot.stream));
  }

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
  for (auto& leaf : batch) {
    if (leaf.scratch == kPlaced) continue;
    const std::byte* staged = slot.device + leaf.staging;
    const std::size_t es = leaf.spec->dtype->size;
    switch (leaf.route) {
      case Route::kFill: {
        const auto& fill = leaf.chain->spec().fill_value;
        const bool zero =
            std::all_of(fill.begin(), fill.end(), [](std::byte b) { return b == std::byte{0}; });
        const auto& dst = leaf.decoded_destination;
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
        const auto& dst = leaf.decoded_destination;
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
  slot.busy = true;
}

// Temporary tuning knobs for measurements: ZARR_DEVICE_EXPERIMENT="lookahead=N,batch=BYTES".
std::size_t experiment(const char* name, std::size_t fallback) {
  const char* text = std::getenv("ZARR_DEVICE_EXPERIMENT");
  if (!text) return fallback;
  const std::string all(text);
  const std::string key = std::string(name) + "=";
  const auto at = all.find(key);
  if (at == std::string::npos) return fallback;
  return std::stoull(all.substr(at + key.size()));
}

void Reader::read(std::span<const gpu::ReadTarget> targets, std::span<const std::uintptr_t> streams,
                  const std::function<void(std::size_t)>& completed) {
  const auto t0 = std::chrono::steady_clock::now();
  check_device(device_);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  for (const std::uintptr_t stream : streams) {
    // The outputs may have been freed and reallocated on that stream: let its earlier work finish.
    ZD_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  }
  auto leaves =
      gpu::plan_reads(targets, present_decoders(nvcomp_), options_.gpu_decode, pool_, workers_);
  if (CuFile::instance().available()) {
    std::vector<Leaf> direct;
    std::vector<Leaf> staged;
    for (auto& leaf : leaves) {
      const auto* files = dynamic_cast<const FileBacked*>(leaf.array->store().get());
      const bool eligible = files && files->io() == LocalIo::kGds && leaf.route == Route::kCopy &&
                            leaf.crc32c == 0 && !leaf.swap && leaf.length == leaf.spec->nbytes() &&
                            place::is_full(leaf.selection, leaf.spec->shape) &&
                            place::is_c_contiguous(leaf.destination, leaf.spec->dtype->size);
      (eligible ? direct : staged).push_back(std::move(leaf));
    }
    if (!direct.empty()) {
      for (auto& leaf : read_from_files(std::move(direct))) staged.push_back(std::move(leaf));
    }
    leaves = std::move(staged);
  }

  // The ring's slots hold the largest chunk: fewer, larger slots in the same staging.
  const auto context = context_for(device_, options_, gpu::largest_staged(leaves));
  auto& ctx = *context;
  // Pack the leaves into batches: as many as fit a slot, and whose GPU decodes fit a region.
  prepare_decodes(ctx, leaves);
  const std::size_t capacity = ctx.slots_.front().capacity;
  const std::size_t target =
      experiment("batch", gpu::batch_target(leaves, capacity, ctx.slots_.size()));
  const auto batches = gpu::pack_batches(leaves, capacity, target, costs_, ctx.decode_budget);
  const auto t1 = std::chrono::steady_clock::now();

  // A target is complete once the batch holding its last leaf is: targets are handed on in that
  // order while later batches are still on their way.
  std::vector<std::size_t> last_batch(targets.size(), 0);  // batch index + 1; 0: none staged
  for (std::size_t b = 0; b < batches.size(); ++b) {
    for (std::size_t i = batches[b].begin; i < batches[b].end; ++i) {
      last_batch[leaves[i].target] = b + 1;
    }
  }
  std::vector<std::size_t> by_completion(targets.size());
  std::iota(by_completion.begin(), by_completion.end(), std::size_t{0});
  std::stable_sort(by_completion.begin(), by_completion.end(),
                   [&](std::size_t a, std::size_t b) { return last_batch[a] < last_batch[b]; });
  std::size_t handed_on = 0;
  auto hand_on = [&](std::size_t finished_batches) {
    if (!completed) return;
    while (handed_on < by_completion.size() &&
           last_batch[by_completion[handed_on]] <= finished_batches) {
      completed(by_completion[handed_on++]);
    }
  };

  // Tells the store which bytes the next batch needs, so cold data is being read from the disk
  // while this batch is copied and decoded.
  auto announce = [&](std::size_t b) {
    if (b >= batches.size()) return;
    for (std::size_t i = batches[b].begin; i < batches[b].end;) {
      const auto& leaf = leaves[i];
      std::size_t j = i + 1;
      std::uint64_t end = leaf.offset + leaf.length;
      while (j < batches[b].end && leaves[j].array == leaf.array && leaves[j].key == leaf.key &&
             leaves[j].offset == end) {
        end += leaves[j].length;
        ++j;
      }
      if (leaf.route == Route::kCopy || leaf.route == Route::kDeviceDecode) {
        leaf.array->store()->will_need(leaf.key, leaf.offset, end - leaf.offset);
      }
      i = j;
    }
  };

  // Batch b uses slot b % slots. The CPU stages of the next `lookahead` batches run on the pool
  // while batch b is copied and decoded, queued behind each other's helpers, so the threads that
  // finish their share of one batch go on to the next instead of waiting for its slowest read,
  // and the copy engine finds the next slot full when it is done with this one. The other half of
  // the ring holds batches on the GPU.
  const std::size_t slots = ctx.slots_.size();
  const std::size_t lookahead =
      slots > 1 ? experiment("lookahead", std::max<std::size_t>(slots / 2, 1)) : 0;
  auto batch_of = [&](std::size_t b) {
    return std::span<Leaf>{leaves.data() + batches[b].begin, batches[b].end - batches[b].begin};
  };
  // Batches [0, finished) are off their slots, checked and handed on.
  std::size_t finished = 0;
  auto finish_through = [&](std::size_t end, bool wait) {
    for (; finished < end; ++finished) {
      Slot& slot = ctx.slot(finished);
      if (!wait && slot.busy && cudaEventQuery(slot.done) == cudaErrorNotReady) break;
      finish(slot);
      hand_on(finished + 1);
    }
  };
  std::deque<std::future<void>> fetching;
  std::size_t started = 0;
  double waited_fetch = 0;
  try {
    hand_on(0);  // targets with nothing to stage (read straight from their files, or empty)
    announce(0);
    for (std::size_t b = 0; b < batches.size(); ++b) {
      while (started < batches.size() && started <= b + lookahead) {
        if (started >= slots) finish_through(started - slots + 1, true);  // the slot's last batch
        Slot& slot = ctx.slot(started);
        announce(started + 1);
        fetching.push_back(pool_.submit(
            [this, &ctx, &slot, batch = batch_of(started)] { fetch(ctx, slot, batch); }));
        ++started;
      }
      auto fetched = std::move(fetching.front());
      fetching.pop_front();
      const auto w0 = std::chrono::steady_clock::now();
      fetched.get();
      waited_fetch += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      submit(ctx, ctx.slot(b), batch_of(b), b);
      finish_through(b + 1, false);  // hands on what is already complete
    }
    const auto w0 = std::chrono::steady_clock::now();
    finish_through(batches.size(), true);
    if (std::getenv("ZARR_DEVICE_TRACE")) {
      const auto t2 = std::chrono::steady_clock::now();
      std::fprintf(
          stderr,
          "zarr-device read: %zu targets %zu leaves %zu batches (copies %zu B), %zu slots, "
          "lookahead %zu, %zu decode regions of %zu B, %zu decode calls of %zu chunks "
          "(temp %zu + %zu per chunk); plan %.2f ms, fetch waits %.2f ms, drain %.2f ms, "
          "total %.2f ms\n",
          targets.size(), leaves.size(), batches.size(), target, slots, lookahead,
          ctx.decode_regions(), ctx.decode_budget, decode_calls_, decoded_chunks_, costs_[0].first,
          costs_[0].per_chunk, std::chrono::duration<double, std::milli>(t1 - t0).count(),
          waited_fetch * 1e3, std::chrono::duration<double, std::milli>(t2 - w0).count(),
          std::chrono::duration<double, std::milli>(t2 - t0).count());
    }
  } catch (...) {
    // Let queued reads end (they write into the slots and read `leaves`), then drain what was
    // enqueued on the GPU, so nothing writes into the outputs after we return.
    for (auto& f : fetching) {
      try {
        f.get();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
      }
    }
    for (auto& slot : ctx.slots_) {
      if (slot.stream) cudaStreamSynchronize(slot.stream);
      slot.busy = false;
      slot.checks.clear();
    }
    throw;
  }
}

}  // namespace
}  // namespace cuda

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

nlohmann::json cuda_info() {
  nlohmann::json info = {{"compiled", true}, {"devices", cuda_device_count()}};
  int runtime = 0;
  int driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  info["runtime_version"] = runtime;
  info["driver_version"] = driver;
  const auto& nvcomp = cuda::Nvcomp::instance();
  info["nvcomp"] = nvcomp.loaded() ? nlohmann::json(nvcomp.library()) : nlohmann::json(nullptr);
  if (!nvcomp.loaded()) info["nvcomp_error"] = nvcomp.error();
  info["nvcomp_zstd_compression"] = nvcomp.compressor(cuda::GpuCodec::kZstd) != nullptr;
  const auto& cufile = cuda::CuFile::instance();
  info["cufile"] = cufile.available() ? nlohmann::json(cufile.library()) : nlohmann::json(nullptr);
  if (!cufile.available()) info["cufile_error"] = cufile.error();
  return info;
}

void read_many_to_cuda(std::span<const CudaReadRequest> requests, int device,
                       const CudaReadOptions& options,
                       const std::function<void(std::size_t)>& completed) {
  std::vector<gpu::ReadTarget> planned;
  planned.reserve(requests.size());
  std::vector<std::uintptr_t> streams;
  if (options.consumer_stream != 0) streams.push_back(options.consumer_stream);
  for (const auto& t : requests) {
    if (t.consumer_stream != 0 &&
        std::find(streams.begin(), streams.end(), t.consumer_stream) == streams.end()) {
      streams.push_back(t.consumer_stream);
    }
    const std::size_t es = t.array->metadata().dtype->size;
    const auto shape = check_selection_and_buffer(t.selection, t.array->metadata().shape, es,
                                                  t.out_nbytes, "output buffer holds");
    planned.push_back(
        {t.array, t.selection,
         StridedView{static_cast<std::byte*>(t.out), shape, place::c_strides(shape, es)}});
  }
  // A read started again (a chunk was replaced while it was read) reads the outputs not yet
  // handed on, from a new plan; those handed on are complete and left alone.
  std::vector<std::size_t> pending(planned.size());
  std::iota(pending.begin(), pending.end(), std::size_t{0});
  for (int attempt = 1;; ++attempt) {
    std::vector<gpu::ReadTarget> now;
    now.reserve(pending.size());
    for (const std::size_t t : pending) now.push_back(planned[t]);
    std::vector<bool> handed_on(pending.size(), false);
    try {
      cuda::Reader(device, options).read(now, streams, [&](std::size_t i) {
        handed_on[i] = true;
        if (completed) completed(pending[i]);
      });
      return;
    } catch (const gpu::ValueChanged& e) {
      if (attempt == cuda::kReadAttempts) {
        throw StoreError(std::string(e.what()) + " (" + std::to_string(attempt) +
                         " times: the data are being rewritten faster than they can be read)");
      }
      std::vector<std::size_t> left;
      for (std::size_t i = 0; i < pending.size(); ++i) {
        if (!handed_on[i]) left.push_back(pending[i]);
      }
      pending = std::move(left);
    }
  }
}

void read_to_cuda(const Array& array, std::span<const DimSlice> selection, int device, void* out,
                  std::size_t out_nbytes, const CudaReadOptions& options) {
  const CudaReadRequest request{&array, {selection.begin(), selection.end()}, out, out_nbytes, 0};
  read_many_to_cuda({&request, 1}, device, options, {});
}

nlohmann::json measure_cuda_decode(const Array& array, std::span<const DimSlice> selection,
                                   int device, int repeats, const CudaReadOptions& options) {
  return cuda::measure_decode(array, selection, device, repeats, options);
}

}  // namespace zarr_device
