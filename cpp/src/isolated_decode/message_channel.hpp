// One end of the socket between the engine and a decoder process: framed messages
// (decode_messages.hpp), file descriptors beside them, and a deadline on every wait, so that a
// decoder that stops answering is noticed instead of waited on.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "isolated_decode/decode_messages.hpp"

namespace zarr_device::isolated_decode {

using Deadline = std::chrono::steady_clock::time_point;

class MessageChannel {
 public:
  // Takes ownership of `fd`, a connected stream socket.
  explicit MessageChannel(int fd) : fd_(fd) {}
  ~MessageChannel();
  MessageChannel(const MessageChannel&) = delete;
  MessageChannel& operator=(const MessageChannel&) = delete;

  // Sends one message, with `fds` beside it. False, with `why`, where the other end is gone.
  bool send(MessageType type, std::span<const std::uint8_t> payload, std::span<const int> fds,
            std::string& why);

  enum class Received { kMessage, kClosed, kTimedOut, kMalformed };
  // Waits for one whole message until `deadline`. File descriptors sent beside it land in `fds`
  // (the caller owns them); without `fds` any are closed.
  Received receive(Message& message, std::vector<int>* fds, Deadline deadline, std::string& why);

  // Whether a message (or the other end's closing) is there to receive without waiting.
  [[nodiscard]] bool readable() const;

  [[nodiscard]] int fd() const { return fd_; }

 private:
  // Reads exactly `n` bytes by the deadline; collects descriptors on the way.
  Received read_exactly(std::uint8_t* into, std::size_t n, std::vector<int>* fds, Deadline deadline,
                        std::string& why);
  int fd_;
};

}  // namespace zarr_device::isolated_decode
