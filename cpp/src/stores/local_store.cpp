// A directory on a local file system as a store. Every path is opened beneath the root
// (file_tree.hpp); only regular files are values; writes replace values atomically; read-modify-
// writes are serialised across threads and processes by open-file-description locks.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <utility>

#include "stores/file_io.hpp"
#include "stores/file_locks.hpp"
#include "stores/file_tree.hpp"
#include "stores/process_locks.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

namespace fs = std::filesystem;
using stores::errno_text;
using stores::FileHandle;
using stores::FileLock;
using stores::FileTree;
using stores::lock_offset;
using stores::lock_range;
using stores::read_range;

// Readers hold one open file per shard for the length of a read, and a GPU read may hold many:
// lift the soft limit on open files to the hard one, as runtimes that open many files do.
void raise_open_file_limit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
      limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, rlim_t{1} << 20);
      ::setrlimit(RLIMIT_NOFILE, &limit);
    }
  });
}

// A value opened for reading: the file stays open, so every range comes from this version.
struct OpenFile {
  FileHandle file;
  std::uint64_t size = 0;
  bool direct = false;
  std::string path;  // for messages
};

class FileValueReader final : public ValueReader {
 public:
  explicit FileValueReader(OpenFile file) : file_(std::move(file)) {}
  std::uint64_t size() const override { return file_.size; }
  std::size_t read_into(std::uint64_t offset, std::span<std::byte> out) const override {
    if (offset >= file_.size) return 0;
    out = out.first(
        static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), file_.size - offset)));
    return read_range(file_.file.get(), file_.direct, out, offset, file_.path);
  }
  int open_file(bool direct) const override {
    // Through /proc: the same file (this version, even once replaced), with flags of its own.
    const std::string self = "/proc/self/fd/" + std::to_string(file_.file.get());
    if (direct) {
      const int fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (fd >= 0 || errno != EINVAL) return fd;
    }
    return ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
  }

 private:
  OpenFile file_;
};

class LocalStore final : public Store, public FileBacked, public HeldRoot {
 public:
  LocalStore(fs::path root, LocalStoreOptions options)
      : tree_(std::move(root)), options_(options) {}
  LocalStore(stores::FileTree tree, LocalStoreOptions options)
      : tree_(std::move(tree)), options_(options) {}

  std::shared_ptr<const Store> with_root_held() const override {
    LocalStoreOptions options = options_;
    options.read_only = true;
    auto held = tree_.with_root_held();
    if (!held) {
      // No root yet: nothing is stored, and the view finds what a store opening its root for
      // each key would.
      if (errno == ENOENT || errno == ENOTDIR) return std::make_shared<LocalStore>(tree_, options);
      fail("open", "", errno);
    }
    return std::make_shared<LocalStore>(std::move(*held), options);
  }

  LocalIo io() const override { return options_.io; }
  bool read_only() const override { return options_.read_only; }
  std::string describe() const override { return "file://" + tree_.root().string(); }

  int open_file(std::string_view key, bool direct) const override {
    auto value = open_value(key, direct);
    return value ? value->file.release() : -1;
  }

