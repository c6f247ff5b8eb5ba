// The decoder process of each device (isolated_decoder.hpp), shared by every read of this process
// onto it, one batch at a time: made on first use, kept until release_cuda_memory, and known
// unavailable once it failed to start (its chunks are then planned for the CPU). Internal to
// cpp/cuda.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "isolated_decoder.hpp"
#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {

class SharedDecoder {
 public:
  // The memory the engine lends each device's decoder process (the stored bytes of the calls in
  // flight, and what they decode to, with a guard band after each chunk) is the decoder_bytes
  // setting's (zarr_device/settings.hpp, decoder_arenas_for), looked up as each lease is taken: a
  // changed setting ends the process, and the next one has arenas of the new sizes. Where the
  // device cannot spare that much, the least (kDecoderMinimum) is tried before the chunks are left
  // to the CPU.

  // The one of `device`. Never destroyed: its process ends with the caller's, whose end closes
  // the socket the process reads from.
  static SharedDecoder& of(int device);

  // Whether reads may plan chunks for it: its program is installed and it has not failed to start.
  [[nodiscard]] bool available() const;

  // The decoder for one caller at a time, while the lease lives (a read holds it while its calls
  // are in flight); null where it is unavailable.
  struct Lease {
    std::unique_lock<std::mutex> lock;
    IsolatedDecoder* decoder = nullptr;
  };
  Lease lease();

  // What a lease's holder got from one call of the decoder (its chunks, those it did not decode,
  // how it failed); a failed start makes the decoder unavailable.
  void record(const IsolatedDecoder::Outcome& outcome);

  // {"available", "program", "starts", "calls", "chunks", "not_decoded", "failures",
  //  "last_failure"}.
  [[nodiscard]] nlohmann::json info() const;

  // Ends the process and frees the arenas (the next use starts another), and forgets a failed
  // start.
  void release();

 private:
  explicit SharedDecoder(int device) : device_(device) {}
  // The device's memory, looked up once.
  std::size_t device_memory();
  // decoder_program(), looked up on first use.
  std::string program() const;

  int device_;
  // The program, apart from the decoder: reads plan against available() while another read holds
  // the lease.
  mutable std::mutex lookup_mutex_;
  mutable std::string program_;
  mutable bool looked_up_ = false;
  std::atomic<bool> failed_to_start_{false};
  mutable std::mutex mutex_;  // the decoder and every field below
  std::unique_ptr<IsolatedDecoder> decoder_;
  std::size_t starts_before_ = 0;  // of decoders released
  std::size_t device_memory_ = 0;
  DecoderArenas requested_;  // the arenas the decoder was made for (it may have the least)
  std::size_t calls_ = 0;
  std::size_t chunks_ = 0;
  std::size_t not_decoded_ = 0;
  std::size_t failures_ = 0;
  std::string last_failure_;
};

}  // namespace zarr_device::cuda
