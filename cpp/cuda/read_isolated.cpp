// The chunks of a batch that decode in the decoder process (Route::kIsolatedDecode): their stored
// bytes copied on the device into the arena the engine lends the process, decoded there, checked
// (status, size, the guard band after every output) and only then placed into the read's outputs,
// at the places the metadata gives. What the process does not decode is decoded on the CPU from
// the slot's bytes, so a malformed chunk costs the process, never the caller's context, and is
// reported as the CPU's decoders report it, naming the chunk.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "device_memory.hpp"
#include "device_read/fifo_ring.hpp"
#include "device_read/read_staging.hpp"
#include "kernels.hpp"
#include "place/strided_copy.hpp"
#include "shared_decoder.hpp"

namespace zarr_device::cuda {

using device_read::kPlaced;
using device_read::Route;
using device_read::unshuffles_in_place;

namespace {

constexpr std::size_t kArenaAlignment = 256;  // of each input and output in the arenas
// Of each stream's input where a call's inputs are moved one by one (the most nvCOMP's decoders
// ask of their inputs).
constexpr std::size_t kStreamAlignment = 16;

// The protocol's name for a codec's check (the wire form keeps its own numbering).
isolated_decode::DecodedCheck decoded_check(DeviceCheck check) {
  switch (check) {
    case DeviceCheck::kCrc32:
      return isolated_decode::DecodedCheck::kCrc32;
    case DeviceCheck::kAdler32:
      return isolated_decode::DecodedCheck::kAdler32;
    case DeviceCheck::kNone:
      break;
  }
  return isolated_decode::DecodedCheck::kNone;
}

// How long a call may take before its process is taken for hung: far more than any decode of the
// arenas' bytes takes (GB/s on any GPU nvCOMP runs on), far less than a user would wait.
std::chrono::steady_clock::time_point deadline_for(std::size_t decoded_bytes) {
  constexpr std::size_t kBytesPerSecond = std::size_t{64} << 20;
  return std::chrono::steady_clock::now() + std::chrono::seconds(10) +
         std::chrono::milliseconds(decoded_bytes * 1000 / kBytesPerSecond);
}

double seconds_since(std::chrono::steady_clock::time_point from) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

}  // namespace

// One call of the decoder process in flight: the batch's leaves it decodes, where their bytes are
// in the arenas, and what its completion needs.
struct IsolatedCall {
  DeviceContext* ctx = nullptr;
  std::span<Leaf> batch;
  std::vector<std::size_t> leaves;  // in the batch
  std::vector<isolated_decode::ChunkJob> jobs;
  // Leaf k's jobs are jobs[first_job[k]] up to jobs[first_job[k + 1]] (one per chunk, but one per
  // compressed stream of a chunk of many streams).
  std::vector<std::size_t> first_job;
  // Chunks of many streams (Decoding::streams): leaf k's streams (none where they could not be
  // read: the CPU decodes it), and the moves of their inputs from the slot into the input arena,
  // each to an address nvCOMP takes (offsets in the slot and in the call's input range).
  bool framed = false;
  std::vector<DeviceStreams> streams;
  struct Move {
    std::size_t from = 0;
    std::size_t to = 0;
    std::size_t bytes = 0;
  };
  std::vector<Move> moves;
  const std::byte* staged = nullptr;  // the slot's bytes on the device (stored streams)
  std::size_t decoded = 0;            // bytes
  std::size_t staged_from = 0;        // the slot's bytes it copies into the input arena
  std::size_t staged_bytes = 0;
  std::size_t input_bytes = 0;    // of the input arena it takes
  std::size_t output_bytes = 0;   // of the output arena, its guard bands included
  std::uint64_t input_range = 0;  // its ranges' numbers in the arenas' rings
  std::uint64_t output_range = 0;
  const std::byte* host = nullptr;  // the slot's bytes: what the CPU decodes from
  cudaStream_t stream = nullptr;    // where the chunks are placed
  Slot* slot = nullptr;             // the batch's slot (none: decoded off the slots)
  IsolatedDecoder::Sent sent;
  // Once answered: its chunks placed (or decoded on the CPU), on `stream` up to `placed`; its
  // output arena range is free once that event has passed.
  bool received = false;  // its answer taken (a failure while placing leaves it unanswered)
  bool answered = false;
  struct EventDeleter {
    void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
  };
  std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter> placed;
  std::deque<DeviceBuffer> unshuffled;  // placed from, until `placed`
};

// The calls of one read in flight, and the decoder the read holds from its first call to its end,
// whose arenas it uses as rings: calls take ranges in the order they are sent, and a range is
// reused once the calls before it are retired (device_read::FifoRing).
struct IsolatedCalls {
  std::deque<IsolatedCall> in_flight;
  SharedDecoder::Lease lease;
  std::optional<device_read::FifoRing> input_ring;
  std::optional<device_read::FifoRing> output_ring;
};

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

namespace {

// The most a call decodes (its chunks alone may be larger, up to the whole arena): a batch of a
// staging slot at the usual ratios, and a 16th of the output arena, so that many calls are in the
// process at once (it decodes batches side by side, and nvCOMP's working memory for each is a
// multiple of what it decodes).
std::size_t most_decoded_by_a_call(const IsolatedDecoder& decoder) {
  constexpr std::size_t kLeast = std::size_t{64} << 20;
  return std::min(decoder.output_bytes() / 2, std::max(decoder.output_bytes() / 16, kLeast));
}

// The leaves of `members` from `begin` that one call decodes: at most half of the input arena and
// most_decoded_by_a_call of the output one, so that the next calls are staged and sent while this
// one decodes, unless one chunk alone is larger (up to the whole arena); none where the first is
// larger than the arenas. Offsets from the call's start. (All of them chunks of many streams, or
// none: `members` are of one kind.)
IsolatedCall next_call(std::span<Leaf> batch, std::span<const std::size_t> members,
                       std::size_t begin, const IsolatedDecoder& decoder, const std::byte* host) {
  IsolatedCall call;
  call.batch = batch;
  call.framed = batch[members[begin]].decoding.streams != nullptr;
  // The inputs keep the places they have in the slot, relative to the first one's, so that one
  // copy moves the call's stored bytes into the arena (and their alignment stays the slot's).
  // Streams are moved one by one instead, each to an address nvCOMP takes.
  std::size_t span_begin = SIZE_MAX;
  std::size_t span_end = 0;
  std::size_t input_at = 0;  // of the moved streams
  std::size_t output_at = 0;
  std::vector<isolated_decode::ChunkJob> jobs;
  std::vector<IsolatedCall::Move> moves;
  for (std::size_t m = begin; m < members.size(); ++m) {
    const Leaf& leaf = batch[members[m]];
    const std::size_t in = leaf.stored.length - leaf.decoding.header - leaf.decoding.trailer;
    const std::size_t out = leaf.planned().spec->nbytes();
    const std::size_t at = leaf.staging.offset + leaf.decoding.header;
    jobs.clear();
    moves.clear();
    DeviceStreams streams;
    std::size_t from = span_begin;
    std::size_t to = span_end;
    std::size_t input_end = input_at;
    std::size_t output_end = output_at;
    auto add_output = [&](std::size_t bytes) {
      const std::size_t place = output_end;
      output_end =
          device_read::align_up(place + bytes + IsolatedDecoder::kGuardBytes, kArenaAlignment);
      return place;
    };
    if (!call.framed) {
      from = std::min(span_begin, leaf.staging.offset);
      to = std::max(span_end, leaf.staging.offset + leaf.stored.length);
      input_end = to - from;
      // The check's value as the stored bytes carry it (the codec's encoding, before any crc32c).
      const std::uint32_t expected =
          leaf.decoding.check_value == nullptr
              ? 0
              : leaf.decoding.check_value(
                    {host + leaf.staging.offset,
                     leaf.stored.length - 4 * static_cast<std::size_t>(leaf.decoding.crc32c)});
      jobs.push_back({at, in, add_output(out), out, expected});
    } else if (leaf.decoding.streams({host + at, in}, out, streams)) {
      for (const auto& stream : streams.streams) {
        if (stream.stored) continue;  // gathered from the slot
        moves.push_back({at + stream.input_offset, input_end, stream.input_bytes});
        jobs.push_back(
            {input_end, stream.input_bytes, add_output(stream.output_bytes), stream.output_bytes});
        input_end = device_read::align_up(input_end + stream.input_bytes, kStreamAlignment);
      }
    }
    const bool first = call.leaves.empty();
    if (device_read::align_up(input_end, kArenaAlignment) >
            decoder.input_bytes() / (first ? 1 : 2) ||
        output_end > (first ? decoder.output_bytes() : most_decoded_by_a_call(decoder))) {
      break;
    }
    span_begin = from;
    span_end = to;
    input_at = input_end;
    output_at = output_end;
    call.leaves.push_back(members[m]);
    call.first_job.push_back(call.jobs.size());
    call.jobs.insert(call.jobs.end(), jobs.begin(), jobs.end());
    call.moves.insert(call.moves.end(), moves.begin(), moves.end());
    call.streams.push_back(std::move(streams));
    call.decoded += out;
  }
  if (call.leaves.empty()) return call;
  call.first_job.push_back(call.jobs.size());
  if (!call.framed) {
    for (auto& job : call.jobs) job.input_offset -= span_begin;  // from the span's start
    call.staged_from = span_begin;
    call.staged_bytes = span_end - span_begin;
    input_at = call.staged_bytes;
  }
  call.input_bytes = device_read::align_up(input_at, kArenaAlignment);
  call.output_bytes = output_at;
  return call;
}

}  // namespace

void Reader::hold_decoder() {
  if (isolated_->lease.lock.owns_lock()) return;
  isolated_->lease = SharedDecoder::of(device_).lease();
  if (const IsolatedDecoder* decoder = isolated_->lease.decoder) {
    isolated_->input_ring.emplace(decoder->input_bytes());
    isolated_->output_ring.emplace(decoder->output_bytes());
  }
}

void Reader::release_decoder() {
  isolated_->lease = {};
  isolated_->input_ring.reset();
  isolated_->output_ring.reset();
}

void Reader::decode_isolated(DeviceContext& ctx, std::span<Leaf> batch, const std::byte* host,
                             const std::byte* staged, cudaStream_t stream, Slot* slot) {
  // Calls of one codec (and check) each, chunks of many streams apart from the others.
  std::map<std::tuple<GpuCodec, bool, DeviceCheck>, std::vector<std::size_t>> by_codec;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& decoding = batch[i].decoding;
    if (decoding.route == Route::kIsolatedDecode && batch[i].staging.scratch != kPlaced) {
      by_codec[{decoding.codec, decoding.streams != nullptr, decoding.check}].push_back(i);
    }
  }
  if (by_codec.empty()) return;
  if (!isolated_) isolated_ = std::make_shared<IsolatedCalls>();
  std::vector<std::size_t> on_cpu;  // chunks no decoder can take
  for (const auto& [kind, members] : by_codec) {
    const GpuCodec codec = std::get<0>(kind);
    const isolated_decode::DecodedCheck check = decoded_check(std::get<2>(kind));
    for (std::size_t begin = 0; begin < members.size();) {
      hold_decoder();
      IsolatedDecoder* decoder = isolated_->lease.decoder;
      IsolatedCall call;
      if (decoder != nullptr) call = next_call(batch, members, begin, *decoder, host);
      if (call.leaves.empty()) {  // no decoder, or a chunk larger than its arenas
        on_cpu.push_back(members[begin++]);
        continue;
      }
      begin += call.leaves.size();
      // Its ranges of the arenas, after the calls in flight: the calls whose ranges they overlap
      // are retired first (oldest first, as the rings hand ranges out in order).
      auto& in_flight = isolated_->in_flight;
      const std::string where = batch[call.leaves.front()].planned().where();
      auto take = [&](device_read::FifoRing& ring, std::size_t bytes,
                      std::uint64_t IsolatedCall::*range_of) {
        const auto taken = ring.take(
            bytes,
            [&](std::uint64_t range, bool /*gone*/) {
              while (!in_flight.empty() && in_flight.front().*range_of <= range) {
                retire_oldest_isolated();
              }
            },
            where);
        ring.close(taken.id);
        return taken;
      };
      const auto input = take(*isolated_->input_ring, call.input_bytes, &IsolatedCall::input_range);
      const auto output =
          take(*isolated_->output_ring, call.output_bytes, &IsolatedCall::output_range);
      call.input_range = input.id;
      call.output_range = output.id;
      const auto staging_from = std::chrono::steady_clock::now();
      for (auto& job : call.jobs) {
        job.input_offset += input.offset;
        job.output_offset += output.offset;
      }
      if (!call.framed) {
        ZD_CUDA_CHECK(cudaMemcpyAsync(decoder->input() + input.offset, staged + call.staged_from,
                                      call.staged_bytes, cudaMemcpyDeviceToDevice, stream));
      } else if (!call.moves.empty()) {
        std::vector<CopyRange> copies;
        copies.reserve(call.moves.size());
        for (const auto& move : call.moves) {
          copies.push_back(
              {staged + move.from, decoder->input() + input.offset + move.to, move.bytes});
        }
        launch_copy_ranges(copies, stream);
        ZD_CUDA_CHECK(cudaGetLastError());
      }
      call.staged = staged;
      call.ctx = &ctx;
      call.host = host;
      call.stream = stream;
      call.slot = slot;
      // Each call in flight has one of the decoder's events: the oldest waiting for its answer is
      // answered first where all are taken.
      const auto unanswered = std::count_if(in_flight.begin(), in_flight.end(),
                                            [](const IsolatedCall& c) { return !c.answered; });
      if (static_cast<std::size_t>(unanswered) >= IsolatedDecoder::kMostInFlight) {
        for (auto& earlier : in_flight) {
          if (!earlier.answered) {
            answer_isolated(earlier);
            break;
          }
        }
      }
      // (A call whose chunks are all stored streams has nothing to decode and is not sent.)
      if (!call.jobs.empty()) call.sent = decoder->send(codec, call.jobs, stream, check);
      isolated_times_.staging += seconds_since(staging_from);
      ++isolated_calls_;
      isolated_chunks_ += call.leaves.size();
      isolated_->in_flight.push_back(std::move(call));
      answer_waiting_isolated();  // earlier calls' placements queued as soon as they can be
    }
  }
  // Decoded as the CPU decodes any chunk: bit-equal where the bytes are valid, the codec's typed
  // error naming the chunk where they are not.
  for (const std::size_t i : on_cpu) decode_isolated_on_cpu(ctx, batch[i], host, stream);
  if (slot == nullptr) complete_isolated(nullptr);  // off the slots: the batch is awaited as is
}

