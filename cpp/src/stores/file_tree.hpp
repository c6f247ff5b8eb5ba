// File operations that stay inside one directory tree: every path is resolved beneath the root
// without following symbolic links out of it, so a key can never reach a file the store does not
// own, whatever links sit inside the tree.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace zarr_device::stores {

// Closes a file descriptor on scope exit.
class FileHandle {
 public:
  FileHandle() = default;
  explicit FileHandle(int fd) : fd_(fd) {}
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  FileHandle(FileHandle&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileHandle& operator=(FileHandle&& other) noexcept;
  ~FileHandle();
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// How paths are resolved beneath the root: by the kernel (openat2 with RESOLVE_BENEATH, Linux
// 5.6 and later), or by a walk that opens one component at a time with O_NOFOLLOW and resolves
// symbolic links itself. Either way, links that stay inside the tree are followed and links that
// lead out of it are refused (EXDEV). RESOLVE_BENEATH refuses every absolute link, so a path it
// refuses is walked again: the walk follows an absolute link whose target lies beneath the root's
// path (as given, or as the kernel names the directory), from the root's descriptor.
enum class Resolver { kOpenat2, kWalk };

class FileTree {
 public:
  explicit FileTree(std::filesystem::path root, Resolver resolver = best_resolver());
  // openat2 when this kernel has it (and no sandbox forbids it), else the walk.
  static Resolver best_resolver();

  [[nodiscard]] const std::filesystem::path& root() const { return root_; }
  [[nodiscard]] Resolver resolver() const { return resolver_; }

  // The same tree with its root opened now and kept open by the copy: every path the copy opens
  // is resolved from that directory, not from the root's path again. For one operation over many
  // keys (a read), whose lookups all belong to the moment it started; nullopt when the root
  // cannot be opened (errno set: ENOENT when there is none yet).
  [[nodiscard]] std::optional<FileTree> with_root_held() const;
  [[nodiscard]] bool holds_root() const { return held_ != nullptr; }

  // open(2) of `path` (relative, already validated; "" is the root itself) with `flags`; returns
  // the descriptor, or -1 with errno set: ENOENT when nothing is there (or no root yet), EXDEV
  // when the path would leave the tree through a symbolic link, ELOOP for too many links. At the
  // process's limit on open files (EMFILE), the limit is raised to the hard one and the open
  // tried again (raise_open_file_limit).
  [[nodiscard]] int open(std::string_view path, int flags, mode_t mode = 0) const;
  // fstatat(2) of `path` (relative, already validated) from the root, not following a link at its
  // end; false with errno set on failure. Links inside the path are followed wherever they lead:
  // what it finds must not be trusted as beneath the root until open() opens it.
  [[nodiscard]] bool stat_unchecked(std::string_view path, struct stat& st) const;
  // A directory descriptor (O_PATH) of `path`, creating it and its missing parents (the root
  // included) as needed; -1 with errno set on failure.
  [[nodiscard]] int open_dir_creating(std::string_view path) const;

 private:
  [[nodiscard]] int open_once(std::string_view path, int flags, mode_t mode) const;
  [[nodiscard]] int walk(int root, std::string_view path, int flags, mode_t mode) const;
  // The path below the root that the absolute link target `target` names ("" for the root
  // itself), or nullopt when it names no path beneath the root (`root`: the root's descriptor).
  [[nodiscard]] std::optional<std::string> beneath_root(int root, std::string_view target) const;

  // The root is opened for each operation, not kept: a tree whose root directory is removed and
  // made again must write into the new one, not into the removed one. Only a copy made by
  // with_root_held, which lives as long as one operation, keeps it (`held_`).
  std::filesystem::path root_;
  Resolver resolver_;
  std::shared_ptr<const FileHandle> held_;
};

// Names the local store keeps for itself inside a tree, hidden from listings: temporary files of
// writes in progress (or of writes killed part-way) and the lock file of an array.
inline constexpr std::string_view kLockFileName = ".zarr-device.lock";
[[nodiscard]] std::string temporary_name(std::string_view name);
[[nodiscard]] bool is_temporary_name(std::string_view name);
[[nodiscard]] bool is_internal_name(std::string_view name);

}  // namespace zarr_device::stores
