#include "stores/file_io.hpp"

#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <vector>

#include "zarr_device/errors.hpp"

namespace zarr_device::stores {

std::string errno_text(int err) {
  std::string text = std::system_category().message(err);
  if (err == EMFILE) {
    // What to do about it: reads keep few files open, but a read of very many shards holds one
    // for each it touches.
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      text += " (this process may open " + std::to_string(limit.rlim_cur) + ")";
    }
    text +=
        ": raise the limit (ulimit -n, or Python's resource.setrlimit(resource.RLIMIT_NOFILE, "
        "...)), or read fewer shards at once";
  }
  return text;
}

bool raise_open_file_limit() {
  // Many systems start processes with a soft limit of 1024 open files under a far higher hard
  // limit; a read of many shards holds one file open for each it touches (the version of the
  // shard its index was read from). The soft limit is raised once, when it is reached, as far
  // as the hard limit allows (and Linux's cap on descriptors, fs.nr_open, at most 2^20).
  static std::mutex mutex;
  static bool raised = false;
  const std::lock_guard guard(mutex);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  constexpr rlim_t kCap = rlim_t{1} << 20;
  const rlim_t wanted = limit.rlim_max == RLIM_INFINITY ? kCap : std::min(limit.rlim_max, kCap);
  if (limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= wanted) {
    return raised;  // by another thread's open meanwhile, which this one may now follow
  }
  limit.rlim_cur = wanted;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return false;
  raised = true;
  return true;
}

namespace {

std::atomic<std::uint64_t> disk_reads{0};
// Cleared where the kernel or the file system refuses RWF_NOWAIT: reads then simply wait.
std::atomic<bool> nowait_reads{true};

// The first request of a buffered read: preadv2 with RWF_NOWAIT, which reads what the page cache
// holds from the start of the range and fails with EAGAIN (or stops short) where it would have to
// wait for the disk. Returns the bytes it read (0 for none: the caller reads on, waiting), or -1
// with errno set for any other failure.
ssize_t read_cached(int fd, iovec* vec, int count, std::uint64_t offset) {
  if (!nowait_reads.load(std::memory_order_relaxed)) return 0;
  for (;;) {
    const auto n = ::preadv2(fd, vec, count, static_cast<off_t>(offset), RWF_NOWAIT);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return 0;
    if (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS) {
      nowait_reads.store(false, std::memory_order_relaxed);
      return 0;
    }
    return -1;
  }
}

}  // namespace

std::uint64_t reads_from_disk() { return disk_reads.load(std::memory_order_relaxed); }

std::size_t read_at(int fd, std::span<std::byte> out, std::uint64_t offset,
                    const std::string& path) {
  if (out.empty()) return 0;
  iovec first{out.data(), out.size()};
  const auto cached = read_cached(fd, &first, 1, offset);
  if (cached < 0) throw StoreError("could not read " + path + ": " + errno_text(errno));
  auto done = static_cast<std::size_t>(cached);
  bool waited = false;  // whether bytes past what the cache held were read
  while (done < out.size()) {
    const auto n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw StoreError("could not read " + path + ": " + errno_text(errno));
    }
    if (n == 0) break;
    waited = true;
    done += static_cast<std::size_t>(n);
  }
  if (waited && nowait_reads.load(std::memory_order_relaxed)) {
    disk_reads.fetch_add(1, std::memory_order_relaxed);
  }
  return done;
}

std::size_t read_direct(int fd, std::uint64_t offset, std::size_t length, const std::string& path,
                        const std::function<void(const std::byte*, std::size_t)>& sink) {
  constexpr std::size_t kBlock = 4096;
  constexpr std::size_t kBounce = std::size_t{4} << 20;
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<std::byte, Free> bounce(
      static_cast<std::byte*>(std::aligned_alloc(kBlock, kBounce)));
  if (!bounce) throw OutOfMemoryError("could not allocate an O_DIRECT read buffer");
  std::uint64_t position = offset / kBlock * kBlock;  // file offset of bounce[0]
  const std::uint64_t end = offset + length;
  std::size_t delivered = 0;
  while (position < end) {
    const std::size_t want = static_cast<std::size_t>(
        std::min<std::uint64_t>(kBounce, (end - position + kBlock - 1) / kBlock * kBlock));
    ssize_t n = 0;
    do {
      n = ::pread(fd, bounce.get(), want, static_cast<off_t>(position));
    } while (n < 0 && errno == EINTR);
    if (n < 0) throw StoreError("could not read " + path + ": " + errno_text(errno));
    if (n == 0) break;
    const std::uint64_t got_end = position + static_cast<std::uint64_t>(n);
    const std::uint64_t from = std::max(position, offset);
    const std::uint64_t to = std::min(got_end, end);
    if (to > from) {
      sink(bounce.get() + (from - position), static_cast<std::size_t>(to - from));
      delivered += static_cast<std::size_t>(to - from);
    }
    if (static_cast<std::size_t>(n) < want) break;  // end of the file
    position = got_end;
  }
  return delivered;
}

