// The engine's side of one decoder process: start it, hand it the arenas, send it batches and
// wait for each answer until a deadline. A process that faults, hangs past the deadline or
// answers anything but a well-formed answer to the batch it was sent is killed and reaped; the
// caller decodes that batch some other way and starts another process for the next one.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "isolated_decode/decode_messages.hpp"
#include "isolated_decode/message_channel.hpp"

namespace zarr_device::isolated_decode {

// The program to start and its arguments (after the program's name). It gets its end of the
// socket as descriptor 3 and "--fd 3" as its first arguments.
struct DecoderProgram {
  std::string path;
  std::vector<std::string> args;
};

class DecoderProcess {
 public:
  // Starts the program, sends it `setup` (with `fds` beside it: the host arenas) and waits for it
  // to say it is ready. None, with `why`, where it could not start or set up.
  static std::unique_ptr<DecoderProcess> start(const DecoderProgram& program,
                                               const DecoderSetup& setup, std::span<const int> fds,
                                               Deadline deadline, std::string& why);
  ~DecoderProcess();
  DecoderProcess(const DecoderProcess&) = delete;
  DecoderProcess& operator=(const DecoderProcess&) = delete;

  // Sends one batch and waits for its answer. None, with `why` (which says how the process ended),
  // where there is no trustworthy answer by the deadline; the process is then ended.
  std::optional<DecodedBatch> decode(const DecodeBatch& batch, Deadline deadline, std::string& why);

  // The same in two steps, with several batches in flight: send() each, then receive() their
  // answers in the order they were sent (`batch`: the oldest sent and not yet received). false or
  // none, with `why`, where the process failed; it is then ended, and every batch still in flight
  // is lost with it.
  bool send(const DecodeBatch& batch, std::string& why);
  std::optional<DecodedBatch> receive(const DecodeBatch& batch, Deadline deadline,
                                      std::string& why);
  // Whether the next answer (or the process's end) is there to receive without waiting.
  [[nodiscard]] bool answer_waiting() const { return channel_.readable(); }

  [[nodiscard]] bool running() const { return pid_ > 0; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  // What the process said it is when ready ("nvCOMP 6.0.0 on CUDA device 0").
  [[nodiscard]] const std::string& description() const { return description_; }

 private:
  DecoderProcess(pid_t pid, int fd) : pid_(pid), channel_(fd) {}
  // Kills (if still running) and reaps the process; appends how it ended to `why`. `ending`: it
  // closed its end, so it is given a moment to end by itself.
  void end(std::string& why, bool ending = false);

  pid_t pid_;
  MessageChannel channel_;
  std::string description_;
};

}  // namespace zarr_device::isolated_decode
