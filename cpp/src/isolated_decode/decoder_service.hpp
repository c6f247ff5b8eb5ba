// The decoder process's side: set up from the engine's arenas, then decode batch after batch until
// the engine closes its end. The decoding itself is a backend: nvCOMP in the decoder program
// (cpp/decoder), a plain copy in the tests' stand-in (cpp/tests/decoder).
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "isolated_decode/decode_messages.hpp"

namespace zarr_device::isolated_decode {

// The engine keeps several batches in flight, so that the GPU decodes one while the engine
// stages the next and places the one before: the service starts each batch as it arrives (up to
// depth() at once) and answers them in order as they end. launch() and collect() run on two
// threads; the service orders them, so that batch k's launch happens before its collect, and the
// launch of batch k + depth() after the collect of batch k.
class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  // Maps the arenas (`fds`: the host arenas' descriptors, in the order of the setup) and says
  // what it is, for the engine's messages. Throws where it cannot.
  virtual std::string set_up(const DecoderSetup& setup, std::span<const int> fds) = 0;
  // Batches it decodes at once, at least 1.
  [[nodiscard]] virtual std::size_t depth() const = 0;
  // Starts decoding a batch whose ranges were checked to lie in the arenas.
  virtual void launch(const DecodeBatch& batch) = 0;
  // The outcomes of the oldest batch launched and not yet collected, once it has ended: one per
  // chunk.
  virtual std::vector<ChunkOutcome> collect() = 0;
};

// A backend that decodes each batch as it is launched, one at a time.
class ImmediateBackend : public DecodeBackend {
 public:
  [[nodiscard]] std::size_t depth() const override { return 1; }
  void launch(const DecodeBatch& batch) override;
  std::vector<ChunkOutcome> collect() override;
  // Decodes a batch; one outcome per chunk.
  virtual std::vector<ChunkOutcome> decode(const DecodeBatch& batch) = 0;

 private:
  std::mutex mutex_;
  std::deque<std::vector<ChunkOutcome>> decoded_;
};

// Serves the engine on `fd` until it closes its end. Returns the process's exit status: 0 when
// the engine closed its end, 1 on anything else (the reason is printed to standard error).
int serve(int fd, DecodeBackend& backend);

}  // namespace zarr_device::isolated_decode
