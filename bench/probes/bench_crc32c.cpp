// CRC-32C throughput: ours (cpp/src/codecs/crc32c.cpp: the hardware path the dispatcher picks, and
// the slicing-by-8 table fallback) against google/crc32c (its dispatching crc32c::Extend and its
// table fallback crc32c::ExtendPortable) on 4 KiB, 64 KiB, 1 MiB and 64 MiB buffers of random
// bytes. Prints GB/s (10^9 bytes per second, best of --trials runs of about 0.25 s each, the
// implementations taking turns) and ours / google's. Every pair of results is checked equal
// first. Single-threaded, one buffer at a time: 4 KiB to 1 MiB stay in cache, 64 MiB does not.
// Not part of the build. google/crc32c has no Debian package; built from its source:
//
//   git clone https://github.com/google/crc32c /tmp/crc32c-src   # or any release tarball
//   cmake -S /tmp/crc32c-src -B /tmp/crc32c-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
//     -DCRC32C_BUILD_TESTS=OFF -DCRC32C_BUILD_BENCHMARKS=OFF -DCRC32C_USE_GLOG=OFF \
//     -DCMAKE_INSTALL_PREFIX=/tmp/crc32c && ninja -C /tmp/crc32c-build install
//   g++ -O2 -std=c++20 -Icpp/include -Icpp/src -I/tmp/crc32c/include bench/probes/bench_crc32c.cpp \
//     cpp/src/codecs/crc32c.cpp /tmp/crc32c/lib/libcrc32c.a -o /tmp/bench_crc32c
//   /tmp/bench_crc32c [--trials N, default 7]
//
// On aarch64, add -march=armv8-a+crc to the g++ line (CMakeLists.txt compiles crc32c.cpp so).
#include <crc32c/crc32c.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "codecs/crc32c.hpp"

// google/crc32c's table implementation: internal (src/crc32c_internal.h), exported by its library.
namespace crc32c {
std::uint32_t ExtendPortable(std::uint32_t crc, const std::uint8_t* data, std::size_t count);
}

namespace {

namespace codecs = zarr_device::codecs;

using Crc = std::uint32_t (*)(std::span<const std::byte>);

struct Impl {
  const char* name;
  Crc function;
};

std::uint32_t ours(std::span<const std::byte> d) { return codecs::crc32c(d); }
std::uint32_t ours_table(std::span<const std::byte> d) {
  return codecs::detail::crc32c_portable(d, 0);
}
std::uint32_t google(std::span<const std::byte> d) {
  return crc32c::Crc32c(reinterpret_cast<const std::uint8_t*>(d.data()), d.size());
}
std::uint32_t google_table(std::span<const std::byte> d) {
  return crc32c::ExtendPortable(0, reinterpret_cast<const std::uint8_t*>(d.data()), d.size());
}

volatile std::uint32_t sink;

// Seconds per call: as many calls as fill about a quarter of a second, timed together.
double seconds_per_call(Crc f, std::span<const std::byte> data, std::size_t calls) {
  const auto start = std::chrono::steady_clock::now();
  std::uint32_t x = 0;
  for (std::size_t i = 0; i < calls; ++i) x ^= f(data);
  sink = x;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 7;
  if (argc == 3 && std::strcmp(argv[1], "--trials") == 0) trials = std::atoi(argv[2]);

  const Impl ours_hw{"ours", ours}, google_hw{"google", google};
  const Impl ours_tab{"ours (table)", ours_table}, google_tab{"google (table)", google_table};
  std::printf("hardware path: %s\n", codecs::detail::crc32c_hardware_available() ? "yes" : "no");

  std::mt19937_64 random(42);
  std::vector<std::byte> buffer(std::size_t{64} << 20);
  for (auto& b : buffer) b = static_cast<std::byte>(random());

  std::printf("%-10s %-16s %10s %-16s %10s %8s\n", "size", "ours", "GB/s", "google", "GB/s",
              "ratio");
  for (const auto& [a, b] : {std::pair{ours_hw, google_hw}, std::pair{ours_tab, google_tab}}) {
    for (const std::size_t size : {std::size_t{4} << 10, std::size_t{64} << 10,
                                   std::size_t{1} << 20, std::size_t{64} << 20}) {
      const std::span<const std::byte> data(buffer.data(), size);
      if (a.function(data) != b.function(data)) {
        std::fprintf(stderr, "%s and %s differ at %zu bytes\n", a.name, b.name, size);
        return 1;
      }
      // Calls per timing: about 0.25 s at the faster one's first estimate (over 64 MiB, warm).
      const std::size_t warm_calls = std::max<std::size_t>(1, (std::size_t{64} << 20) / size);
      const double first = std::min(seconds_per_call(a.function, data, warm_calls),
                                    seconds_per_call(b.function, data, warm_calls));
      const auto calls = static_cast<std::size_t>(std::max(1.0, 0.25 / std::max(first, 1e-9)));
      double best_a = 1e30, best_b = 1e30;
      for (int t = 0; t < trials; ++t) {
        best_a = std::min(best_a, seconds_per_call(a.function, data, calls));
        best_b = std::min(best_b, seconds_per_call(b.function, data, calls));
      }
      const double gbs_a = static_cast<double>(size) / best_a / 1e9;
      const double gbs_b = static_cast<double>(size) / best_b / 1e9;
      const std::string label = size >= (std::size_t{1} << 20)
                                    ? std::to_string(size >> 20) + " MiB"
                                    : std::to_string(size >> 10) + " KiB";
      std::printf("%-10s %-16s %10.2f %-16s %10.2f %8.2f\n", label.c_str(), a.name, gbs_a, b.name,
                  gbs_b, gbs_a / gbs_b);
    }
  }
  return 0;
}