void Reader::decode_isolated_on_cpu(DeviceContext& ctx, Leaf& leaf, const std::byte* host,
                                    cudaStream_t stream) {
  ++isolated_on_cpu_;
  try {
    const auto bytes = device_read::decode_on_cpu(
        leaf, Buffer(nullptr, host + leaf.staging.offset, leaf.stored.length));
    if (defer_consumers_) wait_for_consumers(ctx, stream);
    place_cpu_decoded(ctx, stream, leaf, bytes);
  } catch (Error& e) {
    e.add_context(leaf.planned().where());
    throw;
  }
}

void Reader::answer_isolated(IsolatedCall& call) {
  auto& shared = SharedDecoder::of(device_);
  IsolatedDecoder* decoder = isolated_->lease.decoder;
  const auto outcome = call.jobs.empty() ? IsolatedDecoder::Outcome{}
                                         : decoder->receive(call.sent, deadline_for(call.decoded));
  call.received = true;
  if (!call.jobs.empty()) shared.record(outcome);
  isolated_times_.waiting += outcome.waited;
  const auto placing_from = std::chrono::steady_clock::now();
  DeviceContext& ctx = *call.ctx;
  if (defer_consumers_) wait_for_consumers(ctx, call.stream);
  std::vector<std::size_t> on_cpu;
  // Chunks of many streams: their blocks, gathered from the streams into place (or scratch) in
  // launches after the loop, and the chunks placed from scratch after that.
  std::vector<StreamBlock> blocks;
  std::vector<const std::byte*> sources;
  std::vector<std::pair<std::size_t, const std::byte*>> from_scratch;
  std::vector<CopyRange> whole;
  ChunkUnshuffles unshuffles;
  for (std::size_t k = 0; k < call.leaves.size(); ++k) {
    Leaf& leaf = call.batch[call.leaves[k]];
    const std::size_t first = call.first_job[k];
    const std::size_t end = call.first_job[k + 1];
    const bool decoded_all = std::all_of(
        outcome.decoded.begin() + static_cast<std::ptrdiff_t>(first),
        outcome.decoded.begin() + static_cast<std::ptrdiff_t>(end), [](bool d) { return d; });
    if (!decoded_all || (call.framed && call.streams[k].blocks.empty())) {
      on_cpu.push_back(call.leaves[k]);
      continue;
    }
    const auto& planned = leaf.planned();
    if (call.framed) {
      // Each stream from where the process decoded it, or a stored one from the slot; the offsets
      // are the engine's own, from the stored bytes it checked, never the process's.
      const DeviceStreams& streams = call.streams[k];
      const std::size_t base = sources.size();
      std::size_t job = first;
      for (const auto& stream : streams.streams) {
        const std::size_t at = leaf.staging.offset + leaf.decoding.header;
        sources.push_back(stream.stored ? call.staged + at + stream.input_offset
                                        : decoder->output() + call.jobs[job++].output_offset);
      }
      std::byte* into = planned.destination.data;
      const bool in_place = placed_by_copy(leaf);
      if (!in_place) {
        into = static_cast<std::byte*>(
            call.unshuffled.emplace_back(ctx.gpu_, planned.spec->nbytes()).data());
        from_scratch.emplace_back(call.leaves[k], into);
      }
      for (const auto& block : streams.blocks) {
        blocks.push_back({into + block.offset, static_cast<std::uint32_t>(block.bytes),
                          static_cast<std::uint32_t>(base + block.first_stream), block.streams,
                          streams.unshuffle});
      }
      if (in_place) leaf.staging.scratch = kPlaced;
      continue;
    }
    const std::byte* decoded = decoder->output() + call.jobs[first].output_offset;
    if (leaf.decoding.unshuffle > 1) {
      if (unshuffles_in_place(leaf)) {
        unshuffles.add(decoded, planned.destination.data, planned.spec->nbytes(),
                       leaf.decoding.unshuffle, call.stream);
        leaf.staging.scratch = kPlaced;
        continue;
      }
      auto& buffer = call.unshuffled.emplace_back(ctx.gpu_, planned.spec->nbytes());
      launch_chunk_unshuffle(decoded, static_cast<std::byte*>(buffer.data()),
                             planned.spec->nbytes(), leaf.decoding.unshuffle, call.stream);
      ZD_CUDA_CHECK(cudaGetLastError());
      decoded = static_cast<const std::byte*>(buffer.data());
    }
    if (placed_by_copy(leaf)) {
      // Copied by a few launches after the loop, not one copy call each: for thousands of small
      // chunks, queueing a copy per chunk costs the reading thread more than the copies.
      whole.push_back({decoded, planned.destination.data, planned.spec->nbytes()});
    } else {
      place_on_device(decoded, *planned.spec, planned.selection, planned.destination,
                      leaf.decoding.swap, call.stream);
    }
    leaf.staging.scratch = kPlaced;
  }
  if (!whole.empty()) {
    launch_copy_ranges(whole, call.stream);
    ZD_CUDA_CHECK(cudaGetLastError());
  }
  unshuffles.launch(call.stream);
  ZD_CUDA_CHECK(cudaGetLastError());
  if (!blocks.empty()) {
    launch_gather_blocks(blocks, sources, call.stream);
    ZD_CUDA_CHECK(cudaGetLastError());
  }
  for (const auto& [i, scratch] : from_scratch) {
    Leaf& leaf = call.batch[i];
    const auto& planned = leaf.planned();
    place_on_device(scratch, *planned.spec, planned.selection, planned.destination,
                    leaf.decoding.swap, call.stream);
    leaf.staging.scratch = kPlaced;
  }
  for (const std::size_t i : on_cpu) {
    decode_isolated_on_cpu(ctx, call.batch[i], call.host, call.stream);
  }
  cudaEvent_t placed = nullptr;
  ZD_CUDA_CHECK(cudaEventCreateWithFlags(&placed, cudaEventDisableTiming));
  call.placed.reset(placed);
  ZD_CUDA_CHECK(cudaEventRecord(placed, call.stream));
  // The batch's slot is done once its placements are.
  if (call.slot != nullptr) ZD_CUDA_CHECK(cudaEventRecord(call.slot->done, call.stream));
  call.answered = true;
  isolated_times_.placing += seconds_since(placing_from);
}

