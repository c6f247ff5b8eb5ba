#include "read_trace.hpp"

#include <cstdio>

#include "zarr_device/settings.hpp"

namespace zarr_device::cuda {
namespace {

double ms(ReadTrace::Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

std::string describe(const ReadTrace& t) {
  char line[1280];
  std::snprintf(
      line, sizeof(line),
      "zarr-device read: %zu targets %zu leaves %zu batches (copies %zu B), %zu slots from %zu, "
      "fetched up to %zu ahead, %s, %zu decode calls of %zu chunks (%zu sized from their frames, "
      "%zu in their slots), %zu decoder-process calls of %zu chunks (%zu then on the CPU; staging "
      "%.2f ms, waiting %.2f ms, placing %.2f ms, retiring %.2f ms), %zu "
      "shared with the CPU, %zu in parts; plan %.2f ms (chunks %.2f), "
      "fetch waits %.2f ms, batches %.2f ms, drain %.2f ms, total %.2f ms, at %.3f ms",
      t.targets, t.leaves, t.batches, t.batch_target, t.slots, t.first_slot, t.most_ahead,
      t.decode_memory.c_str(), t.decode_calls, t.decoded_chunks, t.sized_calls, t.sized_in_slots,
      t.isolated_calls, t.isolated_chunks, t.isolated_on_cpu, t.isolated_times.staging * 1e3,
      t.isolated_times.waiting * 1e3, t.isolated_times.placing * 1e3,
      t.isolated_times.retiring * 1e3, t.shared, t.parted, ms(t.laid_out - t.start),
      ms(t.planned - t.start), t.fetch_waits * 1e3, ms(t.queued - t.laid_out),
      ms(t.end - t.drain_from), ms(t.end - t.start), ms(t.start.time_since_epoch()));
  return line;
}

const ReadObserver& read_observer() {
  static const ReadObserver printer = [](const ReadTrace& trace) {
    std::fprintf(stderr, "%s\n", describe(trace).c_str());
  };
  static const ReadObserver none;
  // Looked up as a read ends (once a read, never in its loop), so that a process may turn the
  // trace on and off while it runs.
  return environment_value(EnvironmentVariable::kTrace) ? printer : none;
}

}  // namespace zarr_device::cuda
