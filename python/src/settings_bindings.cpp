// The settings (cpp/src/engine/settings.cpp) as Python sees them: values as ints and choices by
// name, the table as dicts. Every call's options start from the values in force, which
// zarr_device.set_config changes.
#include "settings_bindings.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <cstdint>
#include <string>

#include "zarr_device/settings.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace zd = zarr_device;

namespace {

// A setting's value as Python holds it: an int, or the name of the choice.
nb::object setting_to_python(const zd::SettingInfo& setting, std::uint64_t value) {
  if (setting.kind == zd::SettingKind::kChoice) return nb::cast(setting.choices[value]);
  return nb::cast(value);
}

nb::dict settings_to_python(const zd::Settings& values) {
  nb::dict out;
  for (const auto& setting : zd::settings_table()) {
    out[nb::cast(setting.name)] = setting_to_python(setting, setting.get(values));
  }
  return out;
}

}  // namespace

void bind_settings(nb::module_& m) {
  m.def("settings", [] { return settings_to_python(zd::settings()); });
  m.def(
      "set_settings",
      [](const nb::dict& values) {
        // Values as zarr_device.basics.config checked them: counts and sizes as ints, choices by
        // name (the engine checks them again, as set_settings does every value).
        zd::Settings updated = zd::settings();
        for (const auto& [key, value] : values) {
          const auto& setting = zd::setting_info(nb::cast<std::string>(key));
          if (setting.kind == zd::SettingKind::kChoice) {
            const auto name = nb::cast<std::string>(value);
            setting.set(updated, zd::parse_setting(setting, name, setting.name));
          } else {
            // A negative count comes through as the huge number set_settings shows as it was.
            std::uint64_t number = 0;
            if (!nb::try_cast(value, number))
              number = static_cast<std::uint64_t>(nb::cast<std::int64_t>(value));
            setting.set(updated, number);
          }
        }
        zd::set_settings(updated);
      },
      "values"_a);
  m.def("settings_table", [] {
    const zd::Settings defaults;
    nb::list table;
    for (const auto& setting : zd::settings_table()) {
      nb::dict row;
      row["name"] = setting.name;
      row["variable"] = setting.variable;
      row["kind"] = setting.kind == zd::SettingKind::kCount  ? "count"
                    : setting.kind == zd::SettingKind::kSize ? "size"
                                                             : "choice";
      row["default"] = setting_to_python(setting, setting.get(defaults));
      row["default_text"] = setting.default_text;
      row["minimum"] = setting.minimum;
      row["maximum"] = setting.maximum;
      row["zero_is_automatic"] = setting.zero_is_automatic;
      nb::list choices;
      for (const auto& choice : setting.choices) choices.append(choice);
      row["choices"] = choices;
      row["doc"] = setting.doc;
      table.append(row);
    }
    return table;
  });
  // The one size parser (zarr_device.basics.sizes calls it): the byte count, None for text that is
  // not a size, -1 for one beyond 64 bits.
  m.def("parse_byte_count", [](std::string_view text) -> nb::object {
    const auto count = zd::parse_byte_count(text);
    if (count.kind == zd::ByteCount::kNotASize) return nb::none();
    if (count.kind == zd::ByteCount::kTooLarge) return nb::int_(-1);
    return nb::cast(count.bytes);
  });
  m.def("decode_memory_for", &zd::decode_memory_for, "decode_bytes"_a, "device_memory"_a);
  // The environment's grammar of a setting (the tests hold it against zarr_device.basics.sizes).
  m.def(
      "parse_setting",
      [](const std::string& name, const std::string& text) {
        const auto& setting = zd::setting_info(name);
        return setting_to_python(setting, zd::parse_setting(setting, text, setting.name));
      },
      "name"_a, "text"_a);
}
