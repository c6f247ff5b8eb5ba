#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <system_error>
#include <utility>

#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

namespace fs = std::filesystem;

// Closes a file descriptor on scope exit.
class FileHandle {
 public:
  explicit FileHandle(int fd) : fd_(fd) {}
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  FileHandle(FileHandle&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileHandle& operator=(FileHandle&&) = delete;
  ~FileHandle() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string errno_text(int err) { return std::system_category().message(err); }

class LocalStore final : public Store, public FileBacked {
 public:
  LocalStore(fs::path root, LocalIo io)
      : root_(std::move(root)), io_(io), direct_(io != LocalIo::kBuffered) {}

  fs::path file_path(std::string_view key) const override { return resolve(key); }
  LocalIo io() const override { return io_; }

  std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
    auto value = open_value(key);
    if (!value) return std::nullopt;
    const auto size = static_cast<std::int64_t>(value->size);
    std::int64_t start = range.offset < 0 ? std::max<std::int64_t>(0, size + range.offset)
                                          : std::min(range.offset, size);
    std::int64_t length =
        range.offset < 0 ? size - start : (range.length < 0 ? size - start : range.length);
    length = std::min(length, size - start);
    ByteArray out(static_cast<std::size_t>(length));
    const auto n = read_at(value->file.get(), value->direct, out.span(), start, value->path);
    out.shrink(n);
    return std::move(out).freeze();
  }

  using Store::get_into;
  std::optional<std::size_t> get_into(std::string_view key,
                                      std::span<const std::span<std::byte>> pieces) const override {
    auto value = open_value(key);
    if (!value) return std::nullopt;
    std::size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    if (value->size != total) return value->size;
    const int fd = value->file.get();
    const fs::path& path = value->path;
    if (value->direct) {
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
      while (got < batch) {
        const auto n = ::preadv(fd, vec.data() + first, static_cast<int>(vec.size() - first),
                                static_cast<off_t>(done + got));
        if (n < 0) {
          if (errno == EINTR) continue;
          throw StoreError("could not read " + path.string() + ": " + errno_text(errno));
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

  std::optional<std::uint64_t> size(std::string_view key) const override {
    const auto path = resolve(key);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
      throw StoreError("could not stat " + path.string() + ": " + errno_text(errno));
    }
    if (S_ISDIR(st.st_mode)) return std::nullopt;  // a prefix, not a value
    if (!S_ISREG(st.st_mode)) throw StoreError(path.string() + " is not a regular file");
    return static_cast<std::uint64_t>(st.st_size);
  }

  std::optional<std::size_t> get_range_into(std::string_view key, std::uint64_t offset,
                                            std::span<std::byte> out) const override {
    auto value = open_value(key);
    if (!value) return std::nullopt;
    if (offset >= value->size) return 0;
    return read_at(value->file.get(), value->direct,
                   out.first(std::min<std::uint64_t>(out.size(), value->size - offset)),
                   static_cast<std::int64_t>(offset), value->path);
  }

  void will_need(std::string_view key, std::uint64_t offset, std::uint64_t length) const override {
    const auto path = resolve(key);
    FileHandle file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (file.get() < 0) return;  // only a hint
    ::posix_fadvise(file.get(), static_cast<off_t>(offset), static_cast<off_t>(length),
                    POSIX_FADV_WILLNEED);
  }

  void set(std::string_view key, std::span<const std::byte> value) override {
    const auto path = resolve(key);
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec)
      throw StoreError("could not create directory " + path.parent_path().string() + ": " +
                       ec.message());
    // A hidden temporary beside the target, renamed over it once complete.
    static std::atomic<std::uint64_t> counter{0};
    static const std::uint64_t salt = std::random_device{}();
    const auto tmp =
        path.parent_path() / ("." + path.filename().string() + ".tmp" + std::to_string(::getpid()) +
                              "." + std::to_string(salt ^ counter.fetch_add(1)));
    FileHandle file(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (file.get() < 0) {
      throw StoreError("could not create " + tmp.string() + ": " + errno_text(errno));
    }
    std::size_t done = 0;
    while (done < value.size()) {
      const auto n = ::write(file.get(), value.data() + done, value.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        const int err = errno;
        ::unlink(tmp.c_str());
        throw StoreError("could not write " + path.string() + ": " + errno_text(err));
      }
      done += static_cast<std::size_t>(n);
    }
    if (::close(file.release()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw StoreError("could not write " + path.string() + ": " + errno_text(err));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw StoreError("could not rename into " + path.string() + ": " + errno_text(err));
    }
  }

  void erase(std::string_view key) override {
    const auto path = resolve(key);
    // Erasing a prefix as if it were a key does nothing, as in the memory store.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR && errno != EISDIR &&
        errno != EPERM) {
      throw StoreError("could not remove " + path.string() + ": " + errno_text(errno));
    }
  }

  void erase_prefix(std::string_view prefix) override {
    const auto path = resolve(prefix);
    std::error_code ec;
    if (prefix.empty()) {
      for (const auto& entry : fs::directory_iterator(path, ec)) fs::remove_all(entry.path(), ec);
    } else {
      fs::remove_all(path, ec);
    }
    if (ec && ec != std::errc::no_such_file_or_directory) {
      throw StoreError("could not remove " + path.string() + ": " + ec.message());
    }
  }

  std::vector<std::string> list_dir(std::string_view prefix) const override {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(resolve(prefix), ec)) {
      auto name = entry.path().filename().string();
      if (name.starts_with(".") && name.find(".tmp") != std::string::npos) continue;
      names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string describe() const override { return "file://" + root_.string(); }

 private:
  fs::path resolve(std::string_view key) const {
    validate_key(key);
    return key.empty() ? root_ : root_ / fs::path(key);
  }

  // A value opened for reading, with its size.
  struct OpenValue {
    FileHandle file;
    std::size_t size;
    bool direct;
    fs::path path;
  };
  // nullopt when there is no value at `key` (no file, or a directory: a prefix of keys).
  std::optional<OpenValue> open_value(std::string_view key) const {
    auto path = resolve(key);
    bool direct = false;
    FileHandle file(open_for_read(path, direct));
    if (file.get() < 0) return std::nullopt;
    const auto size = file_size(file.get(), path);
    if (!size) return std::nullopt;
    return OpenValue{std::move(file), *size, direct, std::move(path)};
  }

  // Opens a value for reading, bypassing the page cache in direct mode where the file system
  // allows it (`direct` says whether it did); -1 when there is no such file.
  int open_for_read(const fs::path& path, bool& direct) const {
    direct = false;
    if (direct_) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (fd >= 0) {
        direct = true;
        return fd;
      }
      if (errno != EINVAL) {  // EINVAL: no O_DIRECT on this file system; read through the cache
        if (errno == ENOENT || errno == ENOTDIR) return -1;
        throw StoreError("could not open " + path.string() + ": " + errno_text(errno));
      }
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return -1;
      throw StoreError("could not open " + path.string() + ": " + errno_text(errno));
    }
    return fd;
  }

  // The size of an open file; nullopt for a directory (a prefix of keys, not a value).
  static std::optional<std::size_t> file_size(int fd, const fs::path& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      throw StoreError("could not stat " + path.string() + ": " + errno_text(errno));
    }
    if (S_ISDIR(st.st_mode)) return std::nullopt;
    if (!S_ISREG(st.st_mode)) throw StoreError(path.string() + " is not a regular file");
    return static_cast<std::size_t>(st.st_size);
  }

  // Reads until `out` is full or the file ends; returns the bytes read.
  static std::size_t read_at(int fd, bool direct, std::span<std::byte> out, std::int64_t offset,
                             const fs::path& path) {
    if (direct) {
      std::byte* to = out.data();
      return read_direct(fd, static_cast<std::uint64_t>(offset), out.size(), path,
                         [&](const std::byte* data, std::size_t n) {
                           std::memcpy(to, data, n);
                           to += n;
                         });
    }
    std::size_t done = 0;
    while (done < out.size()) {
      const auto n = ::pread(fd, out.data() + done, out.size() - done,
                             static_cast<off_t>(offset + static_cast<std::int64_t>(done)));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw StoreError("could not read " + path.string() + ": " + errno_text(errno));
      }
      if (n == 0) break;
      done += static_cast<std::size_t>(n);
    }
    return done;
  }

  // O_DIRECT reads must start, end and land on block boundaries: read the aligned blocks around
  // [offset, offset + length) into a per-thread aligned buffer and hand `sink` the bytes asked
  // for, in order. Returns how many it handed over (fewer at the end of the file).
  template <typename Sink>
  static std::size_t read_direct(int fd, std::uint64_t offset, std::size_t length,
                                 const fs::path& path, Sink sink) {
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
      if (n < 0) throw StoreError("could not read " + path.string() + ": " + errno_text(errno));
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

  fs::path root_;
  LocalIo io_;
  bool direct_ = false;
};

}  // namespace

std::shared_ptr<Store> make_local_store(const std::filesystem::path& root, LocalIo io) {
  return std::make_shared<LocalStore>(root, io);
}

}  // namespace zarr_device
