#include "zarr_device/buffer.hpp"

#include <new>

namespace zarr_device {

Buffer Buffer::copy_of(std::span<const std::byte> bytes) {
  ByteArray array(bytes.size());
  if (!bytes.empty()) std::memcpy(array.data(), bytes.data(), bytes.size());
  return std::move(array).freeze();
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

ByteArray::ByteArray(std::size_t size) : size_(size) {
  if (size == 0) return;
  try {
    data_ = std::make_unique_for_overwrite<std::byte[]>(size);
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
