#include "zarr_device/json_document.hpp"

#include <string>

#include "zarr_device/errors.hpp"

namespace zarr_device {

nlohmann::json parse_json_document(std::span<const std::byte> bytes, std::string_view what,
                                   const JsonLimits& limits) {
  if (bytes.size() > limits.max_bytes) {
    throw FormatError(std::string(what) + " is " + std::to_string(bytes.size()) +
                      " bytes, more than the " + std::to_string(limits.max_bytes) +
                      " a metadata document may hold");
  }
  // nlohmann's parser recurses once per nesting level; the callback sees each level as it is
  // entered, so a deep document is refused before it can exhaust the stack.
  const auto depth_guard = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= limits.max_depth) {
      throw FormatError(std::string(what) + " nests deeper than " +
                        std::to_string(limits.max_depth) + " levels");
    }
    return true;
  };
  const auto* first = reinterpret_cast<const char*>(bytes.data());
  try {
    return nlohmann::json::parse(first, first + bytes.size(), depth_guard);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(std::string(what) + " is not valid JSON: " + e.what());
  }
}

}  // namespace zarr_device
