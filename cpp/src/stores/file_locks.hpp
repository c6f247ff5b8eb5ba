// Locks between processes on a local file system: open-file-description locks on byte ranges of
// a file, which belong to the open file rather than the process, so that two threads of one
// process exclude each other as two processes do.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "stores/file_tree.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device::stores {

// Where the lock of one chunk sits in its array's lock file: one byte, at a place named by the
// chunk's key relative to the array (so stores rooted anywhere above the array agree).
off_t lock_offset(std::string_view relative_key);

// Takes a write lock on [start, start + length) of `fd` (length 0: to the end and beyond),
// waiting for it. Returns false when the file system has no such locks; a StoreError naming
// `what` on any other failure.
bool lock_range(int fd, off_t start, off_t length, const std::string& what);

// A lock taken with lock_range, held while the file stays open.
class FileLock final : public KeyLock {
 public:
  explicit FileLock(FileHandle file) : file_(std::move(file)) {}

 private:
  FileHandle file_;
};

}  // namespace zarr_device::stores
