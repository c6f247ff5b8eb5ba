// The engine's settings in module zarr_device._core (used by zarr_device/basics/config.py).
#pragma once

#include <nanobind/nanobind.h>

// settings(), set_settings(values), settings_table(), parse_setting(name, text).
void bind_settings(nanobind::module_& m);
