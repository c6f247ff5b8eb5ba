#include "zarr_device/store_path.hpp"

#include "zarr_device/errors.hpp"

namespace zarr_device {
namespace {

// Shows a path in a message with control bytes (NUL above all) made visible.
std::string printable(std::string_view path) {
  std::string out;
  for (const char c : path.substr(0, 200)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  if (path.size() > 200) out += "...";
  return out;
}

[[noreturn]] void reject(std::string_view path, std::string_view why) {
  throw UsageError("path '" + printable(path) + "' " + std::string(why));
}

}  // namespace

void validate_path(std::string_view path) {
  if (path.empty()) return;
  if (path.size() > kMaxPathBytes) reject(path, "is too long");
  if (path.front() == '/') reject(path, "is absolute (paths are relative to the store's root)");
  std::size_t start = 0;
  while (true) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part = path.substr(start, end - start);
    if (part.empty()) reject(path, "has an empty component");
    if (part == "." || part == "..") reject(path, "has a '.' or '..' component");
    if (part.size() > kMaxComponentBytes) reject(path, "has a component longer than 255 bytes");
    for (const char c : part) {
      if (c == '\0') reject(path, "holds a NUL byte");
      if (c == '\\') reject(path, "holds a backslash");
    }
    if (end == path.size()) return;
    start = end + 1;
  }
}

void validate_key(std::string_view key) {
  if (key.empty()) throw UsageError("a key may not be empty (the store's root is not a value)");
  validate_path(key);
}

std::string normalize_node_path(std::string_view path) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  validate_path(path);
  return std::string(path);
}

std::string join_key(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  std::string out;
  out.reserve(a.size() + 1 + b.size());
  out.append(a).push_back('/');
  out.append(b);
  return out;
}

std::string_view path_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view path_parent(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

}  // namespace zarr_device
