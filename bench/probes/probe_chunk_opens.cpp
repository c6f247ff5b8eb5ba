// What finding a chunk file costs, the ways a local store can: its root's path opened for every
// file (as a store that keeps no descriptor does), the root held open for a whole read, a plain
// open by full path, and a stat alone (fstatat / statx from a held root: no descriptor made), each
// with and without reading the file, from 1 to 16 threads. Measured once to decide how reads find
// their chunks (docs/architecture.md, "Trust"); not part of the build.
//
//   g++ -O2 -std=c++20 -pthread bench/probes/probe_chunk_opens.cpp -o /tmp/probe_opens
//   /tmp/probe_opens ARRAY_DIR N   # N chunk files at ARRAY_DIR/c/<i>/0, i < N (a 2-d array of
//                                  # one chunk per row band, as bench/probes/trace_layouts.py writes)
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

static int openat2_beneath(int dir, const char* path, int flags) {
  open_how how{};
  how.flags = static_cast<unsigned long long>(flags) | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dir, path, &how, sizeof how));
}

int main(int argc, char** argv) {
  const std::string root = argv[1];
  const int n = std::atoi(argv[2]);
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("c/" + std::to_string(i) + "/0");
  int held = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const char* names[] = {"root per op + openat2 + fstat", "held root + openat2 + fstat", "held root + openat2 O_PATH + fstat",
                         "root per op + openat2 + fstat + pread", "held root + openat2 + fstat + pread", "open(full path) + fstat + pread", "held root + statx", "held root + fstatat"};
  for (int threads : {1, 4, 8, 16}) {
    for (int way = 0; way < 8; ++way) {
      std::atomic<int> next{0};
      std::atomic<long> bytes{0};
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) ts.emplace_back([&] {
        std::vector<char> buf(1 << 20);
        long got = 0;
        for (int i; (i = next.fetch_add(1)) < n;) {
          const char* k = keys[i].c_str();
          int r = -1, fd = -1;
          if (way == 6) { struct statx sx{}; statx(held, k, AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_SIZE | STATX_TYPE, &sx); continue; }
          if (way == 7) { struct stat st{}; fstatat(held, k, &st, AT_SYMLINK_NOFOLLOW); continue; }
          if (way == 0 || way == 3) { r = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC); fd = openat2_beneath(r, k, O_RDONLY | O_NONBLOCK); }
          else if (way == 2) fd = openat2_beneath(held, k, O_PATH);
          else if (way == 5) fd = open((root + "/" + keys[i]).c_str(), O_RDONLY | O_CLOEXEC);
          else fd = openat2_beneath(held, k, O_RDONLY | O_NONBLOCK);
          struct stat st{};
          fstat(fd, &st);
          if (way >= 3) got += pread(fd, buf.data(), std::min<long>(st.st_size, buf.size()), 0);
          close(fd);
          if (r >= 0) close(r);
        }
        bytes += got;
      });
      for (auto& t : ts) t.join();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%2d threads  %-40s %8.1f ms  %6.2f us/file  %6.2f GB/s\n", threads, names[way], s * 1e3, s * 1e6 / n, bytes / s / 1e9);
    }
  }
}
