// Key-value stores holding Zarr metadata and chunks. Keys are '/'-separated relative paths.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zarr_device/buffer.hpp"

namespace zarr_device {

// A byte range of a value: `length` bytes from `offset`; a negative offset counts from the end
// (the last -offset bytes); length -1 means "to the end". Ranges past the end are cut short.
struct ByteRange {
  std::int64_t offset = 0;
  std::int64_t length = -1;
};

class Store {
 public:
  virtual ~Store() = default;

  // The value (or part of it) at `key`; nullopt when there is none. Throws StoreError on failure.
  [[nodiscard]] virtual std::optional<Buffer> get(std::string_view key,
                                                  ByteRange range = {}) const = 0;
  // Reads the whole value straight into `out` when its size is out.size(). Returns the value's
  // size (when it differs from out.size(), `out` holds nothing useful) or nullopt when missing.
  // Stores that can avoid the intermediate buffer (local files) override it.
  [[nodiscard]] std::optional<std::size_t> get_into(std::string_view key,
                                                    std::span<std::byte> out) const {
    const std::span<std::byte> one[1] = {out};
    return get_into(key, std::span<const std::span<std::byte>>(one));
  }
  // The same into several pieces of memory, filled in order (a chunk read straight into the rows
  // of its region in the output). Returns the value's size; the pieces hold the value only when
  // that size is their total.
  [[nodiscard]] virtual std::optional<std::size_t> get_into(
      std::string_view key, std::span<const std::span<std::byte>> pieces) const;
  // Reads bytes [offset, offset + out.size()) of the value at `key` into `out` (cut short at its
  // end). Returns the bytes read, nullopt when there is no value. Used to fill staging buffers
  // piece by piece from many threads.
  [[nodiscard]] virtual std::optional<std::size_t> get_range_into(std::string_view key,
                                                                  std::uint64_t offset,
                                                                  std::span<std::byte> out) const;
  // Stores a value atomically: readers see the old value or the new one, never a part.
  virtual void set(std::string_view key, std::span<const std::byte> value) = 0;
  // Removes a value; no error when there is none.
  virtual void erase(std::string_view key) = 0;
  // Removes every key under `prefix` (a directory-like path; "" is everything).
  virtual void erase_prefix(std::string_view prefix) = 0;
  // The names directly under `prefix` (values and sub-prefixes), without the prefix, sorted.
  [[nodiscard]] virtual std::vector<std::string> list_dir(std::string_view prefix) const = 0;
  [[nodiscard]] virtual bool exists(std::string_view key) const;
  // A hint that bytes [offset, offset + length) of `key` will be read soon (local files: start
  // reading them from the disk now). Does nothing by default.
  virtual void will_need(std::string_view /*key*/, std::uint64_t /*offset*/,
                         std::uint64_t /*length*/) const {}
  // The size of the value at `key`, nullopt when there is none. The default reads the value.
  [[nodiscard]] virtual std::optional<std::uint64_t> size(std::string_view key) const;
  // Where the store is, for messages ("file:///data/x.zarr", "memory://").
  [[nodiscard]] virtual std::string describe() const = 0;
};

// How a local store reads: through the page cache, or around it (O_DIRECT: for cold data read once,
// where the cache's copy is work and memory spent for nothing). Where the file system has no
// O_DIRECT, direct reads fall back to the cache. kGds: reads into GPU memory go through cuFile
// (GPUDirect Storage: DMA from the drive where the driver offers it); other reads are direct.
enum class LocalIo { kBuffered, kDirect, kGds };

// An optional capability of stores whose values are files: where a value lives and how it should
// be read, for readers that move file bytes themselves (GPUDirect Storage).
class FileBacked {
 public:
  virtual ~FileBacked() = default;
  [[nodiscard]] virtual std::filesystem::path file_path(std::string_view key) const = 0;
  [[nodiscard]] virtual LocalIo io() const = 0;
};

// A directory on a local file system. Values are files; writes go to a temporary file that is
// then renamed over the key, so a crash never leaves a half-written chunk visible.
std::shared_ptr<Store> make_local_store(const std::filesystem::path& root,
                                        LocalIo io = LocalIo::kBuffered);

// An in-process map of keys to values.
std::shared_ptr<Store> make_memory_store();

// Throws UsageError for keys that would leave the store ("..", a leading '/').
void validate_key(std::string_view key);

// Joins path components with '/', skipping empty ones.
std::string join_key(std::string_view a, std::string_view b);

}  // namespace zarr_device
