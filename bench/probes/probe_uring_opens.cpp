// What reading many small chunk files costs from many threads, the ways a local store could:
// openat2 + fstat + pread + close on each thread (what a read does), the same without the fstat,
// the same from processes instead of threads (each with a descriptor table of its own: whether
// the threads contend for the process's table), and io_uring rings of one per thread whose
// descriptors are the ring's own (an open, a read and a close linked, 32 files a submission), with
// openat and with openat2 (RESOLVE_BENEATH). Files are made when absent and read once before the
// timing (in the page cache). With `check`, each file's bytes are also summed once read, as a read
// checks a chunk's crc32c: right after its own read on a thread, after its submission through
// io_uring (FILES files a submission, 32 unless given). For io_uring, the kernel's worker threads
// (iou-wrk) alive after each way are counted: work the kernel could not do inline in the
// submitting thread ran there. Measured to decide how reads of small chunk files open them; not
// part of the build.
//
//   g++ -O2 -std=c++20 -pthread bench/probes/probe_uring_opens.cpp -o /tmp/probe_uring
//   /tmp/probe_uring DIR N [BYTES [check [FILES]]]  # N files of BYTES (16384) at DIR/c/<i>/0
#include <dirent.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int openat2_beneath(int dir, const char* path) {
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, dir, path, &how, sizeof how));
}

struct Ring {
  int fd = -1;
  unsigned* sq_tail = nullptr;
  unsigned* sq_mask = nullptr;
  unsigned* sq_array = nullptr;
  unsigned* cq_head = nullptr;
  unsigned* cq_tail = nullptr;
  unsigned* cq_mask = nullptr;
  io_uring_sqe* sqes = nullptr;
  io_uring_cqe* cqes = nullptr;
  unsigned tail = 0;

