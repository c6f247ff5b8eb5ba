#include "isolated_decode/decode_messages.hpp"

#include <cstring>

namespace zarr_device::isolated_decode {

namespace {

class Writer {
 public:
  void u32(std::uint32_t v) { put(v, 4); }
  void i32(std::int32_t v) { put(static_cast<std::uint32_t>(v), 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void bytes(std::span<const std::uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<std::uint8_t> take() { return std::move(out_); }

 private:
  void put(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  std::vector<std::uint8_t> out_;
};

// Reads fields off untrusted bytes; a read past the end fails the reader, not the process.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
  bool u32(std::uint32_t& v) {
    std::uint64_t w = 0;
    if (!get(w, 4)) return false;
    v = static_cast<std::uint32_t>(w);
    return true;
  }
  bool i32(std::int32_t& v) {
    std::uint32_t w = 0;
    if (!u32(w)) return false;
    v = static_cast<std::int32_t>(w);
    return true;
  }
  bool u64(std::uint64_t& v) { return get(v, 8); }
  bool bytes(std::vector<std::uint8_t>& v, std::size_t n) {
    if (in_.size() - at_ < n) return false;
    v.assign(in_.begin() + static_cast<std::ptrdiff_t>(at_),
             in_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
    at_ += n;
    return true;
  }
  [[nodiscard]] std::size_t left() const { return in_.size() - at_; }

 private:
  bool get(std::uint64_t& v, int n) {
    if (in_.size() - at_ < static_cast<std::size_t>(n)) return false;
    v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t{in_[at_ + i]} << (8 * i);
    at_ += static_cast<std::size_t>(n);
    return true;
  }
  std::span<const std::uint8_t> in_;
  std::size_t at_ = 0;
};

void put_arena(Writer& w, const Arena& a) {
  w.u32(static_cast<std::uint32_t>(a.kind));
  w.u64(a.bytes);
  w.u32(static_cast<std::uint32_t>(a.handle.size()));
  w.bytes(a.handle);
}

bool get_arena(Reader& r, Arena& a, std::string& why) {
  std::uint32_t kind = 0;
  std::uint32_t handle = 0;
  if (!r.u32(kind) || !r.u64(a.bytes) || !r.u32(handle)) {
    why = "setup message is truncated";
    return false;
  }
  if (kind == static_cast<std::uint32_t>(ArenaKind::kHostShared)) {
    a.kind = ArenaKind::kHostShared;
    if (handle != 0) {
      why = "a shared host arena carries no handle";
      return false;
    }
  } else if (kind == static_cast<std::uint32_t>(ArenaKind::kCudaIpc)) {
    a.kind = ArenaKind::kCudaIpc;
    if (handle != kIpcHandleBytes) {
      why = "a CUDA IPC handle is " + std::to_string(kIpcHandleBytes) + " bytes, not " +
            std::to_string(handle);
      return false;
    }
  } else {
    why = "unknown arena kind " + std::to_string(kind);
    return false;
  }
  if (!r.bytes(a.handle, handle)) {
    why = "setup message is truncated";
    return false;
  }
  return true;
}

}  // namespace

bool within(std::uint64_t offset, std::uint64_t bytes, std::uint64_t limit) {
  return offset <= limit && bytes <= limit - offset;
}

std::vector<std::uint8_t> encode_header(MessageType type, std::size_t payload_bytes) {
  Writer w;
  w.u32(kMagic);
  w.u32(kVersion);
  w.u32(static_cast<std::uint32_t>(type));
  w.u64(payload_bytes);
  return w.take();
}

std::optional<Header> decode_header(std::span<const std::uint8_t> bytes, std::string& why) {
  Reader r(bytes);
  std::uint32_t magic = 0;
  std::uint32_t version = 0;
  std::uint32_t type = 0;
  std::uint64_t length = 0;
  if (!r.u32(magic) || !r.u32(version) || !r.u32(type) || !r.u64(length)) {
    why = "message header is truncated";
    return std::nullopt;
  }
  if (magic != kMagic) {
    why = "not a decoder message (bad magic)";
    return std::nullopt;
  }
  if (version != kVersion) {
    why = "decoder protocol version " + std::to_string(version) + ", expected " +
          std::to_string(kVersion) +
          " (the decoder program and the engine come from different builds)";
    return std::nullopt;
  }
  if (type < 1 || type > 4) {
    why = "unknown message type " + std::to_string(type);
    return std::nullopt;
  }
  if (length > kMostPayload) {
    why = "message claims " + std::to_string(length) + " bytes, more than any message has";
    return std::nullopt;
  }
  return Header{static_cast<MessageType>(type), static_cast<std::size_t>(length)};
}

std::vector<std::uint8_t> encode(const DecoderSetup& setup) {
  Writer w;
  w.i32(setup.device);
  put_arena(w, setup.input);
  put_arena(w, setup.output);
  w.u32(static_cast<std::uint32_t>(setup.events.size()));
  for (const auto& event : setup.events) w.bytes(event);
  return w.take();
}

std::vector<std::uint8_t> encode(const DecodeBatch& batch) {
  Writer w;
  w.u64(batch.id);
  w.u32(batch.codec);
  w.u32(batch.event);
  w.u32(static_cast<std::uint32_t>(batch.check));
  w.u64(batch.chunks.size());
  for (const ChunkJob& c : batch.chunks) {
    w.u64(c.input_offset);
    w.u64(c.input_bytes);
    w.u64(c.output_offset);
    w.u64(c.capacity);
    w.u32(c.expected);
  }
  return w.take();
}

std::vector<std::uint8_t> encode(const DecodedBatch& decoded) {
  Writer w;
  w.u64(decoded.id);
  w.u64(decoded.chunks.size());
  for (const ChunkOutcome& c : decoded.chunks) {
    w.i32(c.status);
    w.u64(c.bytes);
  }
  return w.take();
}

std::optional<DecoderSetup> decode_setup(std::span<const std::uint8_t> payload, std::string& why) {
  Reader r(payload);
  DecoderSetup s;
  if (!r.i32(s.device)) {
    why = "setup message is truncated";
    return std::nullopt;
  }
  if (!get_arena(r, s.input, why) || !get_arena(r, s.output, why)) return std::nullopt;
  std::uint32_t events = 0;
  if (!r.u32(events)) {
    why = "setup message is truncated";
    return std::nullopt;
  }
  if (events > kMostEvents) {
    why = "setup message claims " + std::to_string(events) + " events, more than " +
          std::to_string(kMostEvents);
    return std::nullopt;
  }
  s.events.resize(events);
  for (auto& event : s.events) {
    if (!r.bytes(event, kIpcHandleBytes)) {
      why = "setup message is truncated";
      return std::nullopt;
    }
  }
  if (r.left() != 0) {
    why = "setup message has trailing bytes";
    return std::nullopt;
  }
  return s;
}

std::optional<DecodeBatch> decode_batch(std::span<const std::uint8_t> payload,
                                        std::uint64_t input_bytes, std::uint64_t output_bytes,
                                        std::string& why) {
  Reader r(payload);
  DecodeBatch b;
  std::uint64_t count = 0;
  std::uint32_t check = 0;
  if (!r.u64(b.id) || !r.u32(b.codec) || !r.u32(b.event) || !r.u32(check) || !r.u64(count)) {
    why = "decode message is truncated";
    return std::nullopt;
  }
  if (check > static_cast<std::uint32_t>(DecodedCheck::kAdler32)) {
    why = "decode message asks for an unknown check " + std::to_string(check);
    return std::nullopt;
  }
  b.check = static_cast<DecodedCheck>(check);
  if (count > kMostChunks || count * 36 != r.left()) {
    why = "decode message claims " + std::to_string(count) + " chunks in " +
          std::to_string(r.left()) + " bytes";
    return std::nullopt;
  }
  b.chunks.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    ChunkJob& c = b.chunks[i];
    r.u64(c.input_offset);
    r.u64(c.input_bytes);
    r.u64(c.output_offset);
    r.u64(c.capacity);
    r.u32(c.expected);
    if (!within(c.input_offset, c.input_bytes, input_bytes) || c.capacity > output_bytes ||
        !within(c.output_offset, c.capacity + kGuardBytes, output_bytes)) {
      why = "chunk " + std::to_string(i) + " of batch " + std::to_string(b.id) +
            " lies outside the shared arenas";
      return std::nullopt;
    }
  }
  return b;
}

std::optional<DecodedBatch> decode_decoded(std::span<const std::uint8_t> payload,
                                           const DecodeBatch& expected, std::string& why) {
  Reader r(payload);
  DecodedBatch d;
  std::uint64_t count = 0;
  if (!r.u64(d.id) || !r.u64(count)) {
    why = "decoder's answer is truncated";
    return std::nullopt;
  }
  if (d.id != expected.id || count != expected.chunks.size() || count * 12 != r.left()) {
    why = "decoder answered batch " + std::to_string(d.id) + " with " + std::to_string(count) +
          " chunks; asked batch " + std::to_string(expected.id) + " with " +
          std::to_string(expected.chunks.size());
    return std::nullopt;
  }
  d.chunks.resize(count);
  for (ChunkOutcome& c : d.chunks) {
    r.i32(c.status);
    r.u64(c.bytes);
  }
  return d;
}

}  // namespace zarr_device::isolated_decode
