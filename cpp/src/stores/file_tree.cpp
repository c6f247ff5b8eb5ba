#include "stores/file_tree.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "stores/file_io.hpp"

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define ZARR_DEVICE_HAVE_OPENAT2 1
#endif

namespace zarr_device::stores {
namespace {

constexpr int kMaxLinks = 40;  // as the kernel's own resolution

#ifdef ZARR_DEVICE_HAVE_OPENAT2
int openat2_beneath(int dir, const char* path, int flags, mode_t mode) {
  open_how how{};
  how.flags = static_cast<std::uint64_t>(flags) | O_CLOEXEC;
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) how.mode = mode;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = 0;
  do {
    fd = ::syscall(SYS_openat2, dir, path, &how, sizeof how);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  return static_cast<int>(fd);
}
#endif

// The components of `path` that name something, without empty ones and ".".
std::vector<std::string> components(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

void push_components(std::deque<std::string>& todo, std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    parts.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  todo.insert(todo.begin(), parts.begin(), parts.end());
}

}  // namespace

FileHandle& FileHandle::operator=(FileHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileHandle::~FileHandle() {
  // Keeps errno: handles close on the way out of calls that report failures through it.
  const int saved = errno;
  if (fd_ >= 0) ::close(fd_);
  errno = saved;
}

FileTree::FileTree(std::filesystem::path root, Resolver resolver)
    : root_(std::move(root)), resolver_(resolver) {}

Resolver FileTree::best_resolver() {
#ifdef ZARR_DEVICE_HAVE_OPENAT2
  static const Resolver best = [] {
    const int fd = openat2_beneath(AT_FDCWD, ".", O_PATH | O_DIRECTORY, 0);
    if (fd < 0) return Resolver::kWalk;  // ENOSYS (old kernel) or a sandbox refusing it
    ::close(fd);
    return Resolver::kOpenat2;
  }();
  return best;
#else
  return Resolver::kWalk;
#endif
}

std::optional<FileTree> FileTree::with_root_held() const {
  if (held_) return *this;
  // The root itself is the caller's to choose: it is opened as given, links and all.
  FileHandle root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return std::nullopt;
  FileTree tree(root_, resolver_);
  tree.held_ = std::make_shared<const FileHandle>(std::move(root));
  return tree;
}

int FileTree::open(std::string_view path, int flags, mode_t mode) const {
  const int fd = open_once(path, flags, mode);
  if (fd >= 0 || errno != EMFILE || !raise_open_file_limit()) return fd;
  return open_once(path, flags, mode);
}

int FileTree::open_once(std::string_view path, int flags, mode_t mode) const {
  // Opening the root's path for every key does not scale across threads: they contend for the
  // root directory's entry, so more threads opened chunk files no sooner that way, and a held
  // root opened them sooner (the benchmark notebook, "Finding chunk files: the root held for a
  // read, sizes from a stat").
  FileHandle opened;
  if (!held_) {
    opened = FileHandle(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!opened.valid()) return -1;
  }
  const int root = held_ ? held_->get() : opened.get();
#ifdef ZARR_DEVICE_HAVE_OPENAT2
  if (resolver_ == Resolver::kOpenat2) {
    const std::string p = path.empty() ? std::string(".") : std::string(path);
    const int fd = openat2_beneath(root, p.c_str(), flags, mode);
    // RESOLVE_BENEATH refuses every absolute link, even one into the tree: the walk follows
    // those (and refuses the rest with EXDEV again).
    if (fd >= 0 || errno != EXDEV) return fd;
    return walk(root, path, flags, mode);
  }
#endif
  return walk(root, path, flags, mode);
}

bool FileTree::stat_unchecked(std::string_view path, struct stat& st) const {
  FileHandle opened;
  if (!held_) {
    opened = FileHandle(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!opened.valid()) return false;
  }
  const std::string p = path.empty() ? std::string(".") : std::string(path);
  return ::fstatat(held_ ? held_->get() : opened.get(), p.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

int FileTree::walk(int root, std::string_view path, int flags, mode_t mode) const {
  std::vector<FileHandle> entered;  // directories below the root, innermost last
  const auto current = [&] { return entered.empty() ? root : entered.back().get(); };
  std::deque<std::string> todo;
  if (!path.empty()) push_components(todo, path);
  int links = 0;
  while (!todo.empty()) {
    const std::string part = std::move(todo.front());
    todo.pop_front();
    if (part.empty() || part == ".") continue;  // only from link targets: paths are validated
    if (part == "..") {
      if (entered.empty()) {
        errno = EXDEV;  // climbing out of the root
        return -1;
      }
      entered.pop_back();
      continue;
    }
    const bool last = todo.empty();
    int fd = -1;
    do {
      fd = last ? ::openat(current(), part.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
                : ::openat(current(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
      if (last) return fd;
      entered.emplace_back(fd);
      continue;
    }
    const int err = errno;
    if (err != ELOOP && err != ENOTDIR) {
      errno = err;
      return -1;
    }
    // A symbolic link (O_NOFOLLOW refused it), or really not a directory: ask for the link.
    char target[4096];
    const ssize_t n = ::readlinkat(current(), part.c_str(), target, sizeof target);
    if (n < 0) {
      errno = err;
      return -1;
    }
    if (static_cast<std::size_t>(n) == sizeof target || ++links > kMaxLinks) {
      errno = ELOOP;
      return -1;
    }
    const std::string_view link(target, static_cast<std::size_t>(n));
    if (link.empty()) {
      errno = ENOENT;  // as the kernel resolves an empty link
      return -1;
    }
    if (link.front() == '/') {
      // An absolute link: followed when it names a path beneath the root, from the root held
      // here, one component at a time like any other; refused otherwise.
      auto inside = beneath_root(root, link);
      if (!inside) {
        errno = EXDEV;
        return -1;
      }
      entered.clear();
      push_components(todo, *inside);
      continue;
    }
    push_components(todo, link);  // resolved from the link's own directory, as the kernel does
  }
  // Everything consumed ("" or a link ending in a directory): the directory we are in.
  int fd = -1;
  do {
    fd = ::openat(current(), ".", (flags & ~O_CREAT) | O_CLOEXEC, 0);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

std::optional<std::string> FileTree::beneath_root(int root, std::string_view target) const {
  // The root's path as this process reached it (its real path, from /proc) and as it was given:
  // a link made with either names the same directory. Only the string is compared; what the
  // rest names is then opened from the root's descriptor, so a root moved or replaced meanwhile
  // cannot lead anywhere else.
  std::vector<std::vector<std::string>> roots;
  const std::string self = "/proc/self/fd/" + std::to_string(root);
  char real[4096];
  const ssize_t n = ::readlink(self.c_str(), real, sizeof real);
  if (n > 0 && static_cast<std::size_t>(n) < sizeof real && real[0] == '/') {
    roots.push_back(components(std::string_view(real, static_cast<std::size_t>(n))));
  }
  std::error_code ec;
  const auto given = std::filesystem::absolute(root_, ec).lexically_normal();
  if (!ec) roots.push_back(components(given.string()));
  const auto parts = components(target);
  for (const auto& prefix : roots) {
    if (prefix.size() > parts.size() || !std::equal(prefix.begin(), prefix.end(), parts.begin())) {
      continue;
    }
    std::string rest;
    for (std::size_t i = prefix.size(); i < parts.size(); ++i) {
      if (!rest.empty()) rest += '/';
      rest += parts[i];
    }
    return rest;  // ".." in it climbs from the root, and out of it is refused as any other
  }
  return std::nullopt;
}

int FileTree::open_dir_creating(std::string_view path) const {
  int fd = open(path, O_PATH | O_DIRECTORY);
  if (fd >= 0 || errno != ENOENT) return fd;
  if (path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(root_, ec);
    if (ec) {
      errno = ec.value();
      return -1;
    }
    return open(path, O_PATH | O_DIRECTORY);
  }
  const auto slash = path.rfind('/');
  const std::string_view parent = slash == std::string_view::npos ? "" : path.substr(0, slash);
  const std::string name(slash == std::string_view::npos ? path : path.substr(slash + 1));
  const FileHandle dir(open_dir_creating(parent));
  if (!dir.valid()) return -1;
  if (::mkdirat(dir.get(), name.c_str(), 0777) != 0 && errno != EEXIST) return -1;
  // Opened again through the resolver: another writer may have made it meanwhile, or it may
  // be a link, which is then checked like any other.
  return open(path, O_PATH | O_DIRECTORY);
}

std::string temporary_name(std::string_view name) {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t salt = std::random_device{}();
  return "." + std::string(name) + ".zdtmp-" + std::to_string(::getpid()) + "-" +
         std::to_string(salt ^ counter.fetch_add(1));
}

bool is_temporary_name(std::string_view name) {
  if (name.empty() || name.front() != '.') return false;
  if (name.find(".zdtmp-") != std::string_view::npos) return true;
  // Earlier releases named them ".<name>.tmp<pid>.<n>".
  const auto at = name.rfind(".tmp");
  if (at == std::string_view::npos || at == 0) return false;
  const std::string_view rest = name.substr(at + 4);
  const auto dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == rest.size()) return false;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (i != dot && (rest[i] < '0' || rest[i] > '9')) return false;
  }
  return true;
}

bool is_internal_name(std::string_view name) {
  return name == kLockFileName || is_temporary_name(name);
}

}  // namespace zarr_device::stores
