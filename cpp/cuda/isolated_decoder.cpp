#include "isolated_decoder.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "cuda_check.hpp"
#include "kernels.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {

namespace {

constexpr std::size_t kOutputAlignment = 256;  // what nvCOMP's decoders ask of their outputs

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

isolated_decode::Arena exported(void* memory, std::size_t bytes) {
  cudaIpcMemHandle_t handle{};
  ZD_CUDA_CHECK(cudaIpcGetMemHandle(&handle, memory));
  isolated_decode::Arena arena{isolated_decode::ArenaKind::kCudaIpc, bytes, {}};
  arena.handle.resize(sizeof(handle));
  std::memcpy(arena.handle.data(), &handle, sizeof(handle));
  return arena;
}

}  // namespace

std::string decoder_program() {
  if (auto path = environment_value(EnvironmentVariable::kDecoder)) return *path;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&decoder_program), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  const auto beside = std::filesystem::path(info.dli_fname).parent_path() / "zarr-device-decoder";
  return ::access(beside.c_str(), X_OK) == 0 ? beside.string() : std::string();
}

IsolatedDecoder::IsolatedDecoder(int device, std::size_t input_bytes, std::size_t output_bytes,
                                 std::string program)
    : device_(device),
      input_bytes_(input_bytes),
      output_bytes_(output_bytes),
      program_(std::move(program)) {
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  // Plain cudaMalloc: CUDA IPC exports only such allocations.
  ZD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&input_), input_bytes_));
  if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&output_), output_bytes_);
      e != cudaSuccess) {
    cudaFree(input_);
    ZD_CUDA_CHECK(e);
  }
  for (auto& event : events_) {
    // Interprocess events may not record timing.
    if (cudaError_t e =
            cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming);
        e != cudaSuccess) {
      for (cudaEvent_t made : events_) {
        if (made != nullptr) cudaEventDestroy(made);
      }
      cudaFree(output_);
      cudaFree(input_);
      ZD_CUDA_CHECK(e);
    }
  }
}

IsolatedDecoder::~IsolatedDecoder() {
  process_.reset();  // the process lets go of the arenas before they are freed
  cudaSetDevice(device_);
  for (cudaEvent_t event : events_) cudaEventDestroy(event);
  cudaFree(output_);
  cudaFree(input_);
}

const std::string& IsolatedDecoder::description() const {
  static const std::string none = "no decoder process";
  return process_ ? process_->description() : none;
}

std::optional<std::vector<std::size_t>> IsolatedDecoder::lay_out(
    std::span<const std::size_t> capacities) const {
  std::vector<std::size_t> at;
  at.reserve(capacities.size());
  std::size_t next = 0;
  for (std::size_t capacity : capacities) {
    at.push_back(next);
    next = align_up(next + capacity + kGuardBytes, kOutputAlignment);
    if (next > output_bytes_) return std::nullopt;
  }
  return at;
}

bool IsolatedDecoder::ensure_process(std::string& why) {
  if (process_ && process_->running()) return true;
  process_.reset();
  if (program_.empty()) {
    why = "no decoder program (install zarr-device with its decoder, or set ZARR_DEVICE_DECODER)";
    return false;
  }
  isolated_decode::DecoderSetup setup{
      device_, exported(input_, input_bytes_), exported(output_, output_bytes_), {}};
  for (cudaEvent_t event : events_) {
    cudaIpcEventHandle_t handle{};
    ZD_CUDA_CHECK(cudaIpcGetEventHandle(&handle, event));
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(&handle);
    setup.events.emplace_back(bytes, bytes + sizeof(handle));
  }
  ++starts_;
  // Starting loads nvCOMP and makes a CUDA context: seconds on a cold machine.
  process_ = isolated_decode::DecoderProcess::start(
      {program_, {}}, setup, {}, std::chrono::steady_clock::now() + std::chrono::seconds(60), why);
  return process_ != nullptr;
}

IsolatedDecoder::Sent IsolatedDecoder::send(DeviceDecoding::Kind codec,
                                            std::span<const isolated_decode::ChunkJob> chunks,
                                            cudaStream_t stream,
                                            isolated_decode::DecodedCheck check) {
  Sent sent;
  sent.batch = {next_batch_++,
                static_cast<isolated_decode::CodecKind>(codec),
                {chunks.begin(), chunks.end()},
                isolated_decode::kNoEvent,
                check};
  if (chunks.empty()) return sent;
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  for (const auto& c : chunks) {
    if (c.capacity > output_bytes_ ||
        !isolated_decode::within(c.output_offset, c.capacity + kGuardBytes, output_bytes_) ||
        !isolated_decode::within(c.input_offset, c.input_bytes, input_bytes_)) {
      throw UsageError("a chunk of an isolated decode lies outside its arenas");
    }
  }
  if (!ensure_process(sent.why)) {
    sent.failed_to_start = true;
    return sent;
  }
  // The process waits on the GPU for the inputs' copies, queued on `stream` so far (the event is
  // this batch's until it is received: at most kMostInFlight are in flight).
  const std::size_t event = (next_batch_ - 1) % kMostInFlight;
  ZD_CUDA_CHECK(cudaEventRecord(events_[event], stream));
  sent.batch.event = static_cast<std::uint32_t>(event);
  sent.process = starts_;
  sent.sent = process_->send(sent.batch, sent.why);
  if (!sent.sent) process_.reset();
  return sent;
}

bool IsolatedDecoder::answered(const Sent& sent) const {
  return !sent.sent || !process_ || sent.process != starts_ || process_->answer_waiting();
}

IsolatedDecoder::Outcome IsolatedDecoder::receive(const Sent& sent,
                                                  std::chrono::steady_clock::time_point deadline) {
  const auto& chunks = sent.batch.chunks;
  Outcome outcome{std::vector<bool>(chunks.size(), false), sent.why, sent.failed_to_start};
  if (!sent.sent) return outcome;
  if (!process_ || sent.process != starts_) {
    outcome.why = "the decoder process ended with an earlier batch";
    return outcome;
  }
  const auto waiting_from = std::chrono::steady_clock::now();
  const auto answer = process_->receive(sent.batch, deadline, outcome.why);
  outcome.waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting_from).count();
  if (!answer) {
    process_.reset();
    return outcome;
  }
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto& chunk = answer->chunks[i];
    outcome.decoded[i] = chunk.status == 0 && chunk.bytes == chunks[i].capacity;
    if (chunk.status == isolated_decode::kWrotePastOutput) {
      outcome.why = "a decode wrote past its output";
    }
    if (chunk.status == isolated_decode::kCheckFailed && outcome.why.empty()) {
      outcome.why = "a chunk's decoded bytes did not match its stored check";
    }
  }
  return outcome;
}

}  // namespace zarr_device::cuda
