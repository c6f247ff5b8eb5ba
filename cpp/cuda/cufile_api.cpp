#include "cufile_api.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifdef ZARR_DEVICE_CUFILE_HEADER
#define ZARR_DEVICE_WITH_CUFILE 1
#include ZARR_DEVICE_CUFILE_HEADER
#endif

#include "shared_library.hpp"
#include "zarr_device/cuda_io.hpp"
#include "zarr_device/errors.hpp"

namespace zarr_device::cuda {

#ifdef ZARR_DEVICE_WITH_CUFILE
namespace {

struct Symbols {
  CUfileError_t (*driver_open)() = nullptr;
  CUfileError_t (*handle_register)(CUfileHandle_t*, CUfileDescr_t*) = nullptr;
  void (*handle_deregister)(CUfileHandle_t) = nullptr;
  ssize_t (*read)(CUfileHandle_t, void*, std::size_t, off_t, off_t) = nullptr;
} g_cufile;

std::string describe(CUfileError_t status) {
  return "cuFile error " + std::to_string(static_cast<int>(status.err)) +
         (status.err == CU_FILE_CUDA_DRIVER_ERROR
              ? " (CUDA driver error " + std::to_string(static_cast<int>(status.cu_err)) + ")"
              : "");
}

}  // namespace

CuFile::CuFile() {
  // Opening cuFile's driver without a GPU can block for a long time: look for one first.
  if (cuda_device_count() == 0) {
    error_ = "no CUDA device";
    return;
  }
  const auto library =
      open_shared_library(EnvironmentVariable::kCufileLibrary, {"libcufile.so.0", "libcufile.so"});
  void* lib = library.handle;
  if (!lib) {
    error_ = "cuFile not found (it ships with the CUDA toolkit and the nvidia-cufile wheel): " +
             library.errors;
    return;
  }
  library_ = library.name;
  g_cufile.driver_open =
      reinterpret_cast<decltype(g_cufile.driver_open)>(dlsym(lib, "cuFileDriverOpen"));
  g_cufile.handle_register =
      reinterpret_cast<decltype(g_cufile.handle_register)>(dlsym(lib, "cuFileHandleRegister"));
  g_cufile.handle_deregister =
      reinterpret_cast<decltype(g_cufile.handle_deregister)>(dlsym(lib, "cuFileHandleDeregister"));
  g_cufile.read = reinterpret_cast<decltype(g_cufile.read)>(dlsym(lib, "cuFileRead"));
  if (!g_cufile.driver_open || !g_cufile.handle_register || !g_cufile.handle_deregister ||
      !g_cufile.read) {
    error_ = library_ + " lacks the cuFile API this build expects";
    return;
  }
  const CUfileError_t opened = g_cufile.driver_open();
  if (opened.err != CU_FILE_SUCCESS) {
    error_ = "the cuFile driver did not open: " + describe(opened);
    return;
  }
  available_ = true;
  error_.clear();
}

std::unique_ptr<CuFile::File> CuFile::open(int fd, std::string name) const {
  std::unique_ptr<File> file(new File());
  file->fd_ = fd;  // owned from here on, whatever happens
  file->path_ = std::move(name);
  if (!available_) throw DeviceError("cuFile is not available: " + error_);
  CUfileDescr_t descr{};
  descr.handle.fd = file->fd_;
  descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  CUfileHandle_t handle = nullptr;
  const CUfileError_t status = g_cufile.handle_register(&handle, &descr);
  if (status.err != CU_FILE_SUCCESS) {
    throw StoreError("cuFile could not register '" + file->path_ + "': " + describe(status));
  }
  file->handle_ = handle;
  return file;
}

CuFile::File::~File() {
  if (handle_) g_cufile.handle_deregister(static_cast<CUfileHandle_t>(handle_));
  if (fd_ >= 0) ::close(fd_);
}

std::size_t CuFile::File::read(void* device_base, std::size_t size, off_t file_offset,
                               off_t device_offset) const {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = g_cufile.read(static_cast<CUfileHandle_t>(handle_), device_base,
                                      size - done, file_offset + static_cast<off_t>(done),
                                      device_offset + static_cast<off_t>(done));
    if (got < 0) {
      throw StoreError(
          "cuFile read of '" + path_ + "' failed (" +
          (got == -1 ? std::string(std::strerror(errno)) : "cuFile error " + std::to_string(-got)) +
          ")");
    }
    if (got == 0) break;  // end of file
    done += static_cast<std::size_t>(got);
  }
  return done;
}

#else

CuFile::CuFile() {
  error_ = "this build has no cuFile support (cufile.h was not found when it was built)";
}

std::unique_ptr<CuFile::File> CuFile::open(int fd, std::string /*name*/) const {
  if (fd >= 0) ::close(fd);
  throw DeviceError("cuFile is not available: " + error_);
}

CuFile::File::~File() = default;

std::size_t CuFile::File::read(void*, std::size_t, off_t, off_t) const { return 0; }

#endif

const CuFile& CuFile::instance() {
  static const CuFile cufile;
  return cufile;
}

}  // namespace zarr_device::cuda
