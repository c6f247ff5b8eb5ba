// A GPU write batch's device stage (cuda_writer.hpp), on its slot's stream: its leaves laid out as
// stored, marked where they hold anything but the fill value, byte-shuffled where the chain asks
// for it before its compressor, compressed by nvCOMP and packed back
// to back, and copied to pinned host memory (uncompressed chains at once, adjacent chunks in one
// copy; compressed ones in one copy once their sizes are known).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_writer.hpp"
#include "device_read/staging_alignment.hpp"
#include "kernels.hpp"
#include "place/strided_copy.hpp"

namespace zarr_device::cuda {

void Writer::launch(WriteSlot& slot, std::span<WriteItem> items) {
  const std::size_t es = leaf_chain_->spec().dtype->size;
  const auto& leaf_shape = leaf_chain_->spec().shape;
  auto host = WriteArrays::at(slot.host + ctx_->slot_bytes);
  auto dev = WriteArrays::at(slot.arrays);
  const bool compress = plan_.compressor != nullptr;
  const bool shuffle = compress && plan_.shuffle > 1;
  // Place every leaf: laid out in staging, or read where it is.
  std::size_t staged = 0;
  std::size_t outputs = 0;
  std::size_t host_bytes = 0;
  std::size_t n = 0;
  for (auto& item : items) {
    for (auto& leaf : item.leaves) {
      if (leaf.outside) continue;
      leaf.index = n++;
      const bool whole = leaf.region == leaf_shape;
      const StridedView in_values{const_cast<std::byte*>(leaf.source), leaf.region, value_strides_};
      const bool direct =
          whole && !plan_.swap && is_identity(plan_.order) &&
          place::is_c_contiguous(in_values, es) &&
          (!compress ||
           reinterpret_cast<std::uintptr_t>(leaf.source) % plan_.compressor->input_alignment == 0);
      if (direct) {
        leaf.staging = SIZE_MAX;
      } else {
        leaf.staging = staged;
        staged += device_read::align_up(leaf_bytes_, device_read::kStagingAlignment);
      }
      if (shuffle) {
        leaf.shuffled = staged;
        staged += device_read::align_up(leaf_bytes_, device_read::kStagingAlignment);
      }
      if (compress) {
        leaf.output = outputs;
        outputs += device_read::align_up(max_output_, device_read::kStagingAlignment);
      } else {
        leaf.host = host_bytes;
        host_bytes += device_read::align_up(leaf_bytes_, device_read::kStagingAlignment);
      }
    }
  }
  slot.leaves = n;
  std::byte* staging = slot.staging.reserve(std::max(staged, compress ? outputs : 0) +
                                            device_read::kStagingAlignment);
  std::byte* compressed = compress ? slot.compressed.reserve(outputs) : nullptr;
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  // Lay out what is not stored as it lies: fill value around edge regions, transposes, byte order.
  std::memcpy(host.fill, plan_.stored_fill.data(), plan_.stored_fill.size());
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev.fill, host.fill, plan_.stored_fill.size(),
                                cudaMemcpyHostToDevice, slot.stream));
  const std::vector<std::int64_t> zeros(leaf_shape.size(), 0);
  for (auto& item : items) {
    for (auto& leaf : item.leaves) {
      if (leaf.outside) continue;
      if (leaf.staging == SIZE_MAX) {
        leaf.input = leaf.source;
      } else {
        std::byte* at = staging + leaf.staging;
        leaf.input = at;
        if (leaf.region != leaf_shape) {
          launch_strided_copy(
              plan_strided_copy(dev.fill, zeros, StridedView{at, leaf_shape, plan_.stored_strides},
                                es, false, 1),
              slot.stream);
        }
        launch_strided_copy(plan_strided_copy(leaf.source, value_strides_,
                                              StridedView{at, leaf.region, plan_.stored_strides},
                                              es, plan_.swap, plan_.swap_unit),
                            slot.stream);
        ZD_CUDA_CHECK(cudaGetLastError());
      }
      host.inputs[leaf.index] = leaf.input;
      host.input_sizes[leaf.index] = leaf_bytes_;
      if (compress) host.outputs[leaf.index] = compressed + leaf.output;
      if (shuffle) host.shuffled[leaf.index] = staging + leaf.shuffled;
    }
  }
  if (n == 0) {
    ZD_CUDA_CHECK(cudaEventRecord(slot.encoded, slot.stream));
    ZD_CUDA_CHECK(cudaEventRecord(slot.copied, slot.stream));
    slot.busy = true;
    return;
  }
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev.inputs, host.inputs, n * sizeof(void*), cudaMemcpyHostToDevice,
                                slot.stream));
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev.input_sizes, host.input_sizes, n * sizeof(std::size_t),
                                cudaMemcpyHostToDevice, slot.stream));
  if (compress) {
    ZD_CUDA_CHECK(cudaMemcpyAsync(dev.outputs, host.outputs, n * sizeof(void*),
                                  cudaMemcpyHostToDevice, slot.stream));
  }
  ZD_CUDA_CHECK(cudaMemsetAsync(dev.flags, 0, n * sizeof(int), slot.stream));
  launch_mark_non_fill(dev.inputs, dev.input_sizes, n, host.fill, static_cast<int>(es), dev.flags,
                       slot.stream);
  ZD_CUDA_CHECK(cudaGetLastError());
  if (compress) {
    // The fill value is judged on the elements; the compressor takes their shuffle.
    if (shuffle) {
      for (const auto& item : items) {
        for (const auto& leaf : item.leaves) {
          if (leaf.outside) continue;
          launch_chunk_shuffle(leaf.input, staging + leaf.shuffled, leaf_bytes_, plan_.shuffle,
                               slot.stream);
        }
      }
      ZD_CUDA_CHECK(cudaGetLastError());
      ZD_CUDA_CHECK(cudaMemcpyAsync(dev.shuffled, host.shuffled, n * sizeof(void*),
                                    cudaMemcpyHostToDevice, slot.stream));
    }
    const std::size_t temp_bytes = plan_.compressor->temp_size(n, leaf_bytes_, n * leaf_bytes_);
    std::byte* temp = temp_bytes
                          ? ctx_->temp.acquire(temp_bytes, temp_bytes, slot.stream, ctx_->streams)
                          : nullptr;
    plan_.compressor->compress(shuffle ? dev.shuffled : dev.inputs, dev.input_sizes, leaf_bytes_, n,
                               temp, temp_bytes, dev.outputs, dev.output_sizes, dev.statuses,
                               slot.stream);
    if (temp) ctx_->temp.release(slot.stream);
    // The staging's laid-out chunks are consumed: the packed output goes there.
    launch_pack(dev.outputs, dev.output_sizes, n, staging, dev.offsets, slot.stream);
    ZD_CUDA_CHECK(cudaGetLastError());
    ZD_CUDA_CHECK(cudaMemcpyAsync(host.output_sizes, dev.output_sizes, n * sizeof(std::size_t),
                                  cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host.offsets, dev.offsets, n * sizeof(std::size_t),
                                  cudaMemcpyDeviceToHost, slot.stream));
    ZD_CUDA_CHECK(cudaMemcpyAsync(host.statuses, dev.statuses, n * sizeof(int),
                                  cudaMemcpyDeviceToHost, slot.stream));
  } else {
    // Sizes are known: the chunks cross now (adjacent ones in one copy).
    const std::byte* src = nullptr;
    std::size_t dst = 0;
    std::size_t len = 0;
    auto flush = [&] {
      if (len) {
        ZD_CUDA_CHECK(
            cudaMemcpyAsync(slot.host + dst, src, len, cudaMemcpyDeviceToHost, slot.stream));
      }
      len = 0;
    };
    for (auto& item : items) {
      for (auto& leaf : item.leaves) {
        if (leaf.outside) continue;
        if (len && leaf.input == src + len && leaf.host == dst + len) {
          len += leaf_bytes_;
          continue;
        }
        flush();
        src = leaf.input;
        dst = leaf.host;
        len = leaf_bytes_;
      }
    }
    flush();
  }
  ZD_CUDA_CHECK(
      cudaMemcpyAsync(host.flags, dev.flags, n * sizeof(int), cudaMemcpyDeviceToHost, slot.stream));
  ZD_CUDA_CHECK(cudaEventRecord(slot.encoded, slot.stream));
  if (!compress) ZD_CUDA_CHECK(cudaEventRecord(slot.copied, slot.stream));
  slot.busy = true;
}

