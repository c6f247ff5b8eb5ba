// The Python face of the engine (module zarr_device._core). Thin: selections arrive normalised,
// metadata travels as JSON text, and the GIL is released while chunks move.
#include <dlpack/dlpack.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <string_view>
#include <tuple>

#include "codecs/codec_chain.hpp"
#include "device_read/bench_hooks.hpp"
#include "devices/device.hpp"
#include "python_store.hpp"
#include "settings_bindings.hpp"
#include "store_bindings.hpp"
#include "stores/file_tree.hpp"
#include "zarr_device/array.hpp"
#include "zarr_device/cuda_io.hpp"
#include "zarr_device/errors.hpp"
#include "zarr_device/json_document.hpp"
#include "zarr_device/nodes.hpp"
#include "zarr_device/settings.hpp"
#include "zarr_device/store.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace zd = zarr_device;

namespace {

std::vector<zd::DimSlice> to_selection(
    const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>& sel) {
  std::vector<zd::DimSlice> out;
  out.reserve(sel.size());
  for (const auto& [start, step, count] : sel) out.push_back({start, step, count});
  return out;
}

const char* exception_name(zd::ErrorKind kind) {
  switch (kind) {
    case zd::ErrorKind::kFormat:
      return "FormatError";
    case zd::ErrorKind::kCodec:
      return "CodecError";
    case zd::ErrorKind::kChecksum:
      return "ChecksumError";
    case zd::ErrorKind::kStore:
      return "StoreError";
    case zd::ErrorKind::kNotFound:
      return "NodeNotFoundError";
    case zd::ErrorKind::kSelection:
      return "SelectionError";
    case zd::ErrorKind::kUsage:
      return "UsageError";
    case zd::ErrorKind::kDevice:
      return "DeviceError";
    case zd::ErrorKind::kOutOfMemory:
      return "OutOfMemoryError";
  }
  return "ZarrDeviceError";
}

using Selection = std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>;

nb::object json_to_python(const nlohmann::json& value) {
  return nb::module_::import_("json").attr("loads")(value.dump());
}

DLDataType dlpack_type(const zd::DataType& t) {
  const auto bits = static_cast<std::uint8_t>(t.size * 8);
  const auto type = [bits](DLDataTypeCode code) {
    return DLDataType{static_cast<std::uint8_t>(code), bits, 1};
  };
  static const std::pair<std::string_view, DLDataTypeCode> kFloat8[] = {
      {"float8_e3m4", kDLFloat8_e3m4},      {"float8_e4m3b11fnuz", kDLFloat8_e4m3b11fnuz},
      {"float8_e4m3fn", kDLFloat8_e4m3fn},  {"float8_e4m3fnuz", kDLFloat8_e4m3fnuz},
      {"float8_e5m2", kDLFloat8_e5m2},      {"float8_e5m2fnuz", kDLFloat8_e5m2fnuz},
      {"float8_e8m0fnu", kDLFloat8_e8m0fnu}};
  for (const auto& [name, code] : kFloat8) {
    if (t.name == name) return type(code);
  }
  if (t.name == "bfloat16") return type(kDLBfloat);
  switch (t.cls) {
    case zd::DTypeClass::kBool:
      return type(kDLBool);
    case zd::DTypeClass::kInt:
      return type(kDLInt);
    case zd::DTypeClass::kUInt:
      return type(kDLUInt);
    case zd::DTypeClass::kFloat:
      return type(kDLFloat);
    case zd::DTypeClass::kComplex:
      return type(kDLComplex);
  }
  return type(kDLUInt);
}

// The package's name of an array's data type: its Zarr v3 name, or NumPy's for a time type
// ("datetime64[10s]"), whose unit is the array's.
std::string package_type_name(const zd::ArrayMetadata& m) {
  if (!m.dtype->holds_time()) return std::string(m.dtype->name);
  const std::string kind = m.dtype->name == "numpy.datetime64" ? "datetime64" : "timedelta64";
  return m.time_unit == "generic" ? kind : kind + "[" + m.time_unit + "]";
}

// A result in device memory, handed to frameworks through DLPack. The data is complete when the
// object exists (reads synchronise before returning), so any consumer stream may use it at once.
class DeviceArray {
 public:
  DeviceArray(std::shared_ptr<zd::DeviceBuffer> buffer, std::vector<std::int64_t> shape,
              const std::string& dtype)
      : buffer_(std::move(buffer)),
        shape_(std::move(shape)),
        dtype_(&zd::DataType::from_v3_name(dtype)) {
    std::size_t n = dtype_->size;
    for (auto e : shape_) n *= static_cast<std::size_t>(e);
    if (n > buffer_->size()) throw zd::UsageError("the buffer is smaller than the array");
  }

