// What a read onto a CUDA GPU did, stage by stage, for whoever observes reads: the trace that
// ZARR_DEVICE_TRACE=1 prints to stderr. The read fills one value as it goes and hands it to the
// observer when it ends; its stages never look at the environment.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace zarr_device::cuda {

// Where the decoder process's calls spent their time, in seconds of the reading thread.
struct IsolatedTimes {
  double staging = 0;   // copying stored bytes into the input arena, sending the calls
  double waiting = 0;   // for the process's answers
  double placing = 0;   // queueing the placements of decoded chunks into the outputs
  double retiring = 0;  // for the placements from an arena range that a later call needs
};

struct ReadTrace {
  using Clock = std::chrono::steady_clock;
  std::size_t targets = 0;
  std::size_t leaves = 0;
  std::size_t batches = 0;
  std::size_t batch_target = 0;  // staged bytes a batch of copies aims at
  std::size_t slots = 0;
  std::size_t first_slot = 0;
  std::size_t most_ahead = 0;  // batches fetched ahead of the one submitted, at most
  std::string decode_memory;   // how device decodes were given memory
  std::size_t decode_calls = 0;
  std::size_t decoded_chunks = 0;
  std::size_t sized_calls = 0;      // whose temporary memory was sized from the frames
  std::size_t sized_in_slots = 0;   // of those, sized from the frames in their pinned slot
  std::size_t isolated_calls = 0;   // calls of the decoder process
  std::size_t isolated_chunks = 0;  // chunks sent to it
  std::size_t isolated_on_cpu = 0;  // chunks for it decoded on the CPU instead
  IsolatedTimes isolated_times;
  std::size_t shared = 0;        // device decodes left to the CPU
  std::size_t parted = 0;        // chunks staged a part at a time
  double fetch_waits = 0;        // seconds the pipeline waited for its CPU stage
  Clock::time_point start;       // the read's call
  Clock::time_point planned;     // its leaves planned
  Clock::time_point laid_out;    // its device plan made and the ring lent
  Clock::time_point queued;      // its last batch submitted
  Clock::time_point drain_from;  // the ring given back
  Clock::time_point end;         // every batch settled
};

using ReadObserver = std::function<void(const ReadTrace&)>;

// The observer of reads onto a GPU: a printer to stderr while ZARR_DEVICE_TRACE is set, otherwise
// none (empty).
const ReadObserver& read_observer();

// One line of text for a trace (what the printer writes).
std::string describe(const ReadTrace& trace);

}  // namespace zarr_device::cuda
