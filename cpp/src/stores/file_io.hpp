// Reading and writing the bytes of an open local file: whole ranges through short reads and
// interruptions, O_DIRECT through an aligned bounce buffer, scattered reads into pieces (preadv)
// and gathered writes from them (writev). Errors are StoreErrors naming the file's path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace zarr_device::stores {

// The message of an errno value (for too many open files, what to do about it).
std::string errno_text(int err);

// Raises this process's limit on open files (RLIMIT_NOFILE) to its hard limit, when an open has
// failed with EMFILE; true when it was raised (the open may be tried again).
bool raise_open_file_limit();

// Reads until `out` is full or the file ends; returns the bytes read.
std::size_t read_at(int fd, std::span<std::byte> out, std::uint64_t offset,
                    const std::string& path);

// How many reads through the page cache (read_at, read_pieces) in this process have waited for
// the disk: their first request, made not to wait (RWF_NOWAIT), found part of their bytes
// missing from the cache. So a warm read costs no more than before, and a reader can tell cold
// data by this count growing (engine::ReadAhead then announces the chunks ahead of it).
std::uint64_t reads_from_disk();

// Reads [offset, offset + length) of a file opened with O_DIRECT, whose reads must start, end and
// land on block boundaries: the aligned blocks around the range go through a bounce buffer of this
// thread's, and `sink(data, n)` is handed the bytes asked for, in order. Returns how many it
// handed over (fewer at the end of the file).
std::size_t read_direct(int fd, std::uint64_t offset, std::size_t length, const std::string& path,
                        const std::function<void(const std::byte*, std::size_t)>& sink);

// Reads into `out` from `offset`, directly (O_DIRECT) or not; returns the bytes read.
std::size_t read_range(int fd, bool direct, std::span<std::byte> out, std::uint64_t offset,
                       const std::string& path);

// Reads the file from its start into `pieces`, in order (preadv, IOV_MAX pieces a call; O_DIRECT
// through the bounce buffer); returns the bytes read (fewer when the file is shorter).
std::size_t read_pieces(int fd, bool direct, std::span<const std::span<std::byte>> pieces,
                        const std::string& path);

// Writes `pieces` in order at the file's position (writev, IOV_MAX pieces a call, resuming after
// a short write).
void write_pieces(int fd, std::span<const std::span<const std::byte>> pieces,
                  const std::string& path);

}  // namespace zarr_device::stores
