#include "worker_runtime/backtrace.hpp"

#include <cxxabi.h>
#include <execinfo.h>

#include <cstdlib>
#include <memory>

namespace rankrun::worker {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

std::string demangle_backtrace_line(const std::string& line) {
  const std::size_t open = line.find('(');
  if (open == std::string::npos) return line;
  const std::size_t end = line.find_first_of("+)", open + 1);
  if (end == std::string::npos || end == open + 1) return line;
  const std::string mangled = line.substr(open + 1, end - open - 1);
  if (mangled.rfind("_Z", 0) != 0) return line;
  return line.substr(0, open + 1) + demangle(mangled.c_str()) + line.substr(end);
}

std::string drop_leading_frames(const std::string& trace, const std::string& file_fragment) {
  std::size_t begin = 0;
  while (begin < trace.size()) {
    std::size_t end = trace.find('\n', begin);
    if (end == std::string::npos) end = trace.size();
    if (trace.substr(begin, end - begin).find(file_fragment) == std::string::npos) break;
    begin = end + 1;
  }
  if (begin == 0) return trace;
  // Renumber: every line starts with "#<n> ".
  std::string out;
  int n = 0;
  for (std::size_t pos = begin; pos < trace.size();) {
    std::size_t end = trace.find('\n', pos);
    if (end == std::string::npos) end = trace.size();
    const std::string line = trace.substr(pos, end - pos);
    const std::size_t space = line.find(' ');
    out += '#' + std::to_string(n++) + (space == std::string::npos ? " " + line : line.substr(space)) + '\n';
    pos = end + 1;
  }
  return out;
}

// noinline: `skip` counts this frame, so it must exist.
__attribute__((noinline)) std::string capture_backtrace(int skip) {
  constexpr int k_max_frames = 128;
  void* frames[k_max_frames];
  const int count = ::backtrace(frames, k_max_frames);
  std::unique_ptr<char*, void (*)(void*)> symbols(::backtrace_symbols(frames, count), std::free);
  std::string out;
  const int first = skip + 1;
  for (int i = first; i < count; ++i) {
    out += '#';
    out += std::to_string(i - first);
    out += ' ';
    out += symbols ? demangle_backtrace_line(symbols.get()[i]) : std::string("?");
    out += '\n';
  }
  return out;
}

}  // namespace rankrun::worker
