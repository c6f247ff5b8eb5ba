// GPUDirect Storage reads: chunks stored as their elements that land whole and contiguous are read
// by cuFile straight from their files into place, in pieces on the thread pool.
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_reader.hpp"
#include "cufile_api.hpp"
#include "device_read/read_staging.hpp"

namespace zarr_device::cuda {

std::vector<Leaf> Reader::read_from_files(std::vector<Leaf> leaves) {
  constexpr std::uint64_t kGdsPiece = std::uint64_t{16} << 20;
  const auto& cufile = CuFile::instance();
  // One registered file per stored value: keys are per store, so the array is part of the name.
  using FileKey = std::pair<const Array*, std::string>;
  std::map<FileKey, std::unique_ptr<CuFile::File>> opened;
  std::map<FileKey, const Leaf*> first_leaf;
  for (const auto& leaf : leaves) {
    opened.emplace(FileKey{leaf.planned().array, leaf.planned().key}, nullptr);
    first_leaf.emplace(FileKey{leaf.planned().array, leaf.planned().key}, &leaf);
  }
  std::vector<std::map<FileKey, std::unique_ptr<CuFile::File>>::iterator> slots;
  for (auto it = opened.begin(); it != opened.end(); ++it) slots.push_back(it);
  pool_.parallel_for(slots.size(), workers_, [&](std::size_t i) {
    const Leaf& leaf = *first_leaf.at(slots[i]->first);
    const auto* files = dynamic_cast<const FileBacked*>(leaf.planned().array->store().get());
    // GPUDirect needs O_DIRECT; file systems without it (tmpfs) still work in compat mode. A
    // shard's chunks come from the version whose index was read; a chunk's file must still be
    // the size planned.
    const int fd = leaf.stored.value ? leaf.stored.value->open_file(true)
                                     : files->open_file(leaf.planned().key, true);
    if (fd < 0) return;
    struct stat st {};
    if (!leaf.stored.value &&
        (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != leaf.stored.length)) {
      ::close(fd);
      throw device_read::ValueChanged(leaf.planned().where() +
                                      ": the chunk was replaced while it was read");
    }
    try {
      slots[i]->second = cufile.open(fd, leaf.planned().key);
    } catch (const Error&) {
      // Not registrable (file system, driver): those chunks take the staging ring instead.
    }
  });
  struct Piece {
    std::size_t leaf;
    std::uint64_t offset;
    std::uint64_t length;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (!opened[{leaves[i].planned().array, leaves[i].planned().key}]) continue;
    for (std::uint64_t o = 0; o < leaves[i].stored.length; o += kGdsPiece) {
      pieces.push_back({i, o, std::min(kGdsPiece, leaves[i].stored.length - o)});
    }
  }
  ZD_CUDA_CHECK(cudaSetDevice(device_));
  pool_.parallel_for(pieces.size(), workers_, [&](std::size_t p) {
    const auto& piece = pieces[p];
    const auto& leaf = leaves[piece.leaf];
    try {
      ZD_CUDA_CHECK(cudaSetDevice(device_));
      const std::size_t got = opened.at({leaf.planned().array, leaf.planned().key})
                                  ->read(leaf.planned().destination.data, piece.length,
                                         static_cast<off_t>(leaf.stored.offset + piece.offset),
                                         static_cast<off_t>(piece.offset));
      if (got != piece.length) throw CodecError("chunk changed or vanished while it was read");
    } catch (Error& e) {
      e.add_context(leaf.planned().where());
      throw;
    }
  });
  std::vector<Leaf> rest;
  for (auto& leaf : leaves) {
    if (!opened[{leaf.planned().array, leaf.planned().key}]) rest.push_back(std::move(leaf));
  }
  return rest;
}

}  // namespace zarr_device::cuda
