#include "isolated_decode/decoder_service.hpp"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "isolated_decode/message_channel.hpp"

namespace zarr_device::isolated_decode {

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "zarr-device decoder: %s\n", why.c_str());
  return 1;
}

// The engine may leave a process idle for as long as it likes.
Deadline forever() { return std::chrono::steady_clock::now() + std::chrono::hours(24 * 365); }

// A process whose engine died while its GPU hangs in a kernel never reads the closed socket
// again; it would hold the GPU (and spin on it) for good. A thread of its own ends it once its
// parent is gone, whatever the rest of it is stuck in.
void end_with_the_engine() {
  const pid_t engine = ::getppid();
  std::thread([engine] {
    while (::getppid() == engine) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::_Exit(3);
  }).detach();
}

// The batches launched and not yet answered, shared by the thread that launches them (the
// service's) and the one that answers them (the answerer's).
class InFlight {
 public:
  explicit InFlight(std::size_t depth) : depth_(depth) {}

  // Waits for room, then adds a launched batch.
  void wait_for_room() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return ids_.size() + launching_ < depth_; });
    ++launching_;
  }
  void launched(const DecodeBatch& batch) {
    const std::scoped_lock lock(mutex_);
    --launching_;
    ids_.push_back({batch.id, batch.chunks.size()});
    changed_.notify_all();
  }
  // The oldest batch in flight, once there is one; none once the service ends and none is left.
  std::optional<std::pair<std::uint64_t, std::size_t>> next() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !ids_.empty() || ending_; });
    if (ids_.empty()) return std::nullopt;
    return ids_.front();
  }
  void answered() {
    const std::scoped_lock lock(mutex_);
    ids_.pop_front();
    changed_.notify_all();
  }
  void end() {
    const std::scoped_lock lock(mutex_);
    ending_ = true;
    changed_.notify_all();
  }

 private:
  std::size_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<std::uint64_t, std::size_t>> ids_;
  std::size_t launching_ = 0;
  bool ending_ = false;
};

// Collects and answers the batches in flight, in order, until the service ends. A failure here
// ends the process: the engine learns of it from the socket closing.
void answer_batches(MessageChannel& channel, DecodeBackend& backend, InFlight& in_flight) {
  std::string why;
  while (const auto batch = in_flight.next()) {
    DecodedBatch decoded{batch->first, {}};
    try {
      decoded.chunks = backend.collect();
    } catch (const std::exception& e) {
      fail(std::string("decoding failed: ") + e.what());
      std::_Exit(1);
    }
    if (decoded.chunks.size() != batch->second) {
      fail("backend lost chunks");
      std::_Exit(1);
    }
    if (!channel.send(MessageType::kDecoded, encode(decoded), {}, why)) {
      fail(why);
      std::_Exit(1);
    }
    in_flight.answered();
  }
}

}  // namespace

void ImmediateBackend::launch(const DecodeBatch& batch) {
  auto outcomes = decode(batch);
  const std::scoped_lock lock(mutex_);
  decoded_.push_back(std::move(outcomes));
}

std::vector<ChunkOutcome> ImmediateBackend::collect() {
  const std::scoped_lock lock(mutex_);
  auto outcomes = std::move(decoded_.front());
  decoded_.pop_front();
  return outcomes;
}

int serve(int fd, DecodeBackend& backend) {
  end_with_the_engine();
  MessageChannel channel(fd);
  std::string why;
  Message message;
  std::vector<int> fds;
  if (channel.receive(message, &fds, forever(), why) != MessageChannel::Received::kMessage) {
    return fail(why);
  }
  const std::optional<DecoderSetup> setup =
      message.type == MessageType::kSetup ? decode_setup(message.payload, why) : std::nullopt;
  if (!setup) {
    for (int f : fds) ::close(f);
    return fail(why.empty() ? "the first message was not a setup" : why);
  }
  std::string description;
  try {
    description = backend.set_up(*setup, fds);
  } catch (const std::exception& e) {
    for (int f : fds) ::close(f);
    return fail(std::string("could not set up: ") + e.what());
  }
  for (int f : fds) ::close(f);  // the backend mapped what it needed
  const std::vector<std::uint8_t> ready(description.begin(), description.end());
  if (!channel.send(MessageType::kReady, ready, {}, why)) return fail(why);

  InFlight in_flight(std::max<std::size_t>(backend.depth(), 1));
  std::thread answerer(answer_batches, std::ref(channel), std::ref(backend), std::ref(in_flight));
  // Whatever ends the service, the batches launched are answered first (the engine may still
  // read them), and the answerer ends before the channel and the backend do.
  auto end = [&](int status) {
    in_flight.end();
    answerer.join();
    return status;
  };
  for (;;) {
    switch (channel.receive(message, nullptr, forever(), why)) {
      case MessageChannel::Received::kClosed:
        return end(0);  // the engine is done with this process
      case MessageChannel::Received::kMessage:
        break;
      default:
        return end(fail(why));
    }
    if (message.type != MessageType::kDecode) return end(fail("expected a batch to decode"));
    const std::optional<DecodeBatch> batch =
        decode_batch(message.payload, setup->input.bytes, setup->output.bytes, why);
    if (!batch) return end(fail(why));
    if (batch->event != kNoEvent && batch->event >= setup->events.size()) {
      return end(fail("a batch names an event the setup did not lend"));
    }
    in_flight.wait_for_room();
    try {
      backend.launch(*batch);
    } catch (const std::exception& e) {
      return end(fail(std::string("decoding failed: ") + e.what()));
    }
    in_flight.launched(*batch);
  }
}

}  // namespace zarr_device::isolated_decode
