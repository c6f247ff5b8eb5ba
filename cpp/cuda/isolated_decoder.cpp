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

constexpr unsigned char kGuardByte = 0xA5;
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
}

IsolatedDecoder::~IsolatedDecoder() {
  process_.reset();  // the process lets go of the arenas before they are freed
  cudaSetDevice(device_);
  cudaFree(guard_flags_);
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
  const isolated_decode::DecoderSetup setup{device_, exported(input_, input_bytes_),
                                            exported(output_, output_bytes_)};
  ++starts_;
  // Starting loads nvCOMP and makes a CUDA context: seconds on a cold machine.
  process_ = isolated_decode::DecoderProcess::start(
      {program_, {}}, setup, {}, std::chrono::steady_clock::now() + std::chrono::seconds(60), why);
  return process_ != nullptr;
}

IsolatedDecoder::Outcome IsolatedDecoder::decode(DeviceDecoding::Kind codec,
                                                 std::span<const isolated_decode::ChunkJob> chunks,
                                                 cudaStream_t stream,
                                                 std::chrono::steady_clock::time_point deadline) {
  Outcome outcome{std::vector<bool>(chunks.size(), false), {}};
  if (chunks.empty()) return outcome;
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  // The band after each output, filled with a pattern the decoder's writes would change.
  std::vector<const void*> bands(chunks.size());
  std::vector<std::size_t> band_sizes(chunks.size(), kGuardBytes);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const auto& c = chunks[i];
    if (!isolated_decode::within(c.output_offset, c.capacity + kGuardBytes, output_bytes_) ||
        !isolated_decode::within(c.input_offset, c.input_bytes, input_bytes_)) {
      throw UsageError("a chunk of an isolated decode lies outside its arenas");
    }
    std::byte* band = output_ + c.output_offset + c.capacity;
    bands[i] = band;
    ZD_CUDA_CHECK(cudaMemsetAsync(band, kGuardByte, kGuardBytes, stream));
  }
  // The inputs' copies and the bands are in place before the process reads or writes.
  ZD_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (!ensure_process(outcome.why)) {
    outcome.failed_to_start = true;
    return outcome;
  }

  isolated_decode::DecodeBatch batch{next_batch_++,
                                     static_cast<isolated_decode::CodecKind>(codec),
                                     {chunks.begin(), chunks.end()}};
  const auto answer = process_->decode(batch, deadline, outcome.why);
  if (!answer) {
    process_.reset();
    return outcome;
  }

  // The bands, checked on the device: one flag per chunk.
  const std::size_t n = chunks.size();
  const std::size_t need = n * (2 * sizeof(void*) + sizeof(int));
  if (need > guard_flag_capacity_) {
    cudaFree(guard_flags_);
    guard_flags_ = nullptr;
    guard_flag_capacity_ = 0;
    ZD_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&guard_flags_), need));
    guard_flag_capacity_ = need;
  }
  auto* device_bands = reinterpret_cast<const void**>(guard_flags_);
  auto* device_sizes = reinterpret_cast<std::size_t*>(guard_flags_ + n * sizeof(void*));
  auto* flags = reinterpret_cast<int*>(guard_flags_ + 2 * n * sizeof(void*));
  ZD_CUDA_CHECK(cudaMemcpyAsync(device_bands, bands.data(), n * sizeof(void*),
                                cudaMemcpyHostToDevice, stream));
  ZD_CUDA_CHECK(cudaMemcpyAsync(device_sizes, band_sizes.data(), n * sizeof(std::size_t),
                                cudaMemcpyHostToDevice, stream));
  ZD_CUDA_CHECK(cudaMemsetAsync(flags, 0, n * sizeof(int), stream));
  const std::byte pattern{kGuardByte};
  launch_mark_non_fill(device_bands, device_sizes, n, &pattern, 1, flags, stream);
  std::vector<int> damaged(n);
  ZD_CUDA_CHECK(
      cudaMemcpyAsync(damaged.data(), flags, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  ZD_CUDA_CHECK(cudaStreamSynchronize(stream));
  bool any_damage = false;
  for (std::size_t i = 0; i < n; ++i) any_damage = any_damage || damaged[i] != 0;
  for (std::size_t i = 0; i < n; ++i) {
    // A damaged band may have come from any chunk's overrun: none of the batch is trusted then.
    outcome.decoded[i] = !any_damage && answer->chunks[i].status == 0 &&
                         answer->chunks[i].bytes == chunks[i].capacity;
  }
  if (any_damage) outcome.why = "a decode wrote past its output";
  return outcome;
}

}  // namespace zarr_device::cuda