  std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
    auto value = open_value(key, direct());
    if (!value) return std::nullopt;
    const auto size = static_cast<std::int64_t>(value->size);
    const std::int64_t start = range.offset < 0 ? std::max<std::int64_t>(0, size + range.offset)
                                                : std::min(range.offset, size);
    std::int64_t length =
        range.offset < 0 ? size - start : (range.length < 0 ? size - start : range.length);
    length = std::min(length, size - start);
    ByteArray out(static_cast<std::size_t>(length));
    out.shrink(read_range(value->file.get(), value->direct, out.span(),
                          static_cast<std::uint64_t>(start), value->path));
    return std::move(out).freeze();
  }

  std::shared_ptr<const ValueReader> open(std::string_view key) const override {
    auto value = open_value(key, direct());
    if (!value) return nullptr;
    return std::make_shared<FileValueReader>(std::move(*value));
  }

  using Store::get_into;
  std::optional<std::size_t> get_into(std::string_view key,
                                      std::span<const std::span<std::byte>> pieces) const override {
    auto value = open_value(key, direct());
    if (!value) return std::nullopt;
    std::size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    if (value->size != total) return value->size;
    return stores::read_pieces(value->file.get(), value->direct, pieces, value->path);
  }

  std::optional<std::uint64_t> size(std::string_view key) const override {
    auto value = open_value(key, false);
    if (!value) return std::nullopt;
    return value->size;
  }

  std::optional<std::uint64_t> size_to_plan(std::string_view key) const override {
    // A stat instead of an open: no descriptor to make and close, which is most of an open's cost
    // when many threads do it (the benchmark notebook, "Finding chunk files: the root held for a
    // read, sizes from a stat"). The stat may pass through links inside the path wherever they
    // lead; what it finds is only planned for, and the read opens it beneath the root and checks
    // its size. Anything but a regular file (nothing there, a link at the end, a directory, a FIFO)
    // is what size() says, with its errors.
    validate_key(key);
    struct stat st {};
    if (tree_.stat_unchecked(key, st) && S_ISREG(st.st_mode)) {
      return static_cast<std::uint64_t>(st.st_size);
    }
    return size(key);
  }

  bool exists(std::string_view key) const override {
    validate_key(key);
    const FileHandle file(tree_.open(key, O_RDONLY | O_NONBLOCK | O_NOCTTY));
    if (!file.valid()) {
      if (errno == ENOENT || errno == ENOTDIR) return false;
      fail("open", key, errno);
    }
    struct stat st {};
    return ::fstat(file.get(), &st) == 0 && S_ISREG(st.st_mode);
  }

  std::optional<std::size_t> get_range_into(std::string_view key, std::uint64_t offset,
                                            std::span<std::byte> out) const override {
    auto value = open_value(key, direct());
    if (!value) return std::nullopt;
    if (offset >= value->size) return 0;
    return read_range(value->file.get(), value->direct,
                      out.first(std::min<std::uint64_t>(out.size(), value->size - offset)), offset,
                      value->path);
  }

  void will_need(std::string_view key, std::uint64_t offset, std::uint64_t length) const override {
    validate_key(key);
    const FileHandle file(tree_.open(key, O_RDONLY | O_NONBLOCK | O_NOCTTY));
    if (!file.valid()) return;  // only a hint
    ::posix_fadvise(file.get(), static_cast<off_t>(offset), static_cast<off_t>(length),
                    POSIX_FADV_WILLNEED);
  }

  void set(std::string_view key, std::span<const std::byte> value) override {
    set_pieces(key, std::span<const std::span<const std::byte>>(&value, 1));
  }

  // The pieces go to the file as they are (writev): a shard's chunks are not copied into one
  // buffer first.
  void set_pieces(std::string_view key,
                  std::span<const std::span<const std::byte>> pieces) override {
    check_writable();
    validate_key(key);
    const FileHandle dir(tree_.open_dir_creating(path_parent(key)));
    if (!dir.valid()) fail("create the directory of", key, errno);
    write_replacing(dir.get(), key, pieces);
  }

  void erase(std::string_view key) override {
    check_writable();
    validate_key(key);
    const FileHandle dir(tree_.open(path_parent(key), O_PATH | O_DIRECTORY));
    if (!dir.valid()) {
      if (errno == ENOENT || errno == ENOTDIR) return;
      fail("open the directory of", key, errno);
    }
    const std::string name(path_name(key));
    // Erasing a prefix as if it were a key does nothing, as in the memory store.
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT && errno != EISDIR &&
        errno != EPERM) {
      fail("remove", key, errno);
    }
  }

  void erase_prefix(std::string_view prefix) override {
    check_writable();
    validate_path(prefix);
    if (prefix.empty()) {
      const FileHandle root(tree_.open("", O_RDONLY | O_DIRECTORY));
      if (!root.valid()) {
        if (errno == ENOENT) return;
        fail("open", prefix, errno);
      }
      remove_contents(root.get(), "");
      return;
    }
    const FileHandle dir(tree_.open(path_parent(prefix), O_PATH | O_DIRECTORY));
    if (!dir.valid()) {
      if (errno == ENOENT || errno == ENOTDIR) return;
      fail("open the directory of", prefix, errno);
    }
    remove_entry(dir.get(), std::string(path_name(prefix)), prefix);
  }

  std::vector<std::string> list_dir(std::string_view prefix) const override {
    validate_path(prefix);
    FileHandle dir(tree_.open(prefix, O_RDONLY | O_DIRECTORY));
    if (!dir.valid()) {
      if (errno == ENOENT || errno == ENOTDIR) return {};
      fail("list", prefix, errno);
    }
    std::vector<std::string> names = entries(std::move(dir), prefix);
    std::erase_if(names, [](const std::string& n) { return stores::is_internal_name(n); });
    std::sort(names.begin(), names.end());
    return names;
  }

  std::unique_ptr<KeyLock> lock_chunk(std::string_view node, std::string_view key) const override {
    check_writable();
    validate_path(node);
    validate_key(key);
    // The lock file lives in the array's directory, so that stores rooted anywhere above the
    // array name the same file.
    const FileHandle dir(tree_.open_dir_creating(node));
    if (!dir.valid()) fail("create the directory of", node, errno);
    const std::string lock_key = join_key(node, stores::kLockFileName);
    FileHandle file(::openat(dir.get(), std::string(stores::kLockFileName).c_str(),
                             O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!file.valid()) fail("open the lock file", lock_key, errno);
    const std::string_view relative =
        node.empty() ? key : key.substr(std::min(key.size(), node.size() + 1));
    if (!lock_range(file.get(), lock_offset(relative), 1, path_of(lock_key))) {
      return stores::lock_in_process(describe() + '\0' + std::string(key));
    }
    return std::make_unique<FileLock>(std::move(file));
  }

  std::unique_ptr<KeyLock> lock_document(std::string_view key) const override {
    check_writable();
    validate_key(key);
    // The document's own file is locked. Its writers replace it (rename), so after waiting for
    // the lock we check that the file locked is still the one at the key; if not, the new one's
    // lock is the one to take.
    for (int attempt = 0; attempt < 1000; ++attempt) {
      FileHandle file(tree_.open(key, O_RDWR | O_NONBLOCK | O_NOCTTY));
      if (!file.valid()) {
        if (errno == ENOENT) return stores::lock_in_process(describe() + '\0' + std::string(key));
        fail("open", key, errno);
      }
      struct stat locked {};
      if (::fstat(file.get(), &locked) != 0) fail("stat", key, errno);
      if (!S_ISREG(locked.st_mode)) throw StoreError(path_of(key) + " is not a regular file");
      if (!lock_range(file.get(), 0, 0, path_of(key))) {
        return stores::lock_in_process(describe() + '\0' + std::string(key));
      }
      const FileHandle now(tree_.open(key, O_RDONLY | O_NONBLOCK | O_NOCTTY));
      struct stat current {};
      if (now.valid() && ::fstat(now.get(), &current) == 0 && current.st_dev == locked.st_dev &&
          current.st_ino == locked.st_ino) {
        return std::make_unique<FileLock>(std::move(file));
      }
    }
    throw StoreError("could not lock " + path_of(key) + ": it keeps being replaced");
  }

 private:
  [[nodiscard]] bool direct() const { return options_.io != LocalIo::kBuffered; }
  [[nodiscard]] std::string path_of(std::string_view key) const {
    return key.empty() ? tree_.root().string() : (tree_.root() / fs::path(key)).string();
  }

  [[noreturn]] void fail(std::string_view action, std::string_view key, int err) const {
    const std::string where = path_of(key);
    switch (err) {
      case EXDEV:
        throw StoreError("key '" + std::string(key) + "' of " + describe() +
                         " leads out of the store through a symbolic link");
      case ELOOP:
        throw StoreError("key '" + std::string(key) + "' of " + describe() +
                         " goes through too many symbolic links");
      case ENOTDIR:
        throw StoreError("could not " + std::string(action) + " " + where +
                         ": a part of its path is a file where a directory should be");
      default:
        throw StoreError("could not " + std::string(action) + " " + where + ": " + errno_text(err));
    }
  }

  // Opens the value at `key` for reading; nullopt when there is none. A directory, FIFO, socket
  // or device where a value should be is an error, not an absent value: reading it as the fill
  // value would return silently wrong data. O_NONBLOCK keeps a FIFO from blocking the open.
  std::optional<OpenFile> open_value(std::string_view key, bool direct) const {
    validate_key(key);
    constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_NOCTTY;
    OpenFile value;
    if (direct) {
      value.file = FileHandle(tree_.open(key, kFlags | O_DIRECT));
      value.direct = value.file.valid();
      // EINVAL: no O_DIRECT on this file system; read through the cache instead.
      if (!value.file.valid() && errno != EINVAL) {
        if (errno == ENOENT) return std::nullopt;
        fail("open", key, errno);
      }
    }
    if (!value.file.valid()) {
      value.file = FileHandle(tree_.open(key, kFlags));
      if (!value.file.valid()) {
        if (errno == ENOENT) return std::nullopt;
        fail("open", key, errno);
      }
    }
    value.path = path_of(key);
    struct stat st {};
    if (::fstat(value.file.get(), &st) != 0) fail("stat", key, errno);
    if (S_ISDIR(st.st_mode)) {
      throw StoreError(value.path + " is a directory where a value should be");
    }
    if (!S_ISREG(st.st_mode)) {
      throw StoreError(value.path + " is not a regular file (a FIFO, socket or device)");
    }
    value.size = static_cast<std::uint64_t>(st.st_size);
    return value;
  }

  // Writes the value into a file of its own in `dir`, then gives it the key's name: a new value
  // is linked under it at once; an existing one is replaced by a rename from a hidden name.
  void write_replacing(int dir, std::string_view key,
                       std::span<const std::span<const std::byte>> value) const {
    const std::string name(path_name(key));
    const std::string temporary = stores::temporary_name(name);
    if (unnamed_files_.load(std::memory_order_relaxed)) {
      // An unnamed file (O_TMPFILE) gets a name only once complete. A new value's file is
      // linked under the key's name directly: a write killed at any point leaves nothing
      // behind. Linux cannot link a file over an existing name, so a value that replaces another
      // is linked under a hidden name first and renamed over the old one: a write killed between
      // those two calls leaves that hidden file (fsck --fix removes it).
      FileHandle file(::openat(dir, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644));
      if (file.valid()) {
        stores::write_pieces(file.get(), value, path_of(key));
        const std::string self = "/proc/self/fd/" + std::to_string(file.get());
        if (::linkat(AT_FDCWD, self.c_str(), dir, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return;
        if (errno == EEXIST &&
            ::linkat(AT_FDCWD, self.c_str(), dir, temporary.c_str(), AT_SYMLINK_FOLLOW) == 0) {
          rename_into(dir, temporary, name, key);
          return;
        }
        if (errno != ENOENT) fail("write", key, errno);
        unnamed_files_ = false;  // no /proc: name the file from the start
      } else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
        unnamed_files_ = false;  // this file system has no unnamed files
      } else {
        fail("create a file for", key, errno);
      }
    }
    FileHandle file(::openat(dir, temporary.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!file.valid()) fail("create a file for", key, errno);
    try {
      stores::write_pieces(file.get(), value, path_of(key));
      if (::close(file.release()) != 0) fail("write", key, errno);
    } catch (...) {
      ::unlinkat(dir, temporary.c_str(), 0);
      throw;
    }
    rename_into(dir, temporary, name, key);
  }

  void rename_into(int dir, const std::string& temporary, const std::string& name,
                   std::string_view key) const {
    if (::renameat(dir, temporary.c_str(), dir, name.c_str()) != 0) {
      const int err = errno;
      ::unlinkat(dir, temporary.c_str(), 0);
      if (err == EISDIR || err == ENOTEMPTY || err == EEXIST) {
        throw StoreError(path_of(key) + " is a directory where a value should be");
      }
      fail("replace", key, err);
    }
  }

  // The names in an open directory (which the call takes over).
  std::vector<std::string> entries(FileHandle dir, std::string_view where) const {
    DIR* stream = ::fdopendir(dir.get());
    if (!stream) fail("list", where, errno);
    dir.release();
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(stream)) {
      const std::string_view name(entry->d_name);
      if (name != "." && name != "..") names.emplace_back(name);
    }
    const int err = errno;
    ::closedir(stream);
    if (err != 0) fail("list", where, err);
    return names;
  }

  // Removes `name` in `dir` (a file, a link or a whole directory), never following links.
  void remove_entry(int dir, const std::string& name, std::string_view key) const {
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return;
      fail("stat", key, errno);
    }
    if (S_ISDIR(st.st_mode)) {
      const FileHandle sub(
          ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub.valid()) {
        if (errno == ENOENT) return;
        fail("open", key, errno);
      }
      remove_contents(sub.get(), key);
      if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
        fail("remove", key, errno);
      }
    } else if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
      fail("remove", key, errno);
    }
  }

  void remove_contents(int dir, std::string_view key) const {
    for (const auto& name : entries(FileHandle(::dup(dir)), key)) {
      remove_entry(dir, name, join_key(key, name));
    }
  }

  FileTree tree_;
  LocalStoreOptions options_;
  mutable std::atomic<bool> unnamed_files_{true};
};

}  // namespace

std::shared_ptr<Store> make_local_store(const std::filesystem::path& root,
                                        LocalStoreOptions options) {
  raise_open_file_limit();
  return std::make_shared<LocalStore>(root, options);
}

}  // namespace zarr_device
