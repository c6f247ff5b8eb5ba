// The chunks of a batch that decode in the decoder process (Route::kIsolatedDecode): their stored
// bytes copied on the device into the arena the engine lends the process, decoded there, checked
// (status, size, the guard band after every output) and only then placed into the read's outputs,
// at the places the metadata gives. What the process does not decode is decoded on the CPU from
// the slot's bytes, so a malformed chunk costs the process, never the caller's context, and is
// reported as the CPU's decoders report it, naming the chunk.
#include <cuda_runtime_api.h>

#include <chrono>
#include <deque>
#include <map>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "device_memory.hpp"
#include "device_read/read_staging.hpp"
#include "kernels.hpp"
#include "shared_decoder.hpp"

namespace zarr_device::cuda {

using device_read::kPlaced;
using device_read::Route;
using device_read::unshuffles_in_place;

namespace {

constexpr std::size_t kArenaAlignment = 256;  // of each input and output in the arenas

// How long a call may take before its process is taken for hung: far more than any decode of the
// arenas' bytes takes (GB/s on any GPU nvCOMP runs on), far less than a user would wait.
std::chrono::steady_clock::time_point deadline_for(std::size_t decoded_bytes) {
  constexpr std::size_t kBytesPerSecond = std::size_t{64} << 20;
  return std::chrono::steady_clock::now() + std::chrono::seconds(10) +
         std::chrono::milliseconds(decoded_bytes * 1000 / kBytesPerSecond);
}

// One call's chunks: the batch's leaves (by index) and their places in the arenas.
struct IsolatedCall {
  std::vector<std::size_t> leaves;
  std::vector<isolated_decode::ChunkJob> jobs;
  std::size_t decoded = 0;
};

// The leaves of `members` from `begin` that fit the arenas together (at least one, unless the
// first is too large alone: then none).
IsolatedCall next_call(std::span<const Leaf> batch, std::span<const std::size_t> members,
                       std::size_t begin, const IsolatedDecoder& decoder) {
  IsolatedCall call;
  std::size_t input_at = 0;
  std::size_t output_at = 0;
  for (std::size_t m = begin; m < members.size(); ++m) {
    const Leaf& leaf = batch[members[m]];
    const std::size_t in = leaf.stored.length - leaf.decoding.header - leaf.decoding.trailer;
    const std::size_t out = leaf.planned().spec->nbytes();
    const std::size_t input_end = device_read::align_up(input_at + in, kArenaAlignment);
    const std::size_t output_end =
        device_read::align_up(output_at + out + IsolatedDecoder::kGuardBytes, kArenaAlignment);
    if (input_end > decoder.input_bytes() || output_end > decoder.output_bytes()) break;
    call.leaves.push_back(members[m]);
    call.jobs.push_back({input_at, in, output_at, out});
    call.decoded += out;
    input_at = input_end;
    output_at = output_end;
  }
  return call;
}

}  // namespace

void Reader::place_cpu_decoded(DeviceContext& ctx, cudaStream_t stream, Leaf& leaf,
                               const ByteArray& bytes) {
  const std::size_t nbytes = bytes.size();
  const DeviceBuffer tmp(ctx.gpu_, nbytes);
  auto* dev = static_cast<std::byte*>(tmp.data());
  ZD_CUDA_CHECK(cudaMemcpyAsync(dev, bytes.data(), nbytes, cudaMemcpyHostToDevice, stream));
  const auto [counts, strides] = device_read::staged_layout(leaf);
  launch_strided_copy(plan_strided_copy(dev, strides, leaf.planned().decoded_destination(),
                                        leaf.planned().spec->dtype->size, false, 1),
                      stream);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t synced = cudaStreamSynchronize(stream);  // before the buffer is freed
  ZD_CUDA_CHECK(launched);
  ZD_CUDA_CHECK(synced);
  leaf.staging.scratch = kPlaced;
}

void Reader::decode_isolated(DeviceContext& ctx, std::span<Leaf> batch, const std::byte* host,
                             const std::byte* staged, cudaStream_t stream,
                             const std::function<void()>& before_writing) {
  std::map<GpuCodec, std::vector<std::size_t>> by_codec;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].decoding.route == Route::kIsolatedDecode && batch[i].staging.scratch != kPlaced) {
      by_codec[batch[i].decoding.codec].push_back(i);
    }
  }
  if (by_codec.empty()) return;
  std::vector<std::size_t> on_cpu;  // what the process did not decode
  {
    auto& shared = SharedDecoder::of(device_);
    auto lease = shared.lease();
    for (const auto& [codec, members] : by_codec) {
      for (std::size_t begin = 0; begin < members.size();) {
        IsolatedCall call;
        if (lease.decoder) call = next_call(batch, members, begin, *lease.decoder);
        if (call.leaves.empty()) {  // no decoder, or a chunk larger than its arenas
          on_cpu.push_back(members[begin++]);
          continue;
        }
        begin += call.leaves.size();
        for (std::size_t k = 0; k < call.leaves.size(); ++k) {
          const Leaf& leaf = batch[call.leaves[k]];
          ZD_CUDA_CHECK(cudaMemcpyAsync(lease.decoder->input() + call.jobs[k].input_offset,
                                        staged + leaf.staging.offset + leaf.decoding.header,
                                        call.jobs[k].input_bytes, cudaMemcpyDeviceToDevice,
                                        stream));
        }
        const auto outcome =
            lease.decoder->decode(codec, call.jobs, stream, deadline_for(call.decoded));
        shared.record(outcome);
        ++isolated_calls_;
        isolated_chunks_ += call.leaves.size();
        before_writing();
        std::deque<DeviceBuffer> unshuffled;  // until the placements from them are done
        for (std::size_t k = 0; k < call.leaves.size(); ++k) {
          Leaf& leaf = batch[call.leaves[k]];
          if (!outcome.decoded[k]) {
            on_cpu.push_back(call.leaves[k]);
            continue;
          }
          const auto& planned = leaf.planned();
          const std::byte* decoded = lease.decoder->output() + call.jobs[k].output_offset;
          if (leaf.decoding.unshuffle > 1) {
            if (unshuffles_in_place(leaf)) {
              launch_chunk_unshuffle(decoded, planned.destination.data, planned.spec->nbytes(),
                                     leaf.decoding.unshuffle, stream);
              ZD_CUDA_CHECK(cudaGetLastError());
              leaf.staging.scratch = kPlaced;
              continue;
            }
            auto& buffer = unshuffled.emplace_back(ctx.gpu_, planned.spec->nbytes());
            launch_chunk_unshuffle(decoded, static_cast<std::byte*>(buffer.data()),
                                   planned.spec->nbytes(), leaf.decoding.unshuffle, stream);
            ZD_CUDA_CHECK(cudaGetLastError());
            decoded = static_cast<const std::byte*>(buffer.data());
          }
          place_on_device(decoded, *planned.spec, planned.selection, planned.destination,
                          leaf.decoding.swap, stream);
          leaf.staging.scratch = kPlaced;
        }
        // The next call (this batch's, or another read's) writes over the output arena.
        ZD_CUDA_CHECK(cudaStreamSynchronize(stream));
      }
    }
  }
  // Decoded as the CPU decodes any chunk: bit-equal where the bytes are valid, the codec's typed
  // error naming the chunk where they are not.
  for (const std::size_t i : on_cpu) {
    Leaf& leaf = batch[i];
    ++isolated_on_cpu_;
    try {
      const auto bytes = device_read::decode_on_cpu(
          leaf, Buffer(nullptr, host + leaf.staging.offset, leaf.stored.length));
      before_writing();
      place_cpu_decoded(ctx, stream, leaf, bytes);
    } catch (Error& e) {
      e.add_context(leaf.planned().where());
      throw;
    }
  }
}

}  // namespace zarr_device::cuda
