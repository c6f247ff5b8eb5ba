#include <charconv>
#include <map>
#include <mutex>
#include <string>

#include "devices/device.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device {

struct DeviceRegistry::Impl {
  std::mutex mutex;
  std::map<std::string, Factory, std::less<>> factories;
  std::map<std::pair<std::string, int>, std::shared_ptr<Device>> devices;
};

DeviceRegistry::DeviceRegistry() : impl_(std::make_shared<Impl>()) {
  impl_->factories["cpu"] = [](int /*index*/) { return make_cpu_device(); };
  impl_->factories["cuda"] = [](int index) { return make_cuda_device(index); };
}

DeviceRegistry& DeviceRegistry::instance() {
  static DeviceRegistry registry;
  return registry;
}

void DeviceRegistry::add(std::string kind, Factory factory) {
  std::lock_guard lock(impl_->mutex);
  impl_->factories[std::move(kind)] = std::move(factory);
}

std::shared_ptr<Device> DeviceRegistry::get(std::string_view name) {
  const auto colon = name.find(':');
  const std::string kind(name.substr(0, colon));
  int index = 0;
  if (colon != std::string_view::npos) {
    const auto digits = name.substr(colon + 1);
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() ||
        index < 0) {
      throw UsageError("device '" + std::string(name) + "' is not of the form 'kind' or 'kind:N'");
    }
  }
  return get(kind, index);
}

std::shared_ptr<Device> DeviceRegistry::get(std::string_view kind_name, int index) {
  if (index < 0) {
    throw UsageError("device index " + std::to_string(index) + " of '" + std::string(kind_name) +
                     "' is negative");
  }
  const std::string kind(kind_name);
  std::lock_guard lock(impl_->mutex);
  auto& device = impl_->devices[{kind, index}];
  if (device) return device;
  const auto factory = impl_->factories.find(kind);
  if (factory == impl_->factories.end()) {
    std::string known;
    for (const auto& [k, f] : impl_->factories) known += (known.empty() ? "" : ", ") + k;
    impl_->devices.erase({kind, index});
    throw UsageError("unknown device kind '" + kind + "' (known: " + known + ")");
  }
  try {
    device = factory->second(index);
  } catch (...) {
    impl_->devices.erase({kind, index});
    throw;
  }
  return device;
}

DeviceBuffer::DeviceBuffer(std::shared_ptr<Device> device, std::size_t bytes)
    : device_(std::move(device)), size_(bytes), data_(device_->allocate(bytes)) {}

DeviceBuffer::~DeviceBuffer() { device_->deallocate(data_); }

}  // namespace zarr_device