  [[nodiscard]] const std::vector<std::int64_t>& shape() const { return shape_; }
  [[nodiscard]] std::string dtype() const { return std::string(dtype_->name); }
  [[nodiscard]] int device() const { return buffer_->device().index(); }
  [[nodiscard]] std::uintptr_t ptr() const {
    return reinterpret_cast<std::uintptr_t>(buffer_->data());
  }

  nb::object dlpack(bool versioned) const {
    auto* ctx = new Context{buffer_, shape_};
    DLTensor t{};
    t.data = buffer_->data();
    t.device = {kDLCUDA, buffer_->device().index()};
    t.ndim = static_cast<std::int32_t>(shape_.size());
    t.dtype = dlpack_type(*dtype_);
    t.shape = ctx->shape.data();
    // C-contiguous. DLPack 1.2 and later require strides for ndim > 0: a newer vendored header
    // needs them filled in first.
    static_assert(DLPACK_MAJOR_VERSION == 1 && DLPACK_MINOR_VERSION < 2);
    t.strides = nullptr;
    t.byte_offset = 0;
    if (versioned) {
      // The vendored header's version (1.1): the ABI these capsules follow.
      constexpr DLPackVersion kVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
      auto* m = new DLManagedTensorVersioned{kVersion, ctx,
                                             [](DLManagedTensorVersioned* self) {
                                               delete static_cast<Context*>(self->manager_ctx);
                                               delete self;
                                             },
                                             0, t};
      return capsule(m, "dltensor_versioned");
    }
    auto* m = new DLManagedTensor{t, ctx, [](DLManagedTensor* self) {
                                    delete static_cast<Context*>(self->manager_ctx);
                                    delete self;
                                  }};
    return capsule(m, "dltensor");
  }

 private:
  struct Context {
    std::shared_ptr<zd::DeviceBuffer> buffer;
    std::vector<std::int64_t> shape;
  };

  template <typename Managed>
  static nb::object capsule(Managed* m, const char* name) {
    // A capsule still carrying its original name was never consumed: free it with the capsule.
    PyObject* cap = PyCapsule_New(m, name, [](PyObject* self) {
      for (const char* n : {"dltensor", "dltensor_versioned"}) {
        if (PyCapsule_IsValid(self, n)) {
          auto* managed = static_cast<Managed*>(PyCapsule_GetPointer(self, n));
          if (managed && managed->deleter) managed->deleter(managed);
          return;
        }
      }
    });
    if (!cap) throw nb::python_error();
    return nb::steal(cap);
  }

