#include "zarr_device/read_options.hpp"

namespace zarr_device {

ReadOptions ReadOptions::from_settings() { return from(settings()); }

ReadOptions ReadOptions::from(const Settings& values) {
  ReadOptions options;
  options.threads = values.threads;
  options.staging_bytes = values.staging_bytes;
  options.slots = values.staging_slots;
  options.decode_bytes = values.decode_bytes;
  options.gpu_decode = values.gpu_decode;
  options.decode_sharing = values.decode_sharing;
  return options;
}

}  // namespace zarr_device
