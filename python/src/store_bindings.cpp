#include "store_bindings.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "python_store.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/store.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace zd = zarr_device;

void bind_stores(nb::module_& m) {
  nb::class_<zd::Store>(m, "Store")
      .def(
          "get",
          [](const zd::Store& s, const std::string& key, std::int64_t offset,
             std::int64_t length) -> nb::object {
            std::optional<zd::Buffer> value;
            {
              nb::gil_scoped_release release;
              value = s.get(key, {offset, length});
            }
            if (!value) return nb::none();
            return nb::bytes(value->data(), value->size());
          },
          "key"_a, "offset"_a = 0, "length"_a = -1)
      .def(
          "set",
          [](zd::Store& s, const std::string& key, nb::bytes value) {
            s.set(key, {static_cast<const std::byte*>(value.data()), value.size()});
          },
          "key"_a, "value"_a)
      .def("erase", &zd::Store::erase, "key"_a)
      .def("erase_prefix", &zd::Store::erase_prefix, "prefix"_a)
      .def(
          "list_dir",
          [](const zd::Store& s, const std::string& prefix) {
            std::vector<std::string> names;
            {
              nb::gil_scoped_release release;
              names = s.list_dir(prefix);
            }
            // A name that is not UTF-8 (a stray file) can name no Zarr node or chunk.
            nb::list out;
            for (const auto& name : names) {
              PyObject* text =
                  PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "strict");
              if (text == nullptr) {
                PyErr_Clear();
                continue;
              }
              out.append(nb::steal(text));
            }
            return out;
          },
          "prefix"_a)
      .def("exists", &zd::Store::exists, "key"_a)
      .def("size", &zd::Store::size, "key"_a)
      .def("describe", &zd::Store::describe)
      .def_prop_ro("read_only", &zd::Store::read_only);

  m.def(
      "local_store",
      [](const std::string& root, const std::string& io, bool read_only) {
        if (io != "buffered" && io != "direct" && io != "gds") {
          throw zd::UsageError("io must be 'buffered', 'direct' or 'gds', not '" + io + "'");
        }
        if (root.find('\0') != std::string::npos) {
          throw zd::UsageError("a store's root may not hold a NUL byte");
        }
        zd::LocalStoreOptions options;
        options.io = io == "gds"      ? zd::LocalIo::kGds
                     : io == "direct" ? zd::LocalIo::kDirect
                                      : zd::LocalIo::kBuffered;
        options.read_only = read_only;
        return zd::make_local_store(root, options);
      },
      "root"_a, "io"_a = "buffered", "read_only"_a = false);
  m.def(
      "memory_store", [](bool read_only) { return zd::make_memory_store(read_only); },
      "read_only"_a = false);
  m.def(
      "python_store",
      [](nb::object impl, bool read_only) -> std::shared_ptr<zd::Store> {
        return make_python_store(std::move(impl), read_only);
      },
      "impl"_a, "read_only"_a = false);
}
