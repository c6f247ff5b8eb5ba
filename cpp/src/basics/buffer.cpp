#include "zarr_device/buffer.hpp"

#include <new>

#include "basics/huge_pages.hpp"

namespace zarr_device {
namespace {

// Arrays from this size on (large stored chunks read whole, decoded chunks, codec outputs) are
// mapped as huge pages. glibc maps allocations this large itself, in 4 KiB pages faulted in anew
// each time; smaller ones it serves from its heaps, whose reuse of freed memory faults nothing in
// (a stored chunk of 7 MiB mapped anew for each read was slower than the heap's: the benchmark
// notebook, "Large chunks on the host; copies straight from the page cache").
constexpr std::size_t kMappedFrom = std::size_t{32} << 20;
constexpr std::size_t kPage = 4096;

}  // namespace

Buffer Buffer::copy_of(std::span<const std::byte> bytes) {
  ByteArray array(bytes.size());
  if (!bytes.empty()) std::memcpy(array.data(), bytes.data(), bytes.size());
  return std::move(array).freeze();
}

Buffer Buffer::joined(std::span<const std::span<const std::byte>> pieces) {
  std::size_t total = 0;
  for (const auto& piece : pieces) total += piece.size();
  ByteArray array(total);
  std::byte* at = array.data();
  for (const auto& piece : pieces) {
    if (!piece.empty()) std::memcpy(at, piece.data(), piece.size());
    at += piece.size();
  }
  return std::move(array).freeze();
}

std::vector<std::span<const std::byte>> Buffer::spans_of(std::span<const Buffer> buffers) {
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(buffers.size());
  for (const auto& buffer : buffers) spans.push_back(buffer.span());
  return spans;
}

Buffer Buffer::from_vector(std::vector<std::byte>&& bytes) {
  auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  return {owner, owner->data(), owner->size()};
}

Buffer Buffer::from_string(std::string&& bytes) {
  auto owner = std::make_shared<std::string>(std::move(bytes));
  return {owner, reinterpret_cast<const std::byte*>(owner->data()), owner->size()};
}

Buffer Buffer::slice(std::size_t offset, std::size_t length) const {
  if (offset > size_ || length > size_ - offset) {
    throw CodecError("byte range [" + std::to_string(offset) + ", " +
                     std::to_string(offset + length) + ") is outside the " + std::to_string(size_) +
                     " bytes available");
  }
  return {owner_, data_ + offset, length};
}

void detail::FreeBytes::operator()(std::byte* data) const noexcept {
  if (mapped) {
    engine::unmap_huge_pages(data, mapped);
  } else {
    delete[] data;
  }
}

ByteArray::ByteArray(std::size_t size) : size_(size) {
  if (size == 0) return;
  if (size >= kMappedFrom) {
    const std::size_t mapped = (size + kPage - 1) / kPage * kPage;
    if (std::byte* memory = engine::map_huge_pages(mapped)) {
      data_ = std::unique_ptr<std::byte[], detail::FreeBytes>(memory, detail::FreeBytes{mapped});
      return;
    }
  }
  try {
    data_ =
        std::unique_ptr<std::byte[], detail::FreeBytes>(new std::byte[size], detail::FreeBytes{});
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError("could not allocate " + std::to_string(size) + " bytes");
  }
}

void ByteArray::shrink(std::size_t size) {
  if (size < size_) size_ = size;
}

Buffer ByteArray::freeze() && {
  std::shared_ptr<std::byte[]> owner(std::move(data_));
  const std::byte* data = owner.get();
  const std::size_t size = size_;
  size_ = 0;
  return {std::shared_ptr<const void>(owner, data), data, size};
}

}  // namespace zarr_device
