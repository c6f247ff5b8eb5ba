#include "stores/whole_file_reads.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#if __has_include(<linux/io_uring.h>) && __has_include(<linux/openat2.h>)
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace zarr_device::stores {

#if __has_include(<linux/io_uring.h>) && __has_include(<linux/openat2.h>) && \
    defined(IORING_RSRC_REGISTER_SPARSE) && defined(SYS_io_uring_setup)
namespace {

// Files a submission holds: one slot of the ring's descriptor table each, and five entries
// (open, read, a read past the room, close).
constexpr unsigned kFilesPerSubmit = 32;
constexpr unsigned kOpsPerFile = 4;
constexpr unsigned kEntries = 256;
static_assert(kFilesPerSubmit * kOpsPerFile <= kEntries);

// A ring of one thread's: its submission and completion queues mapped, and a table of
// kFilesPerSubmit descriptors that only the ring sees.
class Ring {
 public:
  Ring() {
    io_uring_params p{};
    const long fd = ::syscall(SYS_io_uring_setup, kEntries, &p);
    if (fd < 0) return;
    fd_ = static_cast<int>(fd);
    if ((p.features & IORING_FEAT_SINGLE_MMAP) == 0) return;
    ring_bytes_ = std::max<std::size_t>(p.sq_off.array + p.sq_entries * sizeof(unsigned),
                                        p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe));
    void* ring = ::mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                        fd_, IORING_OFF_SQ_RING);
    if (ring == MAP_FAILED) return;
    ring_ = static_cast<char*>(ring);
    sqe_bytes_ = p.sq_entries * sizeof(io_uring_sqe);
    void* sqes = ::mmap(nullptr, sqe_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_,
                        IORING_OFF_SQES);
    if (sqes == MAP_FAILED) return;
    sqes_ = static_cast<io_uring_sqe*>(sqes);
    sq_tail_ = reinterpret_cast<unsigned*>(ring_ + p.sq_off.tail);
    sq_mask_ = *reinterpret_cast<unsigned*>(ring_ + p.sq_off.ring_mask);
    sq_array_ = reinterpret_cast<unsigned*>(ring_ + p.sq_off.array);
    cq_head_ = reinterpret_cast<unsigned*>(ring_ + p.cq_off.head);
    cq_tail_ = reinterpret_cast<unsigned*>(ring_ + p.cq_off.tail);
    cq_mask_ = *reinterpret_cast<unsigned*>(ring_ + p.cq_off.ring_mask);
    cqes_ = reinterpret_cast<io_uring_cqe*>(ring_ + p.cq_off.cqes);
    tail_ = *sq_tail_;
    io_uring_rsrc_register files{};
    files.nr = kFilesPerSubmit;
    files.flags = IORING_RSRC_REGISTER_SPARSE;
    usable_ =
        ::syscall(SYS_io_uring_register, fd_, IORING_REGISTER_FILES2, &files, sizeof files) == 0;
  }
  ~Ring() {
    if (sqes_) ::munmap(sqes_, sqe_bytes_);
    if (ring_) ::munmap(ring_, ring_bytes_);
    if (fd_ >= 0) ::close(fd_);
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  [[nodiscard]] bool usable() const { return usable_; }

  io_uring_sqe* next(std::uint64_t user_data) {
    const unsigned index = tail_ & sq_mask_;
    sq_array_[index] = index;
    ++tail_;
    io_uring_sqe* sqe = &sqes_[index];
    std::memset(sqe, 0, sizeof *sqe);
    sqe->user_data = user_data;
    return sqe;
  }

  // Submits what was queued and hands each completion to `done(user_data, res)`. False when the
  // kernel refused part of the submission (the ring is then not used again); what it took is
  // still waited for, since it writes into the caller's memory.
  template <typename Done>
  bool run(unsigned count, Done&& done) {
    __atomic_store_n(sq_tail_, tail_, __ATOMIC_RELEASE);
    unsigned submitted = 0;
    unsigned completed = 0;
    bool refused = false;
    while (completed < submitted || (!refused && submitted < count)) {
      const unsigned to_submit = refused ? 0 : count - submitted;
      const unsigned wanted = (refused ? submitted : count) - completed;
      const long r =
          ::syscall(SYS_io_uring_enter, fd_, to_submit, wanted, IORING_ENTER_GETEVENTS, nullptr, 0);
      if (r >= 0) {
        submitted += std::min(to_submit, static_cast<unsigned>(r));
      } else if (errno != EINTR && errno != EAGAIN && errno != EBUSY && to_submit > 0) {
        refused = true;
      }
      unsigned head = *cq_head_;
      const unsigned tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
      for (; head != tail; ++head, ++completed) {
        const io_uring_cqe& cqe = cqes_[head & cq_mask_];
        done(cqe.user_data, cqe.res);
      }
      __atomic_store_n(cq_head_, head, __ATOMIC_RELEASE);
    }
    return !refused;
  }

 private:
  int fd_ = -1;
  bool usable_ = false;
  char* ring_ = nullptr;
  std::size_t ring_bytes_ = 0;
  io_uring_sqe* sqes_ = nullptr;
  std::size_t sqe_bytes_ = 0;
  unsigned* sq_tail_ = nullptr;
  unsigned sq_mask_ = 0;
  unsigned* sq_array_ = nullptr;
  unsigned* cq_head_ = nullptr;
  unsigned* cq_tail_ = nullptr;
  unsigned cq_mask_ = 0;
  io_uring_cqe* cqes_ = nullptr;
  unsigned tail_ = 0;
};

std::atomic<bool> io_uring_refused{
    false};  // a ring could not be made, or the kernel refused one's work

Ring* this_threads_ring() {
  if (io_uring_refused.load(std::memory_order_relaxed)) return nullptr;
  thread_local std::unique_ptr<Ring> ring;
  if (!ring) {
    ring = std::make_unique<Ring>();
    if (!ring->usable()) {
      io_uring_refused = true;
      ring.reset();
      return nullptr;
    }
  }
  return ring.get();
}

enum Op : std::uint64_t { kOpen, kRead, kPast, kClose };

// One submission of up to kFilesPerSubmit files.
bool submit(Ring& ring, int directory, std::span<const WholeFileRead> reads,
            std::span<WholeReadResult> results) {
  struct Pending {
    std::byte past;  // the byte after the room, which a file larger than its room has
    int open_res, read_res, past_res;
  };
  std::array<Pending, kFilesPerSubmit> pending{};
  open_how how{};
  // O_NONBLOCK: a FIFO where a file should be must not block its open. (No O_CLOEXEC: the ring's
  // own descriptors are never the process's, and io_uring refuses the flag for them.)
  how.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const auto n = static_cast<unsigned>(reads.size());
  for (unsigned k = 0; k < n; ++k) {
    const auto& read = reads[k];
    auto tag = [&](Op op) { return std::uint64_t{k} * kOpsPerFile + op; };
    // Linked hard, so that each runs whatever the one before returned and the close is never
    // skipped; each result is judged below.
    io_uring_sqe* open = ring.next(tag(kOpen));
    open->opcode = IORING_OP_OPENAT2;
    open->fd = directory;
    open->addr = reinterpret_cast<std::uint64_t>(read.path.c_str());
    open->len = sizeof how;
    open->off = reinterpret_cast<std::uint64_t>(&how);
    open->file_index = k + 1;  // the ring's descriptor k
    open->flags = IOSQE_IO_HARDLINK;
    io_uring_sqe* body = ring.next(tag(kRead));
    body->opcode = IORING_OP_READ;
    body->fd = static_cast<int>(k);
    body->addr = reinterpret_cast<std::uint64_t>(read.room.data());
    body->len = static_cast<std::uint32_t>(read.room.size());
    body->off = 0;
    body->flags = IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
    io_uring_sqe* past = ring.next(tag(kPast));
    past->opcode = IORING_OP_READ;
    past->fd = static_cast<int>(k);
    past->addr = reinterpret_cast<std::uint64_t>(&pending[k].past);
    past->len = 1;
    past->off = read.room.size();
    past->flags = IOSQE_FIXED_FILE | IOSQE_IO_HARDLINK;
    io_uring_sqe* close = ring.next(tag(kClose));
    close->opcode = IORING_OP_CLOSE;
    close->file_index = k + 1;
  }
  const bool ran = ring.run(n * kOpsPerFile, [&](std::uint64_t tag, int res) {
    auto& p = pending[tag / kOpsPerFile];
    switch (static_cast<Op>(tag % kOpsPerFile)) {
      case kOpen:
        p.open_res = res;
        break;
      case kRead:
        p.read_res = res;
        break;
      case kPast:
        p.past_res = res;
        break;
      case kClose:
        break;
    }
  });
  if (!ran) return false;
  for (unsigned k = 0; k < n; ++k) {
    const auto& p = pending[k];
    auto& result = results[k];
    result = {};
    if (p.open_res == -ENOENT || p.open_res == -ENOTDIR) {
      result.outcome = WholeRead::kAbsent;
    } else if (p.open_res >= 0 && p.read_res > 0 && p.past_res == 0) {
      // Read whole: the file ends within its room. What is not a regular file does not get here:
      // a directory's read fails (EISDIR), a FIFO's or socket's (a read at an offset: ESPIPE,
      // or their open), and a device's read past the room returns a byte (/dev/zero) or its
      // first read none (/dev/null), as does an empty file: those are the caller's to open. (A
      // regular file of a local file system ends a read short only at its end; the statx that
      // would check its type and size goes through io_uring's worker threads, which made these
      // reads slower than threads opening files themselves.)
      result.outcome = WholeRead::kRead;
      result.size = static_cast<std::size_t>(p.read_res);
    }
  }
  return true;
}

}  // namespace

