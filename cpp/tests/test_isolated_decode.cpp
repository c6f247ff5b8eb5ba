// The protocol between the engine and a decoder process, and the engine's handling of a process
// that faults, hangs, exits or answers wrongly, against the stand-in decoder (cpp/tests/decoder).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>

#include "isolated_decode/decode_messages.hpp"
#include "isolated_decode/decoder_process.hpp"

namespace zarr_device::isolated_decode {
namespace {

using Clock = std::chrono::steady_clock;

Deadline in(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// An output arena of 128 bytes of outputs and room for the last one's guard band.
constexpr std::uint64_t kOut = 128 + kGuardBytes;

DecodeBatch sample_batch() { return {7, 2, {{0, 10, 0, 16}, {16, 5, 64, 5}, {100, 0, 80, 0}}}; }

TEST(DecodeMessages, BatchRoundTrips) {
  const DecodeBatch b = sample_batch();
  std::string why;
  const auto back = decode_batch(encode(b), 128, kOut, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->id, 7U);
  EXPECT_EQ(back->codec, 2U);
  ASSERT_EQ(back->chunks.size(), 3U);
  EXPECT_EQ(back->chunks[1].input_offset, 16U);
  EXPECT_EQ(back->chunks[1].capacity, 5U);
  EXPECT_EQ(back->event, kNoEvent);
  DecodeBatch waits = b;
  waits.event = 3;
  const auto again = decode_batch(encode(waits), 128, kOut, why);
  ASSERT_TRUE(again) << why;
  EXPECT_EQ(again->event, 3U);
  EXPECT_EQ(again->check, DecodedCheck::kNone);
  DecodeBatch checked = b;  // gzip's CRC-32 of each chunk, verified by the decoder
  checked.check = DecodedCheck::kCrc32;
  checked.chunks[1].expected = 0xCBF43926;
  const auto verified = decode_batch(encode(checked), 128, kOut, why);
  ASSERT_TRUE(verified) << why;
  EXPECT_EQ(verified->check, DecodedCheck::kCrc32);
  EXPECT_EQ(verified->chunks[1].expected, 0xCBF43926U);
  EXPECT_EQ(verified->chunks[0].expected, 0U);
}

TEST(DecodeMessages, RangesOutsideTheArenasAreRefused) {
  std::string why;
  EXPECT_FALSE(decode_batch(encode(sample_batch()), 20, kOut, why));  // chunk 1 reads 16..21
  DecodeBatch b = sample_batch();
  b.chunks[0].input_offset = UINT64_MAX - 4;  // would wrap around
  why.clear();
  EXPECT_FALSE(decode_batch(encode(b), 128, kOut, why));
  EXPECT_NE(why.find("outside the shared arenas"), std::string::npos) << why;
  b = sample_batch();
  b.chunks[2].output_offset = 129;  // its guard band would end past the arena
  EXPECT_FALSE(decode_batch(encode(b), 128, kOut, why));
  b = sample_batch();
  b.chunks[1].capacity = UINT64_MAX - 8;  // with its band, would wrap around
  EXPECT_FALSE(decode_batch(encode(b), 128, kOut, why));
}

TEST(DecodeMessages, CountsThatLieAreRefused) {
  std::vector<std::uint8_t> bytes = encode(sample_batch());
  bytes[20] = 4;  // four chunks claimed, three sent (after the id, codec, event and check)
  std::string why;
  EXPECT_FALSE(decode_batch(bytes, 128, kOut, why));
  bytes = encode(sample_batch());
  bytes.push_back(0);
  EXPECT_FALSE(decode_batch(bytes, 128, kOut, why));
  bytes = encode(sample_batch());
  std::memset(bytes.data() + 20, 0xFF, 8);  // 2^64 - 1 chunks
  EXPECT_FALSE(decode_batch(bytes, 128, kOut, why));
  bytes = encode(sample_batch());
  bytes[16] = 3;  // a check there is none of
  EXPECT_FALSE(decode_batch(bytes, 128, kOut, why));
  EXPECT_NE(why.find("unknown check 3"), std::string::npos) << why;
}

TEST(DecodeMessages, AnswersMustMatchTheirBatch) {
  const DecodeBatch b = sample_batch();
  std::string why;
  DecodedBatch d{7, {{0, 10}, {0, 5}, {12, 0}}};
  ASSERT_TRUE(decode_decoded(encode(d), b, why)) << why;
  d.id = 8;
  EXPECT_FALSE(decode_decoded(encode(d), b, why));
  d.id = 7;
  d.chunks.pop_back();
  EXPECT_FALSE(decode_decoded(encode(d), b, why));
  EXPECT_NE(why.find("asked batch 7"), std::string::npos) << why;
}

TEST(DecodeMessages, HeadersAreChecked) {
  std::string why;
  auto header = encode_header(MessageType::kDecode, 10);
  auto h = decode_header(header, why);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->type, MessageType::kDecode);
  EXPECT_EQ(h->payload_bytes, 10U);
  header[0] ^= 1;
  EXPECT_FALSE(decode_header(header, why));
  EXPECT_NE(why.find("magic"), std::string::npos);
  header = encode_header(MessageType::kDecode, kMostPayload + 1);
  EXPECT_FALSE(decode_header(header, why));
  header = encode_header(static_cast<MessageType>(9), 1);
  EXPECT_FALSE(decode_header(header, why));
  header = encode_header(MessageType::kDecode, 1);
  header[4] = static_cast<std::uint8_t>(kVersion + 1);  // another protocol version
  EXPECT_FALSE(decode_header(header, why));
  EXPECT_NE(why.find("different builds"), std::string::npos) << why;
}

TEST(DecodeMessages, SetupRoundTripsAndChecksItsHandles) {
  DecoderSetup s{1,
                 {ArenaKind::kCudaIpc, 1 << 20, std::vector<std::uint8_t>(kIpcHandleBytes, 3)},
                 {ArenaKind::kHostShared, 4096, {}}};
  std::string why;
  const auto back = decode_setup(encode(s), why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->device, 1);
  EXPECT_EQ(back->input.kind, ArenaKind::kCudaIpc);
  EXPECT_EQ(back->input.handle, s.input.handle);
  EXPECT_EQ(back->output.bytes, 4096U);
  EXPECT_TRUE(back->events.empty());
  // Events lent: whole handles, and no more than kMostEvents of them.
  s.events.assign(2, std::vector<std::uint8_t>(kIpcHandleBytes, 9));
  const auto with_events = decode_setup(encode(s), why);
  ASSERT_TRUE(with_events) << why;
  EXPECT_EQ(with_events->events, s.events);
  s.events.back().resize(kIpcHandleBytes - 1);
  EXPECT_FALSE(decode_setup(encode(s), why));
  s.events.assign(kMostEvents + 1, std::vector<std::uint8_t>(kIpcHandleBytes, 9));
  EXPECT_FALSE(decode_setup(encode(s), why));
  s.events.clear();
  s.input.handle.resize(10);
  EXPECT_FALSE(decode_setup(encode(s), why));
}

TEST(DecodeMessages, RandomBytesNeverParseIntoSomethingOutOfBounds) {
  std::mt19937_64 rng(5);
  std::string why;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> bytes(rng() % 120);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng() % 4 == 0 ? rng() : 0);
    if (const auto b = decode_batch(bytes, 256, 256 + kGuardBytes, why)) {
      for (const auto& c : b->chunks) {
        EXPECT_LE(c.input_offset + c.input_bytes, 256U);
        EXPECT_LE(c.output_offset + c.capacity, 256U);
      }
    }
    (void)decode_setup(bytes, why);
    (void)decode_header(bytes, why);
  }
}

