#pragma once
// Native call stacks for failure records and stack dumps, through Boost.Stacktrace on its
// libbacktrace backend: every frame names its function, its source file and line where the
// object file carries debug information, and the object file and offset it lies at.
//
//   #0 example::fail_on_purpose(int) at /src/examples/cpp_store_allreduce/main.cpp:86 (/bin/trainer+0x3766)
//   #1 __libc_start_call_main at ../sysdeps/nptl/libc_start_call_main.h:58 (/lib/x86_64-linux-gnu/libc.so.6+0x271ca)
//   #2 _start (/bin/trainer+0x2f21)
//
// Capturing (capture_frames) is async-signal-safe; resolving a frame reads debug information
// and allocates, so it is not, and happens outside signal handlers (stack_dump_handler.cpp).

#include <cstddef>
#include <cstdint>
#include <string>

namespace rankrun::worker {

/// The demangled name, or `mangled` itself when it is not a C++ mangled name.
std::string demangle(const char* mangled);

/// One frame of a call stack, resolved.
struct FrameInfo {
  std::uintptr_t address = 0;  // as captured
  std::string function;        // demangled; empty when unknown
  std::string file;            // source file; empty without debug information
  std::size_t line = 0;        // 0 when unknown
  std::string object;          // the executable or shared library holding the address; empty when unknown
  std::uintptr_t offset = 0;   // address - the object's load address
};

/// Pure: "#<n> <function> at <file>:<line> (<object>+0x<offset>)". An unknown function reads
/// "??"; " at <file>:<line>" is left out without a file (and ":<line>" without a line); an
/// unknown object gives "(0x<address>)".
std::string format_frame(int n, const FrameInfo& frame);

/// Resolves one captured address. `return_address`: the address is where a call returns to
/// (every captured frame but the one a signal interrupted), so the call itself, one byte
/// before, is what is looked up; otherwise the address itself is.
FrameInfo resolve_frame(std::uintptr_t address, bool return_address);

/// Async-signal-safe: stores the calling thread's stack, innermost first, into `out` (at most
/// `capacity` frames), leaving out this function's own frame and then `skip` more; returns
/// how many frames were stored. Every frame is a return address.
std::size_t capture_frames(void** out, std::size_t capacity, std::size_t skip) noexcept;

/// Resolves `frames[0, count)` and formats them one per line, numbered from #0. `exact` is the
/// index of a frame holding the interrupted instruction itself rather than a return address
/// (a signal handler's view), or `count` when there is none.
std::string symbolize_frames(void* const* frames, std::size_t count, std::size_t exact);

/// Pure: `trace` (capture_backtrace's format) without its innermost frames that lie in a
/// file whose path contains `file_fragment`, renumbered from #0. The terminate handler drops
/// the C++ runtime's own frames this way, so the trace starts at the throw.
std::string drop_leading_frames(const std::string& trace, const std::string& file_fragment);

/// Pure: a trace taken inside a std::terminate handler, starting at the frame that threw (or
/// called std::terminate). The handler's own frames and the C++ runtime's terminate path are
/// dropped by locating the first libstdc++ frame near the top, which works whatever the
/// optimisation level inlined; without one (static libstdc++) the first `fallback_skip`
/// frames are dropped instead.
std::string strip_terminate_frames(const std::string& trace, int fallback_skip);

/// The calling thread's stack, resolved, innermost first, one format_frame line per frame,
/// leaving out the innermost `skip` frames (the failure handler's own). Not
/// async-signal-safe. Empty when the stack could not be resolved (out of memory).
std::string capture_backtrace(int skip);

}  // namespace rankrun::worker
