#include "zarr_device/store.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace zarr_device {

std::optional<std::size_t> Store::get_into(std::string_view key,
                                           std::span<const std::span<std::byte>> pieces) const {
  auto value = get(key);
  if (!value) return std::nullopt;
  std::size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  if (value->size() != total) return value->size();
  const std::byte* src = value->data();
  for (const auto& p : pieces) {
    if (!p.empty()) std::memcpy(p.data(), src, p.size());
    src += p.size();
  }
  return total;
}

std::optional<std::size_t> Store::get_range_into(std::string_view key, std::uint64_t offset,
                                                 std::span<std::byte> out) const {
  // Offsets past what a signed range can name are past any value's end.
  if (offset > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    if (!exists(key)) return std::nullopt;
    return 0;
  }
  auto value = get(key, {static_cast<std::int64_t>(offset), static_cast<std::int64_t>(out.size())});
  if (!value) return std::nullopt;
  const std::size_t n = std::min(value->size(), out.size());
  if (n) std::memcpy(out.data(), value->data(), n);
  return n;
}

bool Store::exists(std::string_view key) const { return get(key, {0, 0}).has_value(); }

std::optional<std::uint64_t> Store::size(std::string_view key) const {
  auto value = get(key);
  if (!value) return std::nullopt;
  return value->size();
}

void validate_key(std::string_view key) {
  if (!key.empty() && key.front() == '/') {
    throw UsageError("key '" + std::string(key) + "' is absolute");
  }
  std::size_t start = 0;
  while (start <= key.size()) {
    const std::size_t end = std::min(key.find('/', start), key.size());
    if (key.substr(start, end - start) == "..") {
      throw UsageError("key '" + std::string(key) + "' leaves the store");
    }
    start = end + 1;
  }
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
