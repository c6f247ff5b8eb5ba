#include "device_read/fifo_ring.hpp"

#include <string>

#include "zarr_device/errors.hpp"

namespace zarr_device::device_read {

FifoRing::Taken FifoRing::take(std::size_t bytes,
                               const std::function<void(std::uint64_t, bool)>& retire,
                               const std::string& where) {
  if (bytes > capacity_) {
    throw OutOfMemoryError(where + ": decoding it needs " + std::to_string(bytes) +
                           " bytes of device memory at once, more than the decode memory (" +
                           std::to_string(capacity_) + " bytes); raise decode_bytes");
  }
  const std::size_t offset = head_ + bytes <= capacity_ ? head_ : 0;
  auto overlaps = [&](const Range& r) {
    return r.offset < offset + bytes && offset < r.offset + r.bytes;
  };
  // Every range the new one overlaps is waited for (retire); the part of it the new one does not
  // cover stays live, with its event, until all of its memory has been handed out again: a later
  // range on another stream that reuses that part must wait for it too.
  for (auto it = ranges_.begin(); it != ranges_.end();) {
    if (!overlaps(*it)) {
      ++it;
      continue;
    }
    if (!it->closed) {
      throw OutOfMemoryError(where +
                             ": decoding it needs more device memory at once than the "
                             "decode memory (" +
                             std::to_string(capacity_) + " bytes) holds; raise decode_bytes");
    }
    // A live range never contains the new range's start strictly inside it (that start is 0 or
    // the end of the newest range), so what is left of it is the part past the new range's end.
    const std::size_t end_of = it->offset + it->bytes;
    const bool gone = end_of <= offset + bytes;
    retire(it->id, gone);
    if (gone) {
      it = ranges_.erase(it);
    } else {
      it->bytes = end_of - (offset + bytes);
      it->offset = offset + bytes;
      ++it;
    }
  }
  const Taken taken{offset, next_id_++};
  ranges_.push_back({offset, bytes, taken.id, false});
  head_ = offset + bytes;
  return taken;
}

void FifoRing::close(std::uint64_t id) {
  for (auto& r : ranges_) {
    if (r.id > id) break;
    r.closed = true;
  }
}

void FifoRing::reset() {
  ranges_.clear();
  head_ = 0;
}

}  // namespace zarr_device::device_read