// Once the sizes are known: the packed compressed chunks cross to the host in one copy.
void Writer::copy_back(WriteSlot& slot, std::span<WriteItem> items) {
  if (plan_.compressor == nullptr || slot.leaves == 0) return;
  ZD_CUDA_CHECK(cudaEventSynchronize(slot.encoded));
  const auto host = WriteArrays::at(slot.host + ctx_->slot_bytes);
  for (const auto& item : items) {
    for (const auto& leaf : item.leaves) {
      if (leaf.outside) continue;
      const int status = host.statuses[leaf.index];
      if (status != 0) {
        throw CodecError(where(item.key) + ": the GPU compressor reported status " +
                         std::to_string(status));
      }
    }
  }
  const std::size_t last = slot.leaves - 1;
  const std::size_t total = host.offsets[last] + host.output_sizes[last];
  if (total > ctx_->slot_bytes) {
    throw CodecError(array_.describe() + ": compressed chunks of " + std::to_string(total) +
                     " bytes exceed a write slot of " + std::to_string(ctx_->slot_bytes) +
                     " bytes (half the staging); raise staging_bytes");
  }
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  ZD_CUDA_CHECK(
      cudaMemcpyAsync(slot.host, slot.staging.data(), total, cudaMemcpyDeviceToHost, slot.stream));
  ZD_CUDA_CHECK(cudaEventRecord(slot.copied, slot.stream));
}

}  // namespace zarr_device::cuda
