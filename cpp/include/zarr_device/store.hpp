// Key-value stores holding Zarr metadata and chunks. Keys are '/'-separated relative paths,
// checked by store_path.hpp's rule at every store entry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zarr_device/buffer.hpp"
#include "zarr_device/store_path.hpp"

namespace zarr_device {

// One version of a stored value, open for reading. Every range read through it comes from that
// version, whatever rewrites of the key happen meanwhile (local files: one open file; memory: the
// value as it was), so a shard's index and its chunks always agree.
class ValueReader {
 public:
  virtual ~ValueReader() = default;
  [[nodiscard]] virtual std::uint64_t size() const = 0;
  // Reads bytes [offset, offset + out.size()) into `out`, cut short at the end; returns how many.
  virtual std::size_t read_into(std::uint64_t offset, std::span<std::byte> out) const = 0;
  // Bytes [offset, offset + length) as a buffer, cut short at the end.
  [[nodiscard]] Buffer read(std::uint64_t offset, std::uint64_t length) const;
  // Many ranges (offsets and lengths at least 0), each as read() gives it. One request for all
  // of them where the store answers many ranges at once (BatchedGets); one after another here.
  [[nodiscard]] virtual std::vector<Buffer> read_many(std::span<const ByteRange> ranges) const;
  // A descriptor the caller owns, of this version's file opened anew (O_DIRECT when `direct`,
  // where the file system has it), for readers that move file bytes themselves; -1 when the
  // value is not a file.
  [[nodiscard]] virtual int open_file(bool /*direct*/) const { return -1; }
};

// Exclusive access for a read-modify-write, released when the object is destroyed.
class KeyLock {
 public:
  virtual ~KeyLock() = default;
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
  // The value at `key` opened for reading ranges of one version of it; nullptr when there is
  // none. The default reads ranges by key, with no such guarantee: stores that can keep a
  // version (files, memory) override it.
  [[nodiscard]] virtual std::shared_ptr<const ValueReader> open(std::string_view key) const;
  // Stores a value atomically: readers see the old value or the new one, never a part.
  virtual void set(std::string_view key, std::span<const std::byte> value) = 0;
  // The same for a value made of pieces, in order (a shard: its inner chunks and its index), so
  // that a store that can write them as they are needs no copy of the whole value. The default
  // joins them and calls set().
  virtual void set_pieces(std::string_view key, std::span<const std::span<const std::byte>> pieces);
  // Removes a value; no error when there is none.
  virtual void erase(std::string_view key) = 0;
  // Removes every key under `prefix` (a directory-like path; "" is everything).
  virtual void erase_prefix(std::string_view prefix) = 0;
  // The names directly under `prefix` (values and sub-prefixes), without the prefix, sorted.
  [[nodiscard]] virtual std::vector<std::string> list_dir(std::string_view prefix) const = 0;
  // Whether a value is at `key`. A probe: false where a value cannot be (the key names a
  // prefix, or a part of it is a value), where get() may raise.
  [[nodiscard]] virtual bool exists(std::string_view key) const;
  // A hint that bytes [offset, offset + length) of `key` (length 0: to its end) will be read soon
  // (local files: start reading them from the disk now). Does nothing by default.
  virtual void will_need(std::string_view /*key*/, std::uint64_t /*offset*/,
                         std::uint64_t /*length*/) const {}
  // The size of the value at `key`, nullopt when there is none. The default reads the value.
  [[nodiscard]] virtual std::optional<std::uint64_t> size(std::string_view key) const;
  // The size of the value at `key` for planning a read that opens the value afterwards and checks
  // its size then: nullopt only when there is none, as size() says. A store may find it more
  // cheaply, leaving its checks to that open (a local store: one stat, not an open beneath the
  // root; what the stat finds is never read). The default is size().
  [[nodiscard]] virtual std::optional<std::uint64_t> size_to_plan(std::string_view key) const {
    return size(key);
  }
  // Where the store is, for messages ("file:///data/x.zarr", "memory://").
  [[nodiscard]] virtual std::string describe() const = 0;
  // Whether writes are refused (UsageError). A store opened read-only stays so.
  [[nodiscard]] virtual bool read_only() const { return false; }

  // Locks for read-modify-writes. Everyone who takes the lock of the same chunk (or document) is
  // serialised: threads of this process through any store object on the same data, and, for
  // local stores, other processes on this machine. The default locks within this process.
  // A chunk `key` of the array at `node`:
  [[nodiscard]] virtual std::unique_ptr<KeyLock> lock_chunk(std::string_view node,
                                                            std::string_view key) const;
  // A metadata document (zarr.json, .zattrs, ...), to change it from what it holds now:
  [[nodiscard]] virtual std::unique_ptr<KeyLock> lock_document(std::string_view key) const;

