#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "stores/process_locks.hpp"
#include "zarr_device/store.hpp"

namespace zarr_device {
namespace {

std::optional<Buffer> cut(const Buffer& value, ByteRange range) {
  const auto size = static_cast<std::int64_t>(value.size());
  std::int64_t start = range.offset < 0 ? std::max<std::int64_t>(0, size + range.offset)
                                        : std::min(range.offset, size);
  std::int64_t length =
      range.offset < 0 ? size - start : (range.length < 0 ? size - start : range.length);
  length = std::min(length, size - start);
  return value.slice(static_cast<std::size_t>(start), static_cast<std::size_t>(length));
}

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(bool read_only) : read_only_(read_only) {}

  bool read_only() const override { return read_only_; }
  std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
    validate_key(key);
    std::shared_lock lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return cut(it->second, range);
  }
  std::shared_ptr<const ValueReader> open(std::string_view key) const override {
    validate_key(key);
    std::shared_lock lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return nullptr;
    return reader_of(it->second);
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    validate_key(key);
    std::shared_lock lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second.size();
  }
  void set(std::string_view key, std::span<const std::byte> value) override {
    check_writable();
    validate_key(key);
    auto copy = Buffer::copy_of(value);
    std::unique_lock lock(mutex_);
    values_[std::string(key)] = std::move(copy);
  }
  void erase(std::string_view key) override {
    check_writable();
    validate_key(key);
    std::unique_lock lock(mutex_);
    auto it = values_.find(key);
    if (it != values_.end()) values_.erase(it);
  }
  void erase_prefix(std::string_view prefix) override {
    check_writable();
    validate_path(prefix);
    std::unique_lock lock(mutex_);
    const std::string p = prefix.empty() ? "" : std::string(prefix) + "/";
    for (auto it = values_.begin(); it != values_.end();) {
      if (it->first.starts_with(p) || it->first == prefix)
        it = values_.erase(it);
      else
        ++it;
    }
  }
  std::vector<std::string> list_dir(std::string_view prefix) const override {
    validate_path(prefix);
    std::shared_lock lock(mutex_);
    const std::string p = prefix.empty() ? "" : std::string(prefix) + "/";
    std::set<std::string> names;
    for (const auto& [key, value] : values_) {
      if (!key.starts_with(p)) continue;
      const auto rest = std::string_view(key).substr(p.size());
      names.emplace(rest.substr(0, rest.find('/')));
    }
    return {names.begin(), names.end()};
  }
  std::string describe() const override { return "memory://"; }

  // Locks named by this store's address: its data is its own.
  std::unique_ptr<KeyLock> lock_chunk(std::string_view node, std::string_view key) const override {
    check_writable();
    validate_path(node);
    validate_key(key);
    return stores::lock_in_process(identity() + std::string(key));
  }
  std::unique_ptr<KeyLock> lock_document(std::string_view key) const override {
    check_writable();
    validate_key(key);
    return stores::lock_in_process(identity() + std::string(key));
  }

 private:
  [[nodiscard]] std::string identity() const {
    return "memory:" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + '\0';
  }

  bool read_only_;
  mutable std::shared_mutex mutex_;
  std::map<std::string, Buffer, std::less<>> values_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store(bool read_only) {
  return std::make_shared<MemoryStore>(read_only);
}

}  // namespace zarr_device
