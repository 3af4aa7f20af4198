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

/// The calling thread's stack, innermost first, one "#<n> <frame>" per line, leaving out
/// the innermost `skip` frames (the failure handler's own).
std::string capture_backtrace(int skip);

}  // namespace rankrun::worker
