#pragma once
// The project's one bounded file reader: what /proc, sysfs, a secret or a certificate file
// holds, read through one descriptor (its facts from the same descriptor, so a file swapped
// between a check and the read is not the one checked). Effects.

#include <cstddef>
#include <optional>
#include <string>

namespace rankrun {

/// What read_file found.
struct FileRead {
  std::string text;        // at most max_bytes of the file
  bool opened = false;     // the open succeeded (error, if any, is then the fstat's or a read's)
  int error = 0;           // errno of the open, fstat or read that failed; 0 when none did
  bool regular = true;     // a regular file (not a directory, a FIFO, a device...)
  unsigned mode = 0;       // its permission bits (07777)
  bool truncated = false;  // it holds more than max_bytes
  bool ok() const { return error == 0; }
};

/// Up to `max_bytes` of the file at `path` (the size fstat gives is not trusted: /proc's files
/// say 0). With `regular_only`, a file that is not a regular one is not read (regular = false,
/// text empty): a FIFO would block the reader.
FileRead read_file(const std::string& path, std::size_t max_bytes, bool regular_only = false);

/// The first `max_bytes` of the file, or nullopt when it cannot be opened or read.
std::optional<std::string> read_file_head(const std::string& path, std::size_t max_bytes = 1 << 20);

/// The command line of process `pid` as one line (its arguments joined by spaces), from
/// /proc/PID/cmdline (4 KiB at most); "" for a kernel thread, nullopt when it is gone.
std::optional<std::string> command_line_of(long pid);

}  // namespace rankrun
