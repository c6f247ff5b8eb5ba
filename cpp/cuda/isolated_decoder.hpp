// nvCOMP run on chunks nobody has vouched for, in a decoder process of its own (one per GPU), so
// that a malformed frame can fault or hang only that process (docs/architecture.md, "nvCOMP on
// malformed frames"). The engine owns the memory both sides use: an input arena the caller fills
// with stored bytes and an output arena the decoder writes into, exported to the process through
// CUDA IPC. A write past a chunk's output lands in the arena, never in a caller's tensor; the
// guard band after each output shows such a write, and the batch is then not trusted.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "isolated_decode/decode_messages.hpp"
#include "isolated_decode/decoder_process.hpp"
#include "zarr_device/codec.hpp"

namespace zarr_device::cuda {

// The decoder program: ZARR_DEVICE_DECODER, else zarr-device-decoder beside the engine's module
// (where the Python package installs it). Empty where there is none.
std::string decoder_program();

class IsolatedDecoder {
 public:
  // Batches sent and not yet received, at most: each has an event of its own that the process
  // waits for.
  static constexpr std::size_t kMostInFlight = 16;
  // Bytes of guard band after each output in the arena (the process fills and checks them).
  static constexpr std::size_t kGuardBytes = isolated_decode::kGuardBytes;

  // Arenas of these sizes on `device`; the process starts on first use.
  IsolatedDecoder(int device, std::size_t input_bytes, std::size_t output_bytes,
                  std::string program);
  ~IsolatedDecoder();
  IsolatedDecoder(const IsolatedDecoder&) = delete;
  IsolatedDecoder& operator=(const IsolatedDecoder&) = delete;

  [[nodiscard]] std::byte* input() const { return input_; }
  [[nodiscard]] std::byte* output() const { return output_; }
  [[nodiscard]] std::size_t input_bytes() const { return input_bytes_; }
  [[nodiscard]] std::size_t output_bytes() const { return output_bytes_; }

  // Where each of `capacities` goes in the output arena, guard bands between; none where they do
  // not fit.
  [[nodiscard]] std::optional<std::vector<std::size_t>> lay_out(
      std::span<const std::size_t> capacities) const;

  // Per chunk, whether its decode can be trusted: the decoder answered, its status is success (not
  // where a decode of its batch wrote into a guard band) and its size is the capacity (the size the
  // metadata gives).
  struct Outcome {
    std::vector<bool> decoded;
    std::string why;  // where the process failed: what happened to it (then no chunk is decoded)
    bool failed_to_start = false;  // no process could be started for the batch
    double waited = 0;             // seconds waiting for the process's answer
  };
  // A batch sent to the process, its answer not yet received.
  struct Sent {
    isolated_decode::DecodeBatch batch;
    std::uint64_t process = 0;  // the process it went to (starts_ when it was sent)
    bool sent = false;
    bool failed_to_start = false;
    std::string why;  // where it was not sent
  };
  // Sends chunks whose stored bytes the caller has put in the input arena (their copies queued on
  // `stream`): starts a process if none runs, records an event on `stream` that the process waits
  // for on the GPU, and sends the batch. Batches are received in the order they are sent, at most
  // kMostInFlight at a time; the arenas' ranges of those in flight (each output with the guard
  // band after it) must not overlap.
  // `check`: the check of the decoded bytes the process verifies, against each job's `expected`.
  Sent send(DeviceDecoding::Kind codec, std::span<const isolated_decode::ChunkJob> chunks,
            cudaStream_t stream,
            isolated_decode::DecodedCheck check = isolated_decode::DecodedCheck::kNone);
  // Whether the answer to the oldest batch in flight (`sent`) can be received without waiting
  // (or it never will be: the process has ended).
  [[nodiscard]] bool answered(const Sent& sent) const;
  // Waits for the answer to the oldest batch in flight (`sent`) until `deadline`.
  Outcome receive(const Sent& sent, std::chrono::steady_clock::time_point deadline);
  // Both, for one batch.
  Outcome decode(DeviceDecoding::Kind codec, std::span<const isolated_decode::ChunkJob> chunks,
                 cudaStream_t stream, std::chrono::steady_clock::time_point deadline,
                 isolated_decode::DecodedCheck check = isolated_decode::DecodedCheck::kNone) {
    return receive(send(codec, chunks, stream, check), deadline);
  }

  // Processes started so far (one, unless some were lost to faults or hangs).
  [[nodiscard]] std::size_t starts() const { return starts_; }
  [[nodiscard]] const std::string& description() const;

 private:
  bool ensure_process(std::string& why);

  int device_;
  std::byte* input_ = nullptr;
  std::byte* output_ = nullptr;
  std::size_t input_bytes_;
  std::size_t output_bytes_;
  std::string program_;
  std::unique_ptr<isolated_decode::DecoderProcess> process_;
  std::size_t starts_ = 0;
  std::uint64_t next_batch_ = 1;
  std::array<cudaEvent_t, kMostInFlight> events_{};  // exported to every process started
};

}  // namespace zarr_device::cuda
