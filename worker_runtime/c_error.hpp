#pragma once
// How the C API hands a message out (worker.h): copied into the caller's buffer, NUL-terminated,
// cut to its size. Internal to the library.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace rankrun::worker {

inline void copy_error(const std::string& message, char* err, std::size_t err_size) {
  if (!err || err_size == 0) return;
  const std::size_t n = std::min(message.size(), err_size - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

}  // namespace rankrun::worker