// Two shared host arenas, as the stand-in decoder takes them.
class SharedArenas {
 public:
  explicit SharedArenas(std::size_t bytes) : bytes_(bytes) {
    for (int i = 0; i < 2; ++i) {
      fds_[i] = ::memfd_create("zarr-device-test-arena", MFD_CLOEXEC);
      EXPECT_EQ(::ftruncate(fds_[i], static_cast<off_t>(bytes)), 0);
      maps_[i] = static_cast<std::uint8_t*>(
          ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds_[i], 0));
    }
  }
  ~SharedArenas() {
    for (int i = 0; i < 2; ++i) {
      ::munmap(maps_[i], bytes_);
      ::close(fds_[i]);
    }
  }
  SharedArenas(const SharedArenas&) = delete;
  SharedArenas& operator=(const SharedArenas&) = delete;
  [[nodiscard]] DecoderSetup setup() const {
    return {0, {ArenaKind::kHostShared, bytes_, {}}, {ArenaKind::kHostShared, bytes_, {}}};
  }
  [[nodiscard]] std::span<const int> fds() const { return fds_; }
  std::uint8_t* input() { return maps_[0]; }
  std::uint8_t* output() { return maps_[1]; }

 private:
  std::size_t bytes_;
  int fds_[2] = {-1, -1};
  std::uint8_t* maps_[2] = {nullptr, nullptr};
};

