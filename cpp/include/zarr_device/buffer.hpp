// Byte buffers passed between stores, codecs and the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "zarr_device/errors.hpp"

namespace zarr_device {

// A byte range of a value: `length` bytes from `offset`; a negative offset counts from the end
// (the last -offset bytes); length -1 means "to the end". Ranges past the end are cut short.
struct ByteRange {
  std::int64_t offset = 0;
  std::int64_t length = -1;
};

// Immutable bytes with shared ownership. Slicing shares the owner, so stripping a checksum or
// cutting an inner chunk out of a shard costs no copy.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<const void> owner, const std::byte* data, std::size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  static Buffer copy_of(std::span<const std::byte> bytes);
  // One copy of `pieces`, one after another.
  static Buffer joined(std::span<const std::span<const std::byte>> pieces);
  // The bytes of each buffer, in order (what Store::set_pieces and joined() take).
  static std::vector<std::span<const std::byte>> spans_of(std::span<const Buffer> buffers);
  static Buffer from_vector(std::vector<std::byte>&& bytes);
  static Buffer from_string(std::string&& bytes);

  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::span<const std::byte> span() const noexcept { return {data_, size_}; }

  // Bytes [offset, offset + length). Throws CodecError when the range is outside the buffer:
  // slicing is how encoded data is taken apart, so a bad range means bad data.
  [[nodiscard]] Buffer slice(std::size_t offset, std::size_t length) const;

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {
// Frees a ByteArray's heap memory, or its mapping of `mapped` bytes (large arrays are mapped as
// huge pages).
struct FreeBytes {
  std::size_t mapped = 0;
  void operator()(std::byte* data) const noexcept;
};
}  // namespace detail

// Uninitialised bytes with one owner, written once and then frozen into a Buffer. Allocation
// failure raises OutOfMemoryError naming the size.
class ByteArray {
 public:
  ByteArray() = default;
  explicit ByteArray(std::size_t size);

  [[nodiscard]] std::byte* data() noexcept { return data_.get(); }
  [[nodiscard]] const std::byte* data() const noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> span() noexcept { return {data_.get(), size_}; }

  // Keeps the first `size` bytes (for codecs that allocate a bound and write less).
  void shrink(std::size_t size);
  [[nodiscard]] Buffer freeze() &&;

 private:
  std::unique_ptr<std::byte[], detail::FreeBytes> data_;
  std::size_t size_ = 0;
};

}  // namespace zarr_device