  std::shared_ptr<zd::DeviceBuffer> buffer_;
  std::vector<std::int64_t> shape_;
  const zd::DataType* dtype_;
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "zarr-device engine";
  // nanobind reports the instances still alive when the interpreter shuts down. Arrays and stores
  // that zarr-python's event-loop thread or a module's globals still hold at exit are such
  // instances (the process's exit frees them); the report read as a bug to users of the plug-in.
  // It stays available for finding reference leaks: ZARR_DEVICE_LEAK_WARNINGS=1.
  nb::set_leak_warnings(zd::environment_value(zd::EnvironmentVariable::kLeakWarnings) == "1");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const zd::Error& e) {
      nb::object errors = nb::module_::import_("zarr_device.errors");
      nb::object cls = errors.attr(exception_name(e.kind()));
      // Messages quote what they reject (a key, a bad byte of a document), which need not be
      // UTF-8: undecodable bytes are shown escaped rather than turning into a UnicodeDecodeError.
      const std::string_view what(e.what());
      PyObject* message = PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()),
                                               "backslashreplace");
      if (message == nullptr) return;  // the decoder's own error stands
      PyErr_SetObject(cls.ptr(), message);
      Py_DECREF(message);
    }
  });

  bind_settings(m);  // settings_bindings.cpp

  bind_stores(m);  // store_bindings.cpp

  // Nodes as a whole, and the one path rule.
  m.def("normalize_node_path", &zd::normalize_node_path, "path"_a);
  m.def("is_temporary_name",
        [](std::string_view name) { return zd::stores::is_temporary_name(name); });
  m.def(
      "read_document",
      [](const zd::Store& store, const std::string& key) -> std::optional<std::string> {
        std::optional<nlohmann::json> doc;
        {
          nb::gil_scoped_release release;
          doc = zd::read_document(store, key);
        }
        if (!doc) return std::nullopt;
        return doc->dump();
      },
      "store"_a, "key"_a);
  m.def(
      "node_kind",
      [](const zd::Store& store, const std::string& path) -> std::optional<std::string> {
        zd::NodeKind kind = zd::NodeKind::kNone;
        {
          nb::gil_scoped_release release;
          kind = zd::node_kind(store, path);
        }
        if (kind == zd::NodeKind::kArray) return "array";
        if (kind == zd::NodeKind::kGroup) return "group";
        return std::nullopt;
      },
      "store"_a, "path"_a);
  m.def(
      "update_attributes",
      [](zd::Store& store, const std::string& path, const std::string& set,
         const std::vector<std::string>& remove, bool replace) {
        nb::gil_scoped_release release;
        const auto changes = zd::parse_json_document(
            {reinterpret_cast<const std::byte*>(set.data()), set.size()}, "attributes");
        return zd::update_attributes(store, path, changes, remove, replace).dump();
      },
      "store"_a, "path"_a, "set"_a, "remove"_a, "replace"_a);
  m.def(
      "erase_node",
      [](zd::Store& store, const std::string& path) {
        nb::gil_scoped_release release;
        zd::erase_node(store, path);
      },
      "store"_a, "path"_a);

  // Reads of many arrays in one pass (host memory) or one pipeline (a CUDA device). Each request:
  // (array, selection, out) on the host; (array, selection, pointer, bytes, consumer stream) on a
  // device. The arrays are kept alive by the request list for the call.
  m.def(
      "read_many",
      [](const std::vector<std::tuple<std::shared_ptr<zd::Array>, Selection,
                                      nb::ndarray<std::uint8_t, nb::c_contig, nb::device::cpu>>>&
             requests) {
        std::vector<zd::ReadRequest> reads;
        reads.reserve(requests.size());
        for (const auto& [array, selection, out] : requests) {
          reads.push_back({array.get(),
                           to_selection(selection),
                           {reinterpret_cast<std::byte*>(out.data()), out.size()}});
        }
        nb::gil_scoped_release release;
        zd::read_many(reads);
      },
      "requests"_a);
  m.def(
      "read_many_cuda",
      [](const std::vector<std::tuple<std::shared_ptr<zd::Array>, Selection, std::uintptr_t,
                                      std::size_t, std::uintptr_t>>& requests,
         int device, const zd::ReadOptions& options, nb::object completed) {
        std::vector<zd::CudaReadRequest> reads;
        reads.reserve(requests.size());
        for (const auto& [array, selection, ptr, nbytes, stream] : requests) {
          reads.push_back(
              {array.get(), to_selection(selection), reinterpret_cast<void*>(ptr), nbytes, stream});
        }
        std::function<void(std::size_t)> report;
        if (!completed.is_none()) {
          report = [&completed](std::size_t index) {
            nb::gil_scoped_acquire acquire;
            completed(index);
          };
        }
        nb::gil_scoped_release release;
        zd::read_many_to_cuda(reads, device, options, report);
      },
      "requests"_a, "device"_a, "options"_a, "completed"_a = nb::none());
  m.def("synchronize_cuda", &zd::synchronize_cuda_reads, "device"_a,
        nb::call_guard<nb::gil_scoped_release>());
  m.def("release_cuda_memory", &zd::release_cuda_memory, "device"_a,
        nb::call_guard<nb::gil_scoped_release>());

  m.def("cuda_device_count", &zd::cuda_device_count);
  m.def("cuda_build_info", [] { return json_to_python(zd::cuda_info()); });
  m.def(
      "isolated_decoding_info",
      [](int device) { return json_to_python(zd::isolated_decoding_info(device)); },
      nb::arg("device"));

  nb::class_<zd::DeviceBuffer>(m, "DeviceBuffer")
      .def(nb::new_([](int device, std::size_t nbytes) {
             return std::make_shared<zd::DeviceBuffer>(zd::get_device("cuda", device), nbytes);
           }),
           "device"_a, "nbytes"_a)
      .def_prop_ro(
          "ptr",
          [](const zd::DeviceBuffer& b) { return reinterpret_cast<std::uintptr_t>(b.data()); })
      .def_prop_ro("nbytes", &zd::DeviceBuffer::size)
      .def_prop_ro("device", [](const zd::DeviceBuffer& b) { return b.device().index(); });

  nb::class_<DeviceArray>(m, "DeviceArray")
      .def(nb::init<std::shared_ptr<zd::DeviceBuffer>, std::vector<std::int64_t>,
                    const std::string&>(),
           "buffer"_a, "shape"_a, "dtype"_a)
      .def_prop_ro("shape", &DeviceArray::shape)
      .def_prop_ro("dtype", &DeviceArray::dtype)
      .def_prop_ro("device", &DeviceArray::device)
      .def_prop_ro("ptr", &DeviceArray::ptr)
      .def(
          "__dlpack__",
          [](const DeviceArray& a, nb::object stream, nb::object max_version, nb::object dl_device,
             nb::object copy) {
            if (!copy.is_none() && nb::cast<bool>(copy)) {
              PyErr_SetString(PyExc_BufferError,
                              "DeviceArray exports its memory only; copy in the consumer");
              throw nb::python_error();
            }
            bool versioned = false;
            if (!max_version.is_none()) {
              versioned = nb::cast<int>(max_version[0]) >= 1;
            }
            return a.dlpack(versioned);
          },
          "stream"_a = nb::none(), "max_version"_a = nb::none(), "dl_device"_a = nb::none(),
          "copy"_a = nb::none())
      .def("__dlpack_device__", [](const DeviceArray& a) {
        return std::make_tuple(static_cast<int>(kDLCUDA), a.device());
      });

  nb::class_<zd::Array>(m, "Array")
      .def_static(
          "open",
          [](std::shared_ptr<zd::Store> store, const std::string& path) {
            return std::const_pointer_cast<zd::Array>(zd::Array::open(store, path));
          },
          "store"_a, "path"_a, nb::call_guard<nb::gil_scoped_release>())
      .def_static(
          "create",
          [](std::shared_ptr<zd::Store> store, const std::string& path, const std::string& document,
             bool overwrite) {
            const nlohmann::json doc = zd::parse_json_document(
                {reinterpret_cast<const std::byte*>(document.data()), document.size()}, "metadata");
            return std::const_pointer_cast<zd::Array>(
                zd::Array::create(store, path, doc, overwrite));
          },
          "store"_a, "path"_a, "document"_a, "overwrite"_a,
          nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("path", &zd::Array::path)
      .def_prop_ro("store", &zd::Array::store)
      .def_prop_ro("zarr_format", [](const zd::Array& a) { return a.metadata().zarr_format; })
      .def_prop_ro("shape", [](const zd::Array& a) { return a.metadata().shape; })
      .def_prop_ro("chunk_shape", [](const zd::Array& a) { return a.metadata().chunk_shape; })
      .def_prop_ro("inner_chunk_shape", &zd::Array::inner_chunk_shape)
      .def_prop_ro("is_sharded", [](const zd::Array& a) { return a.chain().is_sharded(); })
      .def_prop_ro("dtype", [](const zd::Array& a) { return package_type_name(a.metadata()); })
      .def_prop_ro("itemsize", [](const zd::Array& a) { return a.metadata().dtype->size; })
      .def_prop_ro(
          "fill_value_json",
          [](const zd::Array& a) {
            return zd::fill_value_to_json(a.metadata().fill_value, *a.metadata().dtype).dump();
          })
      .def_prop_ro("attributes_json",
                   [](const zd::Array& a) { return a.metadata().attributes.dump(); })
      .def_prop_ro("document_json", [](const zd::Array& a) { return a.metadata().document.dump(); })
      .def_prop_ro("codecs_json", [](const zd::Array& a) { return a.codecs_json().dump(); })
      .def("describe", &zd::Array::describe)
      .def(
          "read",
          [](const zd::Array& a, const Selection& selection,
             nb::ndarray<std::uint8_t, nb::c_contig, nb::device::cpu> out) {
            const auto sel = to_selection(selection);
            std::span<std::byte> bytes{reinterpret_cast<std::byte*>(out.data()), out.size()};
            nb::gil_scoped_release release;
            a.read(sel, bytes);
          },
          "selection"_a, "out"_a)
      .def(
          "write",
          [](const zd::Array& a, const Selection& selection,
             nb::ndarray<const std::uint8_t, nb::c_contig, nb::device::cpu> values) {
            const auto sel = to_selection(selection);
            std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(values.data()),
                                             values.size()};
            nb::gil_scoped_release release;
            a.write(sel, bytes);
          },
          "selection"_a, "values"_a)
      .def(
          "read_cuda",
          [](const zd::Array& a, const Selection& selection, int device, std::uintptr_t out_ptr,
             std::size_t out_nbytes, const zd::ReadOptions& options) {
            const auto sel = to_selection(selection);
            nb::gil_scoped_release release;
            zd::read_to_cuda(a, sel, device, reinterpret_cast<void*>(out_ptr), out_nbytes, options);
          },
          "selection"_a, "device"_a, "out_ptr"_a, "out_nbytes"_a, "options"_a)
      .def(
          "write_cuda",
          [](const zd::Array& a, const Selection& selection, int device, std::uintptr_t values_ptr,
             std::size_t values_nbytes, std::uintptr_t stream) {
            const auto sel = to_selection(selection);
            zd::CudaWriteOptions options;
            options.producer_stream = stream;
            nb::gil_scoped_release release;
            zd::write_from_cuda(a, sel, device, reinterpret_cast<const void*>(values_ptr),
                                values_nbytes, options);
          },
          "selection"_a, "device"_a, "values_ptr"_a, "values_nbytes"_a, "stream"_a = 0)
      .def(
          "bench_decode_cuda",
          [](const zd::Array& a, const Selection& selection, int device, int repeats,
             const std::optional<std::string>& gpu_decode) {
            const auto sel = to_selection(selection);
            auto options = zd::ReadOptions::from_settings();
            if (gpu_decode) {
              const auto& setting = zd::setting_info("gpu_decode");
              options.gpu_decode =
                  static_cast<zd::GpuDecode>(zd::parse_setting(setting, *gpu_decode, setting.name));
            }
            nlohmann::json result;
            {
              nb::gil_scoped_release release;
              result = zd::measure_cuda_decode(a, sel, device, repeats, options);
            }
            return json_to_python(result);
          },
          "selection"_a, "device"_a, "repeats"_a = 3, "gpu_decode"_a = nb::none());
}
