// The decoder process's side: set up from the engine's arenas, then decode batch after batch until
// the engine closes its end. The decoding itself is a backend: nvCOMP in the decoder program
// (cpp/decoder), a plain copy in the tests' stand-in (cpp/tests/decoder).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "isolated_decode/decode_messages.hpp"

namespace zarr_device::isolated_decode {

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  // Maps the arenas (`fds`: the host arenas' descriptors, in the order of the setup) and says
  // what it is, for the engine's messages. Throws where it cannot.
  virtual std::string set_up(const DecoderSetup& setup, std::span<const int> fds) = 0;
  // Decodes a batch whose ranges were checked to lie in the arenas; one outcome per chunk.
  virtual std::vector<ChunkOutcome> decode(const DecodeBatch& batch) = 0;
};

// Serves the engine on `fd` until it closes its end. Returns the process's exit status: 0 when
// the engine closed its end, 1 on anything else (the reason is printed to standard error).
int serve(int fd, DecodeBackend& backend);

}  // namespace zarr_device::isolated_decode
