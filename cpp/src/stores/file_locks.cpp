#include "stores/file_locks.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstdint>

#include "stores/file_io.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::stores {

off_t lock_offset(std::string_view relative_key) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const char c : relative_key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return static_cast<off_t>(h >> 2);  // below 2^62: any off_t
}

bool lock_range(int fd, off_t start, off_t length, const std::string& what) {
  struct flock range {};
  range.l_type = F_WRLCK;
  range.l_whence = SEEK_SET;
  range.l_start = start;
  range.l_len = length;
  while (::fcntl(fd, F_OFD_SETLKW, &range) != 0) {
    if (errno == EINTR) continue;
    if (errno == EINVAL || errno == ENOLCK || errno == EOPNOTSUPP) return false;
    throw StoreError("could not lock " + what + ": " + errno_text(errno));
  }
  return true;
}

}  // namespace zarr_device::stores
