#include "zarr_device/store.hpp"

#include <cstring>

namespace zarr_device {

std::optional<std::size_t> Store::get_into(std::string_view key, std::span<std::byte> out) const {
  auto value = get(key);
  if (!value) return std::nullopt;
  if (value->size() == out.size() && !out.empty()) {
    std::memcpy(out.data(), value->data(), out.size());
  }
  return value->size();
}

std::optional<std::size_t> Store::get_range_into(std::string_view key, std::uint64_t offset,
                                                 std::span<std::byte> out) const {
  auto value = get(key, {static_cast<std::int64_t>(offset), static_cast<std::int64_t>(out.size())});
  if (!value) return std::nullopt;
  if (!value->empty()) std::memcpy(out.data(), value->data(), value->size());
  return value->size();
}

bool Store::exists(std::string_view key) const { return get(key, {0, 0}).has_value(); }

std::optional<std::uint64_t> Store::size(std::string_view key) const {
  auto value = get(key);
  if (!value) return std::nullopt;
  return value->size();
}

std::string join_key(std::string_view a, std::string_view b) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == '/') s.remove_prefix(1);
    while (!s.empty() && s.back() == '/') s.remove_suffix(1);
    return s;
  };
  a = trim(a);
  b = trim(b);
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  return std::string(a) + "/" + std::string(b);
}

}  // namespace zarr_device