  bool setup(unsigned entries, unsigned files) {
    io_uring_params p{};
    fd = static_cast<int>(syscall(__NR_io_uring_setup, entries, &p));
    if (fd < 0) return false;
    const std::size_t sq_bytes = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    const std::size_t cq_bytes = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    const std::size_t ring_bytes = std::max(sq_bytes, cq_bytes);
    auto* sq = static_cast<char*>(mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING));
    if (sq == MAP_FAILED || !(p.features & IORING_FEAT_SINGLE_MMAP)) return false;
    sqes = static_cast<io_uring_sqe*>(mmap(nullptr, p.sq_entries * sizeof(io_uring_sqe),
                                           PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                                           IORING_OFF_SQES));
    if (sqes == MAP_FAILED) return false;
    sq_tail = reinterpret_cast<unsigned*>(sq + p.sq_off.tail);
    sq_mask = reinterpret_cast<unsigned*>(sq + p.sq_off.ring_mask);
    sq_array = reinterpret_cast<unsigned*>(sq + p.sq_off.array);
    cq_head = reinterpret_cast<unsigned*>(sq + p.cq_off.head);
    cq_tail = reinterpret_cast<unsigned*>(sq + p.cq_off.tail);
    cq_mask = reinterpret_cast<unsigned*>(sq + p.cq_off.ring_mask);
    cqes = reinterpret_cast<io_uring_cqe*>(sq + p.cq_off.cqes);
    tail = *sq_tail;
    io_uring_rsrc_register reg{};
    reg.nr = files;
    reg.flags = IORING_RSRC_REGISTER_SPARSE;
    return syscall(__NR_io_uring_register, fd, IORING_REGISTER_FILES2, &reg, sizeof reg) == 0;
  }
  io_uring_sqe* next() {
    const unsigned index = tail & *sq_mask;
    sq_array[index] = index;
    ++tail;
    io_uring_sqe* s = &sqes[index];
    std::memset(s, 0, sizeof *s);
    return s;
  }
  // Submits what was queued and waits for `count` completions; returns the failures.
  int submit_and_wait(unsigned count) {
    __atomic_store_n(sq_tail, tail, __ATOMIC_RELEASE);
    unsigned done = 0;
    int failures = 0;
    unsigned to_submit = count;
    while (done < count) {
      const long r = syscall(__NR_io_uring_enter, fd, to_submit, count - done,
                             IORING_ENTER_GETEVENTS, nullptr, 0);
      if (r < 0) {
        std::perror("io_uring_enter");
        std::exit(1);
      }
      to_submit = 0;
      unsigned head = *cq_head;
      const unsigned end = __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE);
      for (; head != end; ++head, ++done) {
        if (cqes[head & *cq_mask].res < 0) ++failures;
      }
      __atomic_store_n(cq_head, head, __ATOMIC_RELEASE);
    }
    return failures;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR N [BYTES]\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const int n = std::atoi(argv[2]);
  const std::size_t bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 16384;
  const bool check = argc > 4 && std::string(argv[4]) == "check";
  const unsigned files_per_submit =
      argc > 5 ? static_cast<unsigned>(std::strtoul(argv[5], nullptr, 10)) : 32;
  std::atomic<std::uint64_t> sink{0};
  auto sum = [](const char* data, std::size_t size) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < size; ++i) total += static_cast<unsigned char>(data[i]);
    return total;
  };
  auto kernel_workers = [] {
    int count = 0;
    if (DIR* tasks = opendir("/proc/self/task")) {
      while (const dirent* e = readdir(tasks)) {
        std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
        std::string name;
        if (std::getline(comm, name) && name.rfind("iou-wrk", 0) == 0) ++count;
      }
      closedir(tasks);
    }
    return count;
  };
  std::vector<std::string> keys;
  std::vector<char> data(bytes, 'x');
  for (int i = 0; i < n; ++i) {
    keys.push_back("c/" + std::to_string(i) + "/0");
    const std::string dir = root + "/c/" + std::to_string(i);
    const std::string path = dir + "/0";
    struct stat st {};
    if (stat(path.c_str(), &st) == 0 && static_cast<std::size_t>(st.st_size) == bytes) continue;
    mkdir(root.c_str(), 0755);
    mkdir((root + "/c").c_str(), 0755);
    mkdir(dir.c_str(), 0755);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data.data(), bytes) != static_cast<ssize_t>(bytes)) {
      std::perror(path.c_str());
      return 1;
    }
    close(fd);
  }
  const int held = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  const char* names[] = {"openat2 + fstat + pread + close", "openat2 + pread + close",
                         "processes: openat2 + fstat + pread + close",
                         "io_uring: openat + read + close, ring's own descriptors",
                         "io_uring: openat2 + read + close, ring's own descriptors"};
  const unsigned kFilesPerSubmit = files_per_submit;
  for (const int threads : {1, 4, 8, 16}) {
    for (int way = 0; way < 5; ++way) {
      std::atomic<long> failures{0};
      auto work = [&](int t) {
        std::vector<char> buf(bytes * kFilesPerSubmit);
        if (way <= 2) {
          for (int i = t; i < n; i += threads) {
            const int fd = openat2_beneath(held, keys[i].c_str());
            if (fd < 0) {
              ++failures;
              continue;
            }
            if (way != 1) {
              struct stat st {};
              fstat(fd, &st);
            }
            if (pread(fd, buf.data(), bytes, 0) != static_cast<ssize_t>(bytes)) ++failures;
            close(fd);
            if (check) sink += sum(buf.data(), bytes);
          }
          return;
        }
        Ring ring;
        if (!ring.setup(4 * kFilesPerSubmit, kFilesPerSubmit)) {
          std::fprintf(stderr, "io_uring setup failed: %s\n", std::strerror(errno));
          std::exit(1);
        }
        open_how how{};
        how.flags = O_RDONLY;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        std::vector<int> mine;
        for (int i = t; i < n; i += threads) mine.push_back(i);
        for (std::size_t b = 0; b < mine.size(); b += kFilesPerSubmit) {
          const unsigned count =
              static_cast<unsigned>(std::min<std::size_t>(kFilesPerSubmit, mine.size() - b));
          for (unsigned k = 0; k < count; ++k) {
            io_uring_sqe* o = ring.next();
            if (way == 3) {
              o->opcode = IORING_OP_OPENAT;
              o->open_flags = O_RDONLY;
            } else {
              o->opcode = IORING_OP_OPENAT2;
              o->len = sizeof how;
              o->off = reinterpret_cast<std::uint64_t>(&how);
            }
            o->fd = held;
            o->addr = reinterpret_cast<std::uint64_t>(keys[mine[b + k]].c_str());
            o->file_index = k + 1;
            o->flags = IOSQE_IO_HARDLINK;
            io_uring_sqe* r = ring.next();
            r->opcode = IORING_OP_READ;
            r->fd = static_cast<int>(k);
            r->addr = reinterpret_cast<std::uint64_t>(buf.data() + k * bytes);
            r->len = static_cast<unsigned>(bytes);
            r->flags = IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
            io_uring_sqe* c = ring.next();
            c->opcode = IORING_OP_CLOSE;
            c->file_index = k + 1;
          }
          failures += ring.submit_and_wait(3 * count);
          if (check) {
            for (unsigned k = 0; k < count; ++k) sink += sum(buf.data() + k * bytes, bytes);
          }
        }
        close(ring.fd);
      };
      const auto t0 = std::chrono::steady_clock::now();
      if (way == 2) {
        std::vector<pid_t> children;
        for (int t = 0; t < threads; ++t) {
          const pid_t pid = fork();
          if (pid == 0) {
            work(t);
            _exit(failures ? 1 : 0);
          }
          children.push_back(pid);
        }
        for (const pid_t pid : children) {
          int status = 0;
          waitpid(pid, &status, 0);
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
        }
      } else {
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
        for (auto& th : pool) th.join();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int workers = way >= 3 ? kernel_workers() : 0;
      std::printf("%2d threads  %-58s %7.3f us/file  %6.2f GB/s%s", threads, names[way],
                  s * 1e6 / n, static_cast<double>(bytes) * n / s / 1e9,
                  failures ? "  FAILURES" : "");
      if (way >= 3) std::printf("  (kernel workers: %d)", workers);
      std::printf("\n");
    }
  }
  if (check) std::printf("(checked: %llu)\n", static_cast<unsigned long long>(sink.load()));
  return 0;
}