 protected:
  // Throws UsageError naming the store when it is read-only.
  void check_writable() const;
};

// How a local store reads: through the page cache, or around it (O_DIRECT: for cold data read once,
// where the cache's copy is work and memory spent for nothing). Where the file system has no
// O_DIRECT, direct reads fall back to the cache. kGds: reads into GPU memory go through cuFile
// (GPUDirect Storage: DMA from the drive where the driver offers it); other reads are direct.
enum class LocalIo { kBuffered, kDirect, kGds };

// An optional capability of stores whose values are files: the file of a value, opened for
// readers that move file bytes themselves (GPUDirect Storage), and how it should be read.
class FileBacked {
 public:
  virtual ~FileBacked() = default;
  // A descriptor the caller owns (closes), of the regular file at `key` opened for reading
  // (O_DIRECT when `direct`, where the file system has it); -1 when there is no value.
  [[nodiscard]] virtual int open_file(std::string_view key, bool direct) const = 0;
  [[nodiscard]] virtual LocalIo io() const = 0;
};

// An optional capability of stores that find every value from a root directory (local stores):
// a read-only view of the store for one operation over many keys (a read's plan and fetch), which
// finds them all from the root as it was when the view was made, opened once, rather than
// opening the root's path again for every key, which threads contend for. The view must not
// outlive the operation: a root removed and made again afterwards is not seen through it.
class HeldRoot {
 public:
  virtual ~HeldRoot() = default;
  // The view; the store itself where its root cannot be opened (none yet: every key is absent).
  [[nodiscard]] virtual std::shared_ptr<const Store> with_root_held() const = 0;
};

// `store` viewed for one operation over many keys: its HeldRoot view where it has one, else
// itself.
[[nodiscard]] std::shared_ptr<const Store> for_one_operation(const std::shared_ptr<Store>& store);

// The stores of one operation over many keys of several arrays (a read), each viewed once
// (for_one_operation) and kept while this lives. Not for use from several threads at once.
class StoreViews {
 public:
  [[nodiscard]] const Store& of(const std::shared_ptr<Store>& store);

 private:
  std::vector<std::pair<const Store*, std::shared_ptr<const Store>>> views_;
};

// Byte ranges of the value at one key.
struct KeyRanges {
  std::string key;
  std::vector<ByteRange> ranges;
};

// An optional capability of stores whose every request waits on a round trip (stores written in
// Python: object stores, fsspec): many whole values fetched by one call, which makes the requests
// together (each as many at once as the store allows) instead of one per engine thread.
class BatchedGets {
 public:
  virtual ~BatchedGets() = default;
  // The whole values at `keys`, in order; nullopt where there is none.
  [[nodiscard]] virtual std::vector<std::optional<Buffer>> get_many(
      std::span<const std::string> keys) const = 0;
  // The sizes of the values at `keys`, in order; nullopt where there is none.
  [[nodiscard]] virtual std::vector<std::optional<std::uint64_t>> sizes_many(
      std::span<const std::string> keys) const = 0;
  // For each key, its ranges (offsets and lengths at least 0) in order, each cut short at the
  // value's end; nullopt where the key has no value. Shards a read wants in part come this way:
  // their indexes in one call, then the inner chunks wanted of them all in another, not a round
  // trip each.
  [[nodiscard]] virtual std::vector<std::optional<std::vector<Buffer>>> get_ranges(
      std::span<const KeyRanges> asked) const = 0;
};

// A value already in memory, opened: every read comes from this version of it.
std::shared_ptr<const ValueReader> reader_of(Buffer value);

// The value at `key`, of `size` bytes (already known), read by range through `store` (which must
// outlive it), as Store::open gives it for stores that cannot hold one version of a value.
std::shared_ptr<const ValueReader> key_reader(const Store& store, std::string key,
                                              std::uint64_t size);

struct LocalStoreOptions {
  LocalIo io = LocalIo::kBuffered;
  bool read_only = false;
};

// A directory on a local file system. Values are files, opened beneath the root without
// following symbolic links out of it; only regular files are read as values. Writes go to an
// unnamed (or hidden temporary) file that is then renamed over the key, so a crash never leaves
// a half-written chunk visible.
std::shared_ptr<Store> make_local_store(const std::filesystem::path& root,
                                        LocalStoreOptions options = {});

// An in-process map of keys to values.
std::shared_ptr<Store> make_memory_store(bool read_only = false);

}  // namespace zarr_device