bool whole_file_reads_available() { return this_threads_ring() != nullptr; }

bool read_whole_files(int directory, std::span<const WholeFileRead> reads,
                      std::span<WholeReadResult> results) {
  for (auto& r : results) r = {};
  Ring* ring = this_threads_ring();
  if (!ring) return false;
  // One read's length is 32 bits: rooms past 1 GiB are left to the caller (they are not small).
  constexpr std::size_t kLargestRoom = std::size_t{1} << 30;
  if (std::any_of(reads.begin(), reads.end(),
                  [](const WholeFileRead& r) { return r.room.size() > kLargestRoom; })) {
    return false;
  }
  for (std::size_t begin = 0; begin < reads.size(); begin += kFilesPerSubmit) {
    const std::size_t count = std::min<std::size_t>(kFilesPerSubmit, reads.size() - begin);
    if (!submit(*ring, directory, reads.subspan(begin, count), results.subspan(begin, count))) {
      io_uring_refused = true;
      for (auto& r : results) r = {};
      return false;
    }
  }
  return true;
}

#else

bool whole_file_reads_available() { return false; }

bool read_whole_files(int /*directory*/, std::span<const WholeFileRead> /*reads*/,
                      std::span<WholeReadResult> results) {
  for (auto& r : results) r = {};
  return false;
}

#endif

}  // namespace zarr_device::stores
