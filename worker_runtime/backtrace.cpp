#include "worker_runtime/backtrace.hpp"

#include <cxxabi.h>
#include <execinfo.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
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

namespace {

// Offset of the line after the first `lines` lines of `trace`.
std::size_t skip_lines(const std::string& trace, std::size_t begin, int lines) {
  for (int i = 0; i < lines && begin < trace.size(); ++i) {
    const std::size_t end = trace.find('\n', begin);
    begin = end == std::string::npos ? trace.size() : end + 1;
  }
  return begin;
}

std::string_view line_at(const std::string& trace, std::size_t begin) {
  const std::size_t end = std::min(trace.find('\n', begin), trace.size());
  return std::string_view(trace).substr(begin, end - begin);
}

// The frames from offset `begin` on, renumbered from #0 (every line starts with "#<n> ").
std::string renumber_from(const std::string& trace, std::size_t begin) {
  std::string out;
  int n = 0;
  while (begin < trace.size()) {
    const std::string_view line = line_at(trace, begin);
    const std::size_t space = line.find(' ');
    out += '#' + std::to_string(n++);
    if (space == std::string_view::npos) {
      out += ' ';
      out += line;
    } else {
      out += line.substr(space);
    }
    out += '\n';
    begin = skip_lines(trace, begin, 1);
  }
  return out;
}

}  // namespace

std::string drop_leading_frames(const std::string& trace, const std::string& file_fragment) {
  std::size_t begin = 0;
  while (begin < trace.size() && line_at(trace, begin).find(file_fragment) != std::string_view::npos)
    begin = skip_lines(trace, begin, 1);
  return begin == 0 ? trace : renumber_from(trace, begin);
}

std::string strip_terminate_frames(const std::string& trace, int fallback_skip) {
  constexpr int k_max_handler_frames = 8;
  std::size_t begin = 0;
  for (int line = 0; line < k_max_handler_frames && begin < trace.size(); ++line) {
    if (line_at(trace, begin).find("libstdc++") != std::string_view::npos)
      return drop_leading_frames(trace.substr(begin), "libstdc++");
    begin = skip_lines(trace, begin, 1);
  }
  return renumber_from(trace, skip_lines(trace, 0, fallback_skip));
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
