// Timing the GPU decode stage alone, for benchmarks (bench/bench_gpu.py --decode-only).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "device_memory.hpp"
#include "device_read/bench_hooks.hpp"
#include "device_read/read_batches.hpp"
#include "device_read/read_plan.hpp"
#include "devices/device.hpp"
#include "engine/thread_pool.hpp"
#include "nvcomp_api.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device {
namespace cuda {
namespace {

using device_read::align_up;
using device_read::kMaxBatch;
using device_read::kStagingAlignment;
using device_read::Leaf;
using device_read::Route;

// Times the GPU decode stage alone: every chunk of the selection that nvCOMP would decode is put
// in device memory first, then decoded in batches of kMaxBatch (as a read does, without the
// fetches and copies around it). Chunks are decoded into one device buffer; nothing is placed.
nlohmann::json measure_decode(const Array& array, std::span<const DimSlice> selection, int device_,
                              int repeats, const ReadOptions& options) {
  const auto& nvcomp_ = Nvcomp::instance();
  const std::size_t workers_ = engine::worker_count(options.threads);
  auto& pool_ = engine::ThreadPool::shared(workers_);
  check_selection(selection, array.metadata().shape);
  check_device(device_);
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<std::int64_t> shape;
  for (const auto& s : selection) shape.push_back(s.count);
  const StridedView nowhere{nullptr, shape, place::c_strides(shape, array.metadata().dtype->size)};
  const device_read::ReadTarget target{&array, {selection.begin(), selection.end()}, nowhere};
  auto leaves = device_read::plan_reads(
      {&target, 1}, present_decoders(nvcomp_, device_), options.gpu_decode, pool_, workers_,
      device_read::PlanSizes::kNow);  // stages the stored bytes itself, by their sizes
  std::erase_if(leaves, [](const Leaf& l) { return l.decoding.route != Route::kDeviceDecode; });
  if (leaves.empty()) throw UsageError("no chunk of the selection is decoded on the GPU");
  const GpuCodec codec = leaves.front().decoding.codec;
  std::erase_if(leaves, [&](const Leaf& l) { return l.decoding.codec != codec; });
  const auto* d = nvcomp_.decompressor(codec);
  std::size_t in_bytes = 0;
  std::size_t out_bytes = 0;
  for (auto& leaf : leaves) {
    leaf.staging.offset = in_bytes;
    in_bytes += align_up(leaf.stored.length, kStagingAlignment);
    leaf.staging.scratch = out_bytes;
    out_bytes += align_up(leaf.planned().spec->nbytes(), kStagingAlignment);
  }
  const auto gpu = get_device("cuda", device_);
  DeviceScratch input(gpu), output(gpu), temp(gpu), arrays(gpu);
  std::byte* in = input.reserve(in_bytes);
  std::byte* out = output.reserve(out_bytes);
  {  // stage the compressed bytes
    std::vector<std::byte> host(in_bytes);
    pool_.parallel_for(leaves.size(), workers_, [&](std::size_t i) {
      const auto& leaf = leaves[i];
      const auto got =
          array.store()->get_range_into(leaf.planned().key, leaf.stored.offset,
                                        {host.data() + leaf.staging.offset, leaf.stored.length});
      if (!got || *got != leaf.stored.length) {
        throw CodecError(leaf.planned().where() + ": short read");
      }
    });
    ZD_CUDA_CHECK(cudaMemcpy(in, host.data(), in_bytes, cudaMemcpyHostToDevice));
  }
  const std::size_t n = leaves.size();
  std::vector<const void*> inputs(n);
  std::vector<std::size_t> input_sizes(n), capacities(n);
  std::vector<void*> outputs(n);
  std::size_t max_chunk = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& leaf = leaves[i];
    inputs[i] = in + leaf.staging.offset + leaf.decoding.header;
    input_sizes[i] = leaf.stored.length - leaf.decoding.header - leaf.decoding.trailer;
    capacities[i] = leaf.planned().spec->nbytes();
    outputs[i] = out + leaf.staging.scratch;
    max_chunk = std::max(max_chunk, capacities[i]);
  }
  std::byte* dev = arrays.reserve(n * (5 * sizeof(void*) + sizeof(int)) + 64);
  auto* d_inputs = reinterpret_cast<const void**>(dev);
  auto* d_input_sizes = reinterpret_cast<std::size_t*>(dev + n * 8);
  auto* d_capacities = reinterpret_cast<std::size_t*>(dev + n * 16);
  auto* d_sizes = reinterpret_cast<std::size_t*>(dev + n * 24);
  auto* d_outputs = reinterpret_cast<void**>(dev + n * 32);
  auto* d_statuses = reinterpret_cast<int*>(dev + n * 40);
  ZD_CUDA_CHECK(cudaMemcpy(d_inputs, inputs.data(), n * 8, cudaMemcpyHostToDevice));
  ZD_CUDA_CHECK(cudaMemcpy(d_input_sizes, input_sizes.data(), n * 8, cudaMemcpyHostToDevice));
  ZD_CUDA_CHECK(cudaMemcpy(d_capacities, capacities.data(), n * 8, cudaMemcpyHostToDevice));
  ZD_CUDA_CHECK(cudaMemcpy(d_outputs, outputs.data(), n * 8, cudaMemcpyHostToDevice));
  const std::size_t batch = std::min(n, kMaxBatch);
  const std::size_t temp_bytes = d->temp_size(batch, max_chunk, batch * max_chunk);
  std::byte* t = temp_bytes ? temp.reserve(temp_bytes) : nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ZD_CUDA_CHECK(cudaEventCreate(&start));
  ZD_CUDA_CHECK(cudaEventCreate(&stop));
  double best = 1e30;
  for (int r = 0; r < std::max(repeats, 1) + 1; ++r) {  // the first run warms up
    ZD_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (std::size_t b = 0; b < n; b += batch) {
      const std::size_t m = std::min(batch, n - b);
      d->decompress(d_inputs + b, d_input_sizes + b, d_capacities + b, d_sizes + b, m, t,
                    temp_bytes, d_outputs + b, d_statuses + b, nullptr);
    }
    ZD_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    ZD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ZD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) best = std::min(best, static_cast<double>(ms) / 1e3);
  }
  // How the rate depends on the batch size and on how many batches run at once (each stream with
  // temporary memory of its own): a read's batches are one slot's chunks, a few hundred.
  // Also with the compressed bytes left in pinned host memory, which the decoder then reads across
  // PCIe itself (no device copy of the input).
  nlohmann::json sweep = nlohmann::json::array();
  std::byte* pinned = static_cast<std::byte*>(gpu->allocate_host(in_bytes));
  ZD_CUDA_CHECK(cudaMemcpy(pinned, in, in_bytes, cudaMemcpyDeviceToHost));
  std::vector<const void*> host_inputs(n);
  for (std::size_t i = 0; i < n; ++i) {
    host_inputs[i] = pinned + (static_cast<const std::byte*>(inputs[i]) - in);
  }
  DeviceScratch host_input_array(gpu);
  auto* d_host_inputs = reinterpret_cast<const void**>(host_input_array.reserve(n * 8));
  ZD_CUDA_CHECK(cudaMemcpy(d_host_inputs, host_inputs.data(), n * 8, cudaMemcpyHostToDevice));
  for (const bool from_host : {false, true})
    for (const std::size_t size : {std::size_t{64}, std::size_t{128}, std::size_t{256},
                                   std::size_t{512}, std::size_t{1024}}) {
      // More streams than CUDA's 8 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) share queues.
      for (const std::size_t streams : {std::size_t{1}, std::size_t{2}, std::size_t{4},
                                        std::size_t{8}, std::size_t{12}, std::size_t{16}}) {
        if (from_host && (streams == 1 || streams > 4 || size < 256)) continue;
        if (streams > 8 && size > 256) continue;
        const void** sources = from_host ? d_host_inputs : d_inputs;
        const std::size_t m = std::min(size, n);
        const std::size_t each = d->temp_size(m, max_chunk, m * max_chunk);
        std::vector<DeviceScratch> temps;
        std::vector<cudaStream_t> queues(streams);
        for (std::size_t s = 0; s < streams; ++s) {
          temps.emplace_back(gpu);
          temps.back().reserve(std::max<std::size_t>(each, 1));
          ZD_CUDA_CHECK(cudaStreamCreateWithFlags(&queues[s], cudaStreamNonBlocking));
        }
        double fastest = 1e30;
        for (int r = 0; r < 2; ++r) {
          ZD_CUDA_CHECK(cudaDeviceSynchronize());
          ZD_CUDA_CHECK(cudaEventRecord(start, nullptr));
          for (auto* q : queues) ZD_CUDA_CHECK(cudaStreamWaitEvent(q, start, 0));
          for (std::size_t b = 0, k = 0; b < n; b += m, ++k) {
            const std::size_t c = std::min(m, n - b);
            d->decompress(sources + b, d_input_sizes + b, d_capacities + b, d_sizes + b, c,
                          temps[k % streams].data(), each, d_outputs + b, d_statuses + b,
                          queues[k % streams]);
          }
          ZD_CUDA_CHECK(cudaDeviceSynchronize());
          ZD_CUDA_CHECK(cudaEventRecord(stop, nullptr));
          ZD_CUDA_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          ZD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          if (r > 0) fastest = std::min(fastest, static_cast<double>(ms) / 1e3);
        }
        for (auto* q : queues) cudaStreamDestroy(q);
        sweep.push_back({{"batch", m},
                         {"streams", streams},
                         {"input", from_host ? "pinned host" : "device"},
                         {"temp_bytes_each", each},
                         {"seconds", fastest}});
      }
    }
  gpu->deallocate_host(pinned);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::vector<int> statuses(n);
  ZD_CUDA_CHECK(cudaMemcpy(statuses.data(), d_statuses, n * sizeof(int), cudaMemcpyDeviceToHost));
  const auto failed = std::count_if(statuses.begin(), statuses.end(), [](int s) { return s != 0; });
  std::size_t decoded = 0;
  for (const auto& leaf : leaves) decoded += leaf.planned().spec->nbytes();
  std::size_t compressed = 0;
  for (const auto& leaf : leaves) compressed += leaf.stored.length;
  return {{"seconds", best},
          {"chunks", n},
          {"compressed_bytes", compressed},
          {"decoded_bytes", decoded},
          {"failed_chunks", failed},
          {"batch", batch},
          {"temp_bytes", temp_bytes},
          {"sweep", sweep}};
}

}  // namespace
}  // namespace cuda

nlohmann::json measure_cuda_decode(const Array& array, std::span<const DimSlice> selection,
                                   int device, int repeats, const ReadOptions& options) {
  return cuda::measure_decode(array, selection, device, repeats, options);
}

}  // namespace zarr_device
