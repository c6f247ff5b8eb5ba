#include "isolated_decode/decoder_service.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "isolated_decode/message_channel.hpp"

namespace zarr_device::isolated_decode {

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "zarr-device decoder: %s\n", why.c_str());
  return 1;
}

// The engine may leave a process idle for as long as it likes.
Deadline forever() { return std::chrono::steady_clock::now() + std::chrono::hours(24 * 365); }

}  // namespace

int serve(int fd, DecodeBackend& backend) {
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

  for (;;) {
    switch (channel.receive(message, nullptr, forever(), why)) {
      case MessageChannel::Received::kClosed:
        return 0;  // the engine is done with this process
      case MessageChannel::Received::kMessage:
        break;
      default:
        return fail(why);
    }
    if (message.type != MessageType::kDecode) return fail("expected a batch to decode");
    const std::optional<DecodeBatch> batch =
        decode_batch(message.payload, setup->input.bytes, setup->output.bytes, why);
    if (!batch) return fail(why);
    DecodedBatch decoded{batch->id, {}};
    try {
      decoded.chunks = backend.decode(*batch);
    } catch (const std::exception& e) {
      return fail(std::string("decoding failed: ") + e.what());
    }
    if (decoded.chunks.size() != batch->chunks.size()) return fail("backend lost chunks");
    if (!channel.send(MessageType::kDecoded, encode(decoded), {}, why)) return fail(why);
  }
}

}  // namespace zarr_device::isolated_decode