DecoderProgram stand_in(std::size_t depth = 1) {
  return {ZARR_DEVICE_TEST_DECODER, {"--depth", std::to_string(depth)}};
}

std::unique_ptr<DecoderProcess> start(SharedArenas& arenas, std::size_t depth = 1) {
  std::string why;
  auto p = DecoderProcess::start(stand_in(depth), arenas.setup(), arenas.fds(), in(10000), why);
  EXPECT_TRUE(p) << why;
  return p;
}

// One chunk whose stored bytes are `text`, at the start of both arenas.
DecodeBatch one_chunk(SharedArenas& arenas, const std::string& text, std::uint64_t id = 1) {
  std::memcpy(arenas.input(), text.data(), text.size());
  return {id, 0, {{0, text.size(), 0, text.size()}}};
}

TEST(DecoderProcess, DecodesIntoTheSharedOutput) {
  SharedArenas arenas(16384);
  auto p = start(arenas);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->description(), "test decoder (copies)");
  for (std::uint64_t id = 1; id <= 3; ++id) {
    const std::string text = "chunk number " + std::to_string(id);
    std::string why;
    const auto d = p->decode(one_chunk(arenas, text, id), in(10000), why);
    ASSERT_TRUE(d) << why;
    ASSERT_EQ(d->chunks.size(), 1U);
    EXPECT_EQ(d->chunks[0].status, 0);
    EXPECT_EQ(d->chunks[0].bytes, text.size());
    EXPECT_EQ(std::string(reinterpret_cast<char*>(arenas.output()), text.size()), text);
  }
}

class DecoderProcessInFlight : public ::testing::TestWithParam<std::size_t> {};

// Depth 1: the service answers one batch before it launches the next; 4: as the decoder program,
// batches launched as they come and answered in order by a thread of the service's.
INSTANTIATE_TEST_SUITE_P(Depths, DecoderProcessInFlight, ::testing::Values(1, 4));

TEST_P(DecoderProcessInFlight, BatchesInFlightAreAnsweredInOrder) {
  SharedArenas arenas(16384);
  auto p = start(arenas, GetParam());
  ASSERT_TRUE(p);
  std::vector<DecodeBatch> sent;
  for (std::uint64_t id = 1; id <= 4; ++id) {  // each in its own 64 bytes of the arenas
    const std::string text = "batch " + std::to_string(id);
    const std::uint64_t at = 64 * id;
    std::memcpy(arenas.input() + at, text.data(), text.size());
    sent.push_back({id, 0, {{at, text.size(), at, text.size()}}});
    std::string why;
    ASSERT_TRUE(p->send(sent.back(), why)) << why;
  }
  for (const auto& batch : sent) {
    std::string why;
    const auto d = p->receive(batch, in(10000), why);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(d->id, batch.id);
    const auto& c = batch.chunks[0];
    EXPECT_EQ(std::string(reinterpret_cast<char*>(arenas.output() + c.output_offset), c.capacity),
              "batch " + std::to_string(batch.id));
  }
  // A fault in the second of three loses it and the third. The first may be answered before the
  // process ends, or lost with it: either way, never answered wrong.
  std::memcpy(arenas.input() + 64, "fine", 4);
  std::memcpy(arenas.input() + 128, "CRASH", 5);
  std::memcpy(arenas.input() + 192, "later", 5);
  const std::vector<DecodeBatch> more{
      {5, 0, {{64, 4, 64, 4}}}, {6, 0, {{128, 5, 128, 5}}}, {7, 0, {{192, 5, 192, 5}}}};
  std::string why;
  for (const auto& batch : more) p->send(batch, why);  // the last may find it ended
  if (const auto first = p->receive(more[0], in(10000), why)) {
    EXPECT_EQ(first->id, 5U);
    EXPECT_EQ(std::string(reinterpret_cast<char*>(arenas.output() + 64), 4), "fine");
    EXPECT_FALSE(p->receive(more[1], in(10000), why));
  }
  EXPECT_FALSE(p->running());
  EXPECT_FALSE(p->receive(more[2], in(10000), why));
}

TEST(DecoderProcess, AFaultEndsTheProcessAloneAndSaysHow) {
  SharedArenas arenas(16384);
  auto p = start(arenas);
  ASSERT_TRUE(p);
  std::string why;
  EXPECT_FALSE(p->decode(one_chunk(arenas, "CRASH"), in(10000), why));
  EXPECT_FALSE(p->running());
  EXPECT_NE(why.find("signal 6"), std::string::npos) << why;
  // The next process decodes as if nothing happened.
  auto next = start(arenas);
  ASSERT_TRUE(next);
  why.clear();
  EXPECT_TRUE(next->decode(one_chunk(arenas, "fine"), in(10000), why)) << why;
}

