// Keys and node paths: '/'-separated paths relative to a store's root. Every path that enters the
// engine (from the Python API, from metadata, from a store call) is checked by this one rule, so no
// store ever sees a path that could leave its root or name something other than it seems to.
#pragma once

#include <string>
#include <string_view>

namespace zarr_device {

// The longest path and path component the rule accepts (those of common file systems).
inline constexpr std::size_t kMaxPathBytes = 4096;
inline constexpr std::size_t kMaxComponentBytes = 255;

// Throws UsageError unless `path` is "" (the root) or non-empty components joined by single '/',
// none of them "." or "..", with no NUL byte or backslash, within the lengths above.
void validate_path(std::string_view path);
// validate_path, and not the root: a key names a value.
void validate_key(std::string_view key);
// A node path as users write it: surrounding '/' removed ("/a/b/" -> "a/b"), as zarr-python
// does, then validated.
std::string normalize_node_path(std::string_view path);
// Joins two paths with '/' ("" is the root: join_key("", "x") == "x").
std::string join_key(std::string_view a, std::string_view b);
// The part after the last '/', and the part before it ("" for a top-level name).
std::string_view path_name(std::string_view path);
std::string_view path_parent(std::string_view path);

}  // namespace zarr_device
