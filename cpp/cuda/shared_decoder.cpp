#include "shared_decoder.hpp"

#include <cuda_runtime_api.h>

#include <map>

#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {

SharedDecoder& SharedDecoder::of(int device) {
  static std::mutex mutex;
  static auto* const decoders = new std::map<int, std::unique_ptr<SharedDecoder>>();
  const std::lock_guard guard(mutex);
  auto& decoder = (*decoders)[device];
  if (!decoder) decoder.reset(new SharedDecoder(device));
  return *decoder;
}

std::string SharedDecoder::program() const {
  const std::lock_guard guard(lookup_mutex_);
  if (!looked_up_) {  // once, not on every read's plan
    program_ = decoder_program();
    looked_up_ = true;
  }
  return program_;
}

bool SharedDecoder::available() const { return !failed_to_start_ && !program().empty(); }

SharedDecoder::Lease SharedDecoder::lease() {
  Lease lease{std::unique_lock(mutex_), nullptr};
  if (failed_to_start_) return lease;
  const std::string program = this->program();
  if (program.empty()) return lease;
  const Settings now = settings();
  const DecoderArenas arenas =
      decoder_arenas_for(now.decoder_bytes, now.staging_bytes, device_memory());
  if (decoder_ && (requested_.input != arenas.input || requested_.output != arenas.output)) {
    starts_before_ += decoder_->starts();  // a changed setting: a process with the new arenas
    decoder_.reset();
  }
  if (!decoder_) {
    requested_ = arenas;
    const DecoderArenas least = decoder_arenas_for(kDecoderMinimum, 0, 0);
    for (const DecoderArenas& tried : {arenas, least}) {
      try {
        decoder_ = std::make_unique<IsolatedDecoder>(device_, tried.input, tried.output, program);
        break;
      } catch (const Error& e) {
        last_failure_ = e.what();
      }
      if (tried.input == least.input && tried.output == least.output) break;
    }
    if (!decoder_) {
      // No memory for its arenas: the chunks decode on the CPU, as where it is not installed.
      failed_to_start_ = true;
      ++failures_;
      return lease;
    }
  }
  lease.decoder = decoder_.get();
  return lease;
}

std::size_t SharedDecoder::device_memory() {
  // (Called with the lease's lock held.)
  if (device_memory_ == 0) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device_) == cudaSuccess) {
      device_memory_ = properties.totalGlobalMem;
    }
  }
  return device_memory_;
}

void SharedDecoder::record(const IsolatedDecoder::Outcome& outcome) {
  // (Called with the lease's lock held.)
  const std::size_t chunks = outcome.decoded.size();
  ++calls_;
  chunks_ += chunks;
  std::size_t decoded = 0;
  for (const bool d : outcome.decoded) decoded += d ? 1 : 0;
  not_decoded_ += chunks - decoded;
  if (!outcome.why.empty()) {
    ++failures_;
    last_failure_ = outcome.why;
  }
  if (outcome.failed_to_start) failed_to_start_ = true;
}

nlohmann::json SharedDecoder::info() const {
  const std::string program = this->program();
  const std::lock_guard guard(mutex_);
  return {{"available", !failed_to_start_ && !program.empty()},
          {"program", program.empty() ? nlohmann::json(nullptr) : nlohmann::json(program)},
          {"starts", starts_before_ + (decoder_ ? decoder_->starts() : 0)},
          {"calls", calls_},
          {"chunks", chunks_},
          {"not_decoded", not_decoded_},
          {"failures", failures_},
          {"last_failure", last_failure_}};
}

void SharedDecoder::release() {
  const std::lock_guard guard(mutex_);
  if (decoder_) starts_before_ += decoder_->starts();
  decoder_.reset();
  failed_to_start_ = false;
  const std::lock_guard lookup(lookup_mutex_);
  looked_up_ = false;
}

}  // namespace zarr_device::cuda