void Reader::answer_waiting_isolated() {
  for (auto& call : isolated_->in_flight) {
    if (call.answered) continue;
    if (!call.jobs.empty() && !isolated_->lease.decoder->answered(call.sent)) return;
    answer_isolated(call);
  }
}

void Reader::retire_oldest_isolated() {
  auto& in_flight = isolated_->in_flight;
  // (Answered calls come first: answers come in the order the calls were sent.)
  if (!in_flight.front().answered) answer_isolated(in_flight.front());
  // Later calls write over its output range once they are sent: the placements from it end first.
  const auto waiting_from = std::chrono::steady_clock::now();
  ZD_CUDA_CHECK(cudaEventSynchronize(in_flight.front().placed.get()));
  isolated_times_.retiring += seconds_since(waiting_from);
  in_flight.pop_front();
}

bool Reader::isolated_pending(const Slot& slot) const {
  return isolated_ && std::any_of(isolated_->in_flight.begin(), isolated_->in_flight.end(),
                                  [&](const IsolatedCall& call) {
                                    return call.slot == &slot && !call.answered;
                                  });
}

void Reader::complete_isolated(const Slot* through) {
  if (!isolated_) return;
  auto& in_flight = isolated_->in_flight;
  if (through == nullptr) {
    while (!in_flight.empty()) retire_oldest_isolated();
    release_decoder();
    return;
  }
  for (auto& call : in_flight) {
    if (!isolated_pending(*through)) return;
    if (!call.answered) answer_isolated(call);
  }
}

void Reader::abandon_isolated() noexcept {
  if (!isolated_) return;
  // Their answers are taken, so that the process answers the next read's calls, and nothing more
  // is placed: the read has failed.
  auto& in_flight = isolated_->in_flight;
  while (!in_flight.empty()) {
    try {
      IsolatedCall call = std::move(in_flight.front());
      in_flight.pop_front();
      if (!call.received && !call.jobs.empty() && isolated_->lease.decoder != nullptr) {
        isolated_->lease.decoder->receive(call.sent, deadline_for(call.decoded));
      }
      if (call.placed) cudaEventSynchronize(call.placed.get());
    } catch (...) {  // NOLINT(bugprone-empty-catch): the read's first error is the one reported
    }
  }
  release_decoder();
}

}  // namespace zarr_device::cuda
