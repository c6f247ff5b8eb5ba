// The one way JSON documents (zarr.json, .zarray, .zattrs, .zgroup) enter the engine: parsed
// with limits on size and nesting, so hostile metadata is a FormatError, never a stack overflow
// or an allocation of whatever size a file claims.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

namespace zarr_device {

struct JsonLimits {
  std::size_t max_bytes = std::size_t{64} << 20;  // consolidated metadata can be large
  int max_depth = 64;                             // attributes nest; metadata itself is shallow
};

// Parses `bytes` (UTF-8 JSON text). Throws FormatError naming `what` (e.g. "'a/zarr.json'") when
// the text is not valid JSON or UTF-8, is larger than the limit or nests deeper.
nlohmann::json parse_json_document(std::span<const std::byte> bytes, std::string_view what,
                                   const JsonLimits& limits = {});

}  // namespace zarr_device
