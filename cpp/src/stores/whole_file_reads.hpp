// Many small files read whole in one system call, through io_uring: for each file the kernel
// opens it beneath a directory (RESOLVE_BENEATH, as FileTree does), reads it, reads a byte past
// the caller's room (to know it ended there) and closes it, with descriptors of the ring's own.
// Threads that open, read and close files themselves contend for the process's descriptor table, so
// that 16 of them read small files no faster than 8 (measured on a 16-core H200 host, 16 KiB files
// in the page cache: 0.91 us a file from 16 threads, 0.87 from 8; 0.53 from 16 threads each
// submitting 32 files at a time here; bench/probe_uring_opens.cpp). Linux only; where the kernel or
// a sandbox refuses io_uring, nothing is read and callers read the files their own way.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "zarr_device/store.hpp"

namespace zarr_device::stores {

struct WholeFileRead {
  std::string path;           // relative to the directory, validated by the caller
  std::span<std::byte> room;  // the most the file may hold
};

// Reads each of `reads` whole into its room, from files beneath `directory` (an open directory
// descriptor), on a ring of the calling thread's, several files at a time. A file counts as read
// (WholeRead::kRead) only when its read returned bytes and reached its end within its room;
// kAbsent when nothing is there (ENOENT, ENOTDIR); kNotRead otherwise (empty, larger than its
// room, a directory, FIFO or device, a link out of the directory, an error). False, every result
// kNotRead, where io_uring cannot be used or a room is over 1 GiB.
bool read_whole_files(int directory, std::span<const WholeFileRead> reads,
                      std::span<WholeReadResult> results);

// Whether this process can read files through io_uring (decided once, at first use).
bool whole_file_reads_available();

}  // namespace zarr_device::stores
