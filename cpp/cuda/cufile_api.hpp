// cuFile (GPUDirect Storage), loaded at run time: file bytes read straight into GPU memory, by DMA
// from NVMe where the nvidia-fs driver is present, else by cuFile's own compatibility path (POSIX
// reads through its pinned buffers). Without the library, readers fall back to the staging ring.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

namespace zarr_device::cuda {

class CuFile {
 public:
  // The process-wide instance; loads libcufile and opens its driver on first use.
  static const CuFile& instance();

  [[nodiscard]] bool available() const { return available_; }
  [[nodiscard]] const std::string& library() const { return library_; }
  [[nodiscard]] const std::string& error() const { return error_; }

  // A file opened and registered with cuFile; closed and deregistered with the object.
  class File {
   public:
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    // Reads `size` bytes at `file_offset` into device memory at base + device_offset. Returns the
    // bytes read (fewer at the end of the file); StoreError on failure.
    std::size_t read(void* device_base, std::size_t size, off_t file_offset,
                     off_t device_offset) const;

   private:
    friend class CuFile;
    File() = default;
    int fd_ = -1;
    void* handle_ = nullptr;
    std::string path_;
  };
  // Registers the open file `fd` (taken over: closed with the result, or on failure), named
  // `name` in messages. StoreError when it cannot be registered.
  [[nodiscard]] std::unique_ptr<File> open(int fd, std::string name) const;

 private:
  CuFile();
  bool available_ = false;
  std::string library_;
  std::string error_;
};

}  // namespace zarr_device::cuda
