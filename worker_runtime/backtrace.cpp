#include "worker_runtime/backtrace.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

// Header-only Boost.Stacktrace; the build selects the libbacktrace backend
// (BOOST_STACKTRACE_USE_BACKTRACE) and links libbacktrace (worker_runtime/CMakeLists.txt).
#include <boost/stacktrace/frame.hpp>
#include <boost/stacktrace/safe_dump_to.hpp>

namespace rankrun::worker {

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
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

std::string format_frame(int n, const FrameInfo& frame) {
  std::string out = "#" + std::to_string(n) + " ";
  out += frame.function.empty() ? std::string("??") : frame.function;
  if (!frame.file.empty()) {
    out += " at ";
    out += frame.file;
    if (frame.line > 0) out += ":" + std::to_string(frame.line);
  }
  char hex[2 + 2 * sizeof(std::uintptr_t) + 1];
  if (!frame.object.empty()) {
    std::snprintf(hex, sizeof hex, "0x%" PRIxPTR, frame.offset);
    out += " (" + frame.object + "+" + hex + ")";
  } else {
    std::snprintf(hex, sizeof hex, "0x%" PRIxPTR, frame.address);
    out += " (" + std::string(hex) + ")";
  }
  return out;
}

FrameInfo resolve_frame(std::uintptr_t address, bool return_address) {
  FrameInfo info;
  info.address = address;
  if (address == 0) return info;
  // A return address may already lie in the next function (after a call that never
  // returns) or on the next line: look up the call instruction instead.
  const std::uintptr_t lookup = return_address ? address - 1 : address;
  const boost::stacktrace::frame frame(reinterpret_cast<boost::stacktrace::frame::native_frame_ptr_t>(lookup));
  info.function = frame.name();
  info.file = frame.source_file();
  info.line = info.file.empty() ? 0 : frame.source_line();
  Dl_info object{};
  if (::dladdr(reinterpret_cast<void*>(lookup), &object) != 0 && object.dli_fname && *object.dli_fname) {
    info.object = object.dli_fname;
    info.offset = address - reinterpret_cast<std::uintptr_t>(object.dli_fbase);
  }
  return info;
}

// noinline: `skip` counts this frame, so it must exist.
__attribute__((noinline)) std::size_t capture_frames(void** out, std::size_t capacity, std::size_t skip) noexcept {
  if (capacity == 0) return 0;
  // safe_dump_to starts at its caller and ends the frames with a null one.
  std::size_t count = boost::stacktrace::safe_dump_to(skip + 1, out, capacity * sizeof(void*));
  while (count > 0 && out[count - 1] == nullptr) --count;
  return count;
}

std::string symbolize_frames(void* const* frames, std::size_t count, std::size_t exact) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out += format_frame(static_cast<int>(i), resolve_frame(reinterpret_cast<std::uintptr_t>(frames[i]), i != exact));
    out += '\n';
  }
  return out;
}

// noinline: `skip` counts this frame, so it must exist.
__attribute__((noinline)) std::string capture_backtrace(int skip) {
  constexpr std::size_t k_max_frames = 128;
  void* frames[k_max_frames];
  const std::size_t count = capture_frames(frames, k_max_frames, static_cast<std::size_t>(skip < 0 ? 0 : skip) + 1);
  std::string out;
  try {
    out = symbolize_frames(frames, count, count);
  } catch (...) {
    out.clear();
  }
  return out;
}

}  // namespace rankrun::worker
