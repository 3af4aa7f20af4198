#pragma once
// Native call stacks for failure records: glibc's backtrace() plus C++ demangling.

#include <string>

namespace rankrun::worker {

/// Pure: one line of backtrace_symbols() output ("bin(_Z3foov+0x1a) [0x4011d6]") with the
/// symbol demangled ("bin(foo()+0x1a) [0x4011d6]"). Lines without a mangled C++ name are
/// returned unchanged.
std::string demangle_backtrace_line(const std::string& line);

/// The demangled name, or `mangled` itself when it is not a C++ mangled name.
std::string demangle(const char* mangled);

/// Pure: `trace` (capture_backtrace's format) without its innermost frames that lie in a
/// file whose path contains `file_fragment`, renumbered from #0. The terminate handler drops
/// the C++ runtime's own frames this way, so the trace starts at the throw.
std::string drop_leading_frames(const std::string& trace, const std::string& file_fragment);

/// Pure: a trace taken inside a std::terminate handler, starting at the frame that threw (or
/// called std::terminate). The handler's own frames, a sanitizer's interceptor and the C++
/// runtime's terminate path are dropped by locating the first libstdc++ frame near the top,
/// which works whatever the optimisation level inlined; without one (static libstdc++) the
/// first `fallback_skip` frames are dropped instead.
std::string strip_terminate_frames(const std::string& trace, int fallback_skip);

/// The calling thread's stack, innermost first, one "#<n> <frame>" per line, leaving out
/// the innermost `skip` frames (the failure handler's own).
std::string capture_backtrace(int skip);

}  // namespace rankrun::worker
