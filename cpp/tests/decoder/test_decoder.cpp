// A stand-in for the decoder program in the engine's tests: it serves the same protocol on shared
// host arenas, and its "decoding" copies each chunk's bytes. Inputs that begin with a command make
// it misbehave as a faulting or hanging decoder would: "CRASH" aborts, "HANG" never answers,
// "EXIT" exits with status 7, "LOSE" answers with a chunk missing. With "--depth N" after its
// descriptor it keeps up to N batches in flight, as the decoder program does: a batch is launched
// when it arrives and copied when it is collected, a few milliseconds later.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "isolated_decode/decoder_service.hpp"

namespace {

using namespace zarr_device::isolated_decode;

class CopyBackend : public ImmediateBackend {
 public:
  explicit CopyBackend(std::size_t depth) : depth_(depth) {}
  [[nodiscard]] std::size_t depth() const override { return depth_; }

  // Launched batches wait to be copied until collected, so that several are in flight at once.
  void launch(const DecodeBatch& batch) override {
    if (depth_ == 1) {
      ImmediateBackend::launch(batch);
      return;
    }
    const std::scoped_lock lock(mutex_);
    launched_.push_back(batch);
  }
  std::vector<ChunkOutcome> collect() override {
    if (depth_ == 1) return ImmediateBackend::collect();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    DecodeBatch batch;
    {
      const std::scoped_lock lock(mutex_);
      batch = std::move(launched_.front());
      launched_.pop_front();
    }
    return decode(batch);
  }

  std::string set_up(const DecoderSetup& setup, std::span<const int> fds) override {
    if (setup.input.kind != ArenaKind::kHostShared || setup.output.kind != ArenaKind::kHostShared ||
        fds.size() != 2 || !setup.events.empty()) {
      throw std::runtime_error("the test decoder takes two shared host arenas and no events");
    }
    input_ = map(fds[0], setup.input.bytes, PROT_READ);
    output_ = map(fds[1], setup.output.bytes, PROT_READ | PROT_WRITE);
    return "test decoder (copies)";
  }

  std::vector<ChunkOutcome> decode(const DecodeBatch& batch) override {
    std::vector<ChunkOutcome> out;
    for (const ChunkJob& c : batch.chunks) {
      const auto* in = input_ + c.input_offset;
      const std::string head(reinterpret_cast<const char*>(in),
                             std::min<std::size_t>(c.input_bytes, 5));
      if (head == "CRASH") std::abort();
      if (head.starts_with("HANG")) ::pause();
      if (head.starts_with("EXIT")) std::_Exit(7);
      if (head.starts_with("LOSE")) continue;
      const std::size_t n = std::min(c.input_bytes, c.capacity);
      std::memcpy(output_ + c.output_offset, in, n);
      out.push_back({0, c.input_bytes});
    }
    return out;
  }

 private:
  static std::uint8_t* map(int fd, std::uint64_t bytes, int protection) {
    void* p = ::mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw std::runtime_error("could not map an arena");
    return static_cast<std::uint8_t*>(p);
  }
  const std::uint8_t* input_ = nullptr;
  std::uint8_t* output_ = nullptr;
  std::size_t depth_;
  std::mutex mutex_;
  std::deque<DecodeBatch> launched_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) != "--fd") return 2;
  const std::size_t depth =
      argc >= 5 && std::string(argv[3]) == "--depth" ? std::strtoul(argv[4], nullptr, 10) : 1;
  CopyBackend backend(std::max<std::size_t>(depth, 1));
  return serve(std::atoi(argv[2]), backend);
}
