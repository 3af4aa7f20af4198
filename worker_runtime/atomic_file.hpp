#pragma once

#include <string>
#include <string_view>

namespace rankrun::worker {

/// Writes `contents` to `path` so that a reader sees the old file or the whole new one,
/// never a prefix: the launcher may read the error file while a dying worker writes it.
/// Creates missing parent directories. Throws std::system_error naming the path.
void write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace rankrun::worker