std::size_t read_range(int fd, bool direct, std::span<std::byte> out, std::uint64_t offset,
                       const std::string& path) {
  if (!direct) return read_at(fd, out, offset, path);
  std::byte* to = out.data();
  return read_direct(fd, offset, out.size(), path, [&](const std::byte* data, std::size_t n) {
    std::memcpy(to, data, n);
    to += n;
  });
}

std::size_t read_pieces(int fd, bool direct, std::span<const std::span<std::byte>> pieces,
                        const std::string& path) {
  std::size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  if (direct) {
    std::size_t piece = 0;
    std::size_t within = 0;
    return read_direct(fd, 0, total, path, [&](const std::byte* data, std::size_t n) {
      while (n > 0) {
        const std::size_t take = std::min(n, pieces[piece].size() - within);
        std::memcpy(pieces[piece].data() + within, data, take);
        data += take;
        n -= take;
        within += take;
        if (within == pieces[piece].size()) {
          ++piece;
          within = 0;
        }
      }
    });
  }
  // preadv fills the pieces in order, IOV_MAX of them per call.
  bool waited = false;  // whether this read has counted among reads_from_disk
  std::vector<iovec> vec;
  vec.reserve(std::min<std::size_t>(pieces.size(), IOV_MAX));
  std::size_t done = 0;
  std::size_t next = 0;
  while (next < pieces.size()) {
    vec.clear();
    std::size_t batch = 0;
    for (; next < pieces.size() && vec.size() < IOV_MAX; ++next) {
      vec.push_back({pieces[next].data(), pieces[next].size()});
      batch += pieces[next].size();
    }
    std::size_t got = 0;
    std::size_t first = 0;
    bool cached = done == 0;  // the first request of the read: what the cache holds (read_cached)
    while (got < batch) {
      auto n = cached ? read_cached(fd, vec.data(), static_cast<int>(vec.size()), 0)
                      : ::preadv(fd, vec.data() + first, static_cast<int>(vec.size() - first),
                                 static_cast<off_t>(done + got));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw StoreError("could not read " + path + ": " + errno_text(errno));
      }
      if (cached) {
        cached = false;
        if (n == 0) continue;  // nothing cached at its start: read on, waiting
      } else if (n > 0 && nowait_reads.load(std::memory_order_relaxed) && !waited) {
        waited = true;
        disk_reads.fetch_add(1, std::memory_order_relaxed);
      }
      if (n == 0) return done + got;  // the file shrank
      got += static_cast<std::size_t>(n);
      // Skip the pieces that are full, trim the one that is partly read.
      auto left = static_cast<std::size_t>(n);
      while (first < vec.size() && left >= vec[first].iov_len) left -= vec[first++].iov_len;
      if (first < vec.size()) {
        vec[first].iov_base = static_cast<std::byte*>(vec[first].iov_base) + left;
        vec[first].iov_len -= left;
      }
    }
    done += batch;
  }
  return done;
}

void write_pieces(int fd, std::span<const std::span<const std::byte>> pieces,
                  const std::string& path) {
  std::vector<iovec> left;
  left.reserve(pieces.size());
  for (const auto& p : pieces) {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast): iovec has no const variant
    if (!p.empty()) left.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  std::size_t first = 0;
  while (first < left.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(left.size() - first, IOV_MAX));
    const auto n = ::writev(fd, left.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw StoreError("could not write " + path + ": " + errno_text(errno));
    }
    auto done = static_cast<std::size_t>(n);
    while (first < left.size() && done >= left[first].iov_len) done -= left[first++].iov_len;
    if (done > 0) {
      left[first].iov_base = static_cast<std::byte*>(left[first].iov_base) + done;
      left[first].iov_len -= done;
    }
  }
}

}  // namespace zarr_device::stores
