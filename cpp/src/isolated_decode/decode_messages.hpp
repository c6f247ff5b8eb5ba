// What the engine and a decoder process say to each other. A decoder process runs nvCOMP on chunks
// nobody has vouched for (no checksum), in a CUDA context of its own, so that a malformed frame
// can fault or hang only that process (docs/architecture.md, "Decoding unchecked chunks").
//
// The wire form is little-endian fixed-width fields behind a header with a magic, a version and
// the payload's length. Both sides parse what they receive as untrusted: counts are bounded, and
// every range must lie inside the arena it names, so neither a confused engine nor a damaged
// decoder can make the other read or write outside the memory they share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zarr_device::isolated_decode {

inline constexpr std::uint32_t kMagic = 0x5A445743;  // "ZDWC"
inline constexpr std::uint32_t kVersion = 4;
// Bounds on what a message may claim, so that a parser never allocates from an untrusted count.
inline constexpr std::size_t kMostChunks = std::size_t{1} << 20;
inline constexpr std::size_t kMostPayload = 64 + 36 * kMostChunks;

enum class MessageType : std::uint32_t {
  kSetup = 1,    // engine -> decoder: the arenas and the device; answered by kReady
  kReady = 2,    // decoder -> engine
  kDecode = 3,   // engine -> decoder: one batch; answered by kDecoded
  kDecoded = 4,  // decoder -> engine
};

// How the engine's memory reaches the decoder. Host arenas (shared memory) are handed over as
// file descriptors beside the message; device arenas as CUDA IPC handles inside it.
enum class ArenaKind : std::uint32_t { kHostShared = 1, kCudaIpc = 2 };

inline constexpr std::size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

struct Arena {
  ArenaKind kind = ArenaKind::kHostShared;
  std::uint64_t bytes = 0;
  std::vector<std::uint8_t> handle;  // kCudaIpc: the IPC handle; kHostShared: empty
};

// CUDA IPC event handles the engine lends the decoder (at most this many): a batch names the one
// the engine recorded after copying its stored bytes, and the decoder's stream waits for it on the
// GPU instead of the engine's thread waiting for the copies.
inline constexpr std::size_t kMostEvents = 64;

struct DecoderSetup {
  std::int32_t device = 0;                        // CUDA device ordinal (host arenas: unused)
  Arena input;                                    // the stored bytes of a batch
  Arena output;                                   // where the decoder writes decoded chunks
  std::vector<std::vector<std::uint8_t>> events;  // IPC event handles, kIpcHandleBytes each
};

// The codec's kind, as zarr_device/codec.hpp's DeviceDecoding::Kind numbers it.
using CodecKind = std::uint32_t;

struct ChunkJob {
  std::uint64_t input_offset = 0;
  std::uint64_t input_bytes = 0;
  std::uint64_t output_offset = 0;
  std::uint64_t capacity = 0;  // the bytes the chunk decodes to, as the array's metadata says
  std::uint32_t expected = 0;  // the value of the batch's check (DecodeBatch::check)
};

inline constexpr std::uint32_t kNoEvent = UINT32_MAX;

// A check of the decoded bytes that the decoder verifies after the decode, since nvCOMP does not
// (gzip's CRC-32, zlib's Adler-32), against the value each chunk's job carries from the stored
// trailer.
enum class DecodedCheck : std::uint32_t { kNone = 0, kCrc32 = 1, kAdler32 = 2 };

struct DecodeBatch {
  std::uint64_t id = 0;
  CodecKind codec = 0;
  std::vector<ChunkJob> chunks;
  // The setup's event to wait for before reading the inputs; kNoEvent: they are there already.
  std::uint32_t event = kNoEvent;
  DecodedCheck check = DecodedCheck::kNone;
};

// Bytes of guard band after each chunk's output in the output arena: the decoder fills it before
// the decode and checks it after, so that a decode that wrote past its output is known.
inline constexpr std::size_t kGuardBytes = 4096;
// The status of every chunk of a batch in which some decode wrote into a guard band: the overrun
// may have come from any of them, so none of the batch is trusted.
inline constexpr std::int32_t kWrotePastOutput = -0x40000000;
// The status of a chunk that decoded to bytes whose check (DecodeBatch::check) is not the one its
// job carries.
inline constexpr std::int32_t kCheckFailed = -0x40000001;

// Per chunk: 0 where the decoder says it decoded, else its status; and the size it reports.
struct ChunkOutcome {
  std::int32_t status = 0;
  std::uint64_t bytes = 0;
};

struct DecodedBatch {
  std::uint64_t id = 0;
  std::vector<ChunkOutcome> chunks;
};

// One framed message: its type and payload.
struct Message {
  MessageType type = MessageType::kSetup;
  std::vector<std::uint8_t> payload;
};

// Header bytes before each payload: magic, version, type, payload length.
inline constexpr std::size_t kHeaderBytes = 20;
std::vector<std::uint8_t> encode_header(MessageType type, std::size_t payload_bytes);
// The type and payload length of a header; a message naming why where it is not one.
struct Header {
  MessageType type;
  std::size_t payload_bytes;
};
std::optional<Header> decode_header(std::span<const std::uint8_t> bytes, std::string& why);

std::vector<std::uint8_t> encode(const DecoderSetup& setup);
std::vector<std::uint8_t> encode(const DecodeBatch& batch);
std::vector<std::uint8_t> encode(const DecodedBatch& decoded);

// Parsers: none, with `why` set, for anything malformed.
std::optional<DecoderSetup> decode_setup(std::span<const std::uint8_t> payload, std::string& why);
// Also checks every chunk's ranges against the arenas' sizes.
std::optional<DecodeBatch> decode_batch(std::span<const std::uint8_t> payload,
                                        std::uint64_t input_bytes, std::uint64_t output_bytes,
                                        std::string& why);
// Also checks it answers `expected`: the same id and one outcome per chunk.
std::optional<DecodedBatch> decode_decoded(std::span<const std::uint8_t> payload,
                                           const DecodeBatch& expected, std::string& why);

// Whether [offset, offset + bytes) lies in [0, limit), without overflow.
bool within(std::uint64_t offset, std::uint64_t bytes, std::uint64_t limit);

}  // namespace zarr_device::isolated_decode
