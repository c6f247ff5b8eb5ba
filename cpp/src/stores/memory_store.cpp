#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>

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
  std::optional<Buffer> get(std::string_view key, ByteRange range) const override {
    validate_key(key);
    std::shared_lock lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return cut(it->second, range);
  }
  std::optional<std::uint64_t> size(std::string_view key) const override {
    validate_key(key);
    std::shared_lock lock(mutex_);
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second.size();
  }
  void set(std::string_view key, std::span<const std::byte> value) override {
    validate_key(key);
    auto copy = Buffer::copy_of(value);
    std::unique_lock lock(mutex_);
    values_[std::string(key)] = std::move(copy);
  }
  void erase(std::string_view key) override {
    validate_key(key);
    std::unique_lock lock(mutex_);
    auto it = values_.find(key);
    if (it != values_.end()) values_.erase(it);
  }
  void erase_prefix(std::string_view prefix) override {
    validate_key(prefix);
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
    validate_key(prefix);
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

 private:
  mutable std::shared_mutex mutex_;
  std::map<std::string, Buffer, std::less<>> values_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace zarr_device