TEST(DecoderProcess, AHangIsKilledAtTheDeadline) {
  SharedArenas arenas(16384);
  auto p = start(arenas);
  ASSERT_TRUE(p);
  const auto began = Clock::now();
  std::string why;
  EXPECT_FALSE(p->decode(one_chunk(arenas, "HANG"), in(300), why));
  const auto took = Clock::now() - began;
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_FALSE(p->running());
  EXPECT_NE(why.find("did not answer in time"), std::string::npos) << why;
  EXPECT_NE(why.find("killed"), std::string::npos) << why;
}

TEST(DecoderProcess, AHungProcessEndsWhenItsEngineDoes) {
  // Orphans come back to this process (not to init), so that the test can wait for its own.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  struct NoLongerReaper {
    ~NoLongerReaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } const reaper_until_the_end;
  int pipe_ends[2];
  ASSERT_EQ(::pipe(pipe_ends), 0);
  // An engine (a child of this process) that dies with its decoder hung in a batch, as nvCOMP
  // hangs on some damaged frames, without ending it: the decoder never reads its socket again.
  const pid_t engine = ::fork();
  ASSERT_GE(engine, 0);
  if (engine == 0) {
    ::close(pipe_ends[0]);
    SharedArenas arenas(16384);
    auto p = start(arenas);
    std::string why;
    if (!p || !p->send(one_chunk(arenas, "HANG"), why)) std::_Exit(2);
    const pid_t decoder = p->pid();
    if (::write(pipe_ends[1], &decoder, sizeof decoder) != sizeof decoder) std::_Exit(3);
    ::usleep(200000);  // the batch reaches the decoder and hangs there
    std::_Exit(0);
  }
  ::close(pipe_ends[1]);
  pid_t decoder = 0;
  const auto got = ::read(pipe_ends[0], &decoder, sizeof decoder);
  ::close(pipe_ends[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(engine, &status, 0), engine);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof decoder));
  pid_t ended = 0;
  for (const auto until = Clock::now() + std::chrono::seconds(10);
       ended == 0 && Clock::now() < until; ::usleep(20000)) {
    ended = ::waitpid(decoder, &status, WNOHANG);
  }
  if (ended == 0) {
    ::kill(decoder, SIGKILL);
    ::waitpid(decoder, nullptr, 0);
  }
  ASSERT_EQ(ended, decoder) << "the decoder outlived its engine by 10 s";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
}

TEST(DecoderProcess, AnExitOrAWrongAnswerEndsIt) {
  SharedArenas arenas(16384);
  auto p = start(arenas);
  ASSERT_TRUE(p);
  std::string why;
  EXPECT_FALSE(p->decode(one_chunk(arenas, "EXIT"), in(10000), why));
  EXPECT_NE(why.find("exited with 7"), std::string::npos) << why;
  p = start(arenas);
  ASSERT_TRUE(p);
  why.clear();
  EXPECT_FALSE(p->decode(one_chunk(arenas, "LOSE"), in(10000), why));  // the service refuses
  EXPECT_FALSE(p->running());
  EXPECT_NE(why.find("exited with 1"), std::string::npos) << why;
  // A batch that names an event the setup did not lend.
  p = start(arenas);
  ASSERT_TRUE(p);
  why.clear();
  DecodeBatch waits = one_chunk(arenas, "fine");
  waits.event = 0;
  EXPECT_FALSE(p->decode(waits, in(10000), why));
  EXPECT_FALSE(p->running());
  EXPECT_NE(why.find("exited with 1"), std::string::npos) << why;
}

TEST(DecoderProcess, AProgramThatCannotStartIsAMessage) {
  SharedArenas arenas(16384);
  std::string why;
  EXPECT_FALSE(DecoderProcess::start({"/nonexistent/zarr-device-decoder", {}}, arenas.setup(),
                                     arenas.fds(), in(2000), why));
  EXPECT_NE(why.find("/nonexistent/zarr-device-decoder"), std::string::npos) << why;
  // A setup the decoder cannot use (no arenas beside it): it says so and exits.
  why.clear();
  EXPECT_FALSE(DecoderProcess::start(stand_in(), arenas.setup(), {}, in(10000), why));
  EXPECT_NE(why.find("exited with 1"), std::string::npos) << why;
}

}  // namespace
}  // namespace zarr_device::isolated_decode
