// The settings (cpp/src/basics/settings.cpp) as Python sees them: values as ints and choices by
// name, the table as dicts. Every call's options start from the values in force, which
// zarr_device.set_config changes.
#include "settings_bindings.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

#include <cstdint>
#include <string>

#include "zarr_device/read_options.hpp"
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

// A choice-valued field of the options by the name of its choice, as the settings take it.
template <typename Enum>
void bind_choice(nb::class_<zd::ReadOptions>& options, const char* field, const char* setting,
                 Enum zd::ReadOptions::*member) {
  options.def_prop_rw(
      field,
      [setting, member](const zd::ReadOptions& o) {
        return std::string(zd::setting_info(setting).choices[static_cast<std::size_t>(o.*member)]);
      },
      [setting, member](zd::ReadOptions& o, const std::string& name) {
        const auto& info = zd::setting_info(setting);
        o.*member = static_cast<Enum>(zd::parse_setting(info, name, info.name));
      });
}

}  // namespace

void bind_settings(nb::module_& m) {
  // A read's options: the settings in force when it is made (the start of a call), with what the
  // call says of itself. Sizes and counts are ints; choices by name.
  nb::class_<zd::ReadOptions> read_options(m, "ReadOptions");
  read_options
      .def(nb::new_([](std::uintptr_t consumer_stream, bool non_blocking) {
             auto options = zd::ReadOptions::from_settings();
             options.consumer_stream = consumer_stream;
             options.non_blocking = non_blocking;
             return options;
           }),
           nb::kw_only(), "consumer_stream"_a = 0, "non_blocking"_a = false)
      .def_rw("threads", &zd::ReadOptions::threads)
      .def_rw("staging_bytes", &zd::ReadOptions::staging_bytes)
      .def_rw("staging_slots", &zd::ReadOptions::slots)
      .def_rw("decode_bytes", &zd::ReadOptions::decode_bytes)
      .def_rw("consumer_stream", &zd::ReadOptions::consumer_stream)
      .def_rw("non_blocking", &zd::ReadOptions::non_blocking);
  bind_choice(read_options, "gpu_decode", "gpu_decode", &zd::ReadOptions::gpu_decode);
  bind_choice(read_options, "decode_sharing", "decode_sharing", &zd::ReadOptions::decode_sharing);

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
  // The variables read from the environment alone: [{"variable", "doc"}].
  m.def("environment_variables", [] {
    nb::list rows;
    for (const auto& info : zd::environment_variables()) {
      nb::dict row;
      row["variable"] = info.variable;
      row["doc"] = info.doc;
      rows.append(row);
    }
    return rows;
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
