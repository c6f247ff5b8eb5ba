// One error hierarchy for the whole engine. Each class maps one to one onto a Python exception
// (see python/zarr_device/errors.py). Messages gain context (array, chunk key) as they travel up:
// a codec knows only its bytes, the engine knows which chunk of which array it was decoding.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace zarr_device {

enum class ErrorKind {
  kFormat,       // invalid or unsupported metadata, data type or layout
  kCodec,        // a chunk's bytes could not be decoded (corrupt, truncated, wrong size)
  kChecksum,     // a checksum (crc32c) did not match
  kStore,        // the store failed to read or write
  kNotFound,     // no array or group at a path
  kSelection,    // an index or selection outside the array or malformed
  kUsage,        // an invalid argument or a call not allowed in this mode (read-only, ...)
  kDevice,       // a device could not be used
  kOutOfMemory,  // an allocation failed
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind), message_(message) {}

  [[nodiscard]] ErrorKind kind() const noexcept { return kind_; }
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }

  // Prefixes the message with where the error happened, e.g. "array 'weights', chunk 'c/0/1'".
  // Called on the caught object before `throw;`, so the dynamic type is preserved.
  void add_context(std::string_view context) { message_ = std::string(context) + ": " + message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

// NOLINTBEGIN(bugprone-macro-parentheses): the arguments are a class name and an enumerator.
#define ZARR_DEVICE_DEFINE_ERROR(Name, Kind)                           \
  class Name : public Error {                                          \
   public:                                                             \
    explicit Name(const std::string& m) : Error(ErrorKind::Kind, m) {} \
                                                                       \
   protected:                                                          \
    Name(ErrorKind kind, const std::string& m) : Error(kind, m) {}     \
  };

ZARR_DEVICE_DEFINE_ERROR(FormatError, kFormat)
ZARR_DEVICE_DEFINE_ERROR(CodecError, kCodec)
ZARR_DEVICE_DEFINE_ERROR(StoreError, kStore)
ZARR_DEVICE_DEFINE_ERROR(NotFoundError, kNotFound)
ZARR_DEVICE_DEFINE_ERROR(SelectionError, kSelection)
ZARR_DEVICE_DEFINE_ERROR(UsageError, kUsage)
ZARR_DEVICE_DEFINE_ERROR(DeviceError, kDevice)
ZARR_DEVICE_DEFINE_ERROR(OutOfMemoryError, kOutOfMemory)
#undef ZARR_DEVICE_DEFINE_ERROR
// NOLINTEND(bugprone-macro-parentheses)

// A checksum mismatch is a codec error too: callers that catch CodecError see it.
class ChecksumError : public CodecError {
 public:
  explicit ChecksumError(const std::string& m) : CodecError(ErrorKind::kChecksum, m) {}
};

}  // namespace zarr_device
