#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "worker_runtime/backtrace.hpp"
#include "worker_runtime/stack_dump_handler.hpp"

using rankrun::worker::format_frame;
using rankrun::worker::FrameInfo;

// Named frames for the captured stacks to show (external linkage, never inlined). The file
// is built with debug information whatever the build type (tests/worker_runtime.cmake), so
// file and line are asserted too.
namespace backtrace_test {

int g_capture_line = 0;
int g_caller_line = 0;

__attribute__((noinline)) std::string innermost_frame(int skip) {
  g_capture_line = __LINE__ + 1;
  std::string trace = rankrun::worker::capture_backtrace(skip);
  asm volatile("" ::: "memory");  // keep this frame: no tail call
  return trace;
}

__attribute__((noinline)) std::string calling_frame(int skip) {
  g_caller_line = __LINE__ + 1;
  std::string trace = innermost_frame(skip);
  asm volatile("" ::: "memory");
  return trace;
}

int g_raise_line = 0;

__attribute__((noinline)) void waiting_for_a_stack_request(int signo) {
  g_raise_line = __LINE__ + 1;
  ::raise(signo);
  asm volatile("" ::: "memory");
}

std::string line(const std::string& text, int n) {
  std::istringstream in(text);
  std::string out;
  for (int i = 0; i <= n && std::getline(in, out);) ++i;
  return out;
}

}  // namespace backtrace_test

TEST_CASE("a frame names its function, source line and object") {
  FrameInfo f;
  f.address = 0x7f0000403766;
  f.function = "example::fail_on_purpose(int)";
  f.file = "/src/examples/main.cpp";
  f.line = 86;
  f.object = "/bin/trainer";
  f.offset = 0x3766;
  CHECK(format_frame(0, f) == "#0 example::fail_on_purpose(int) at /src/examples/main.cpp:86 (/bin/trainer+0x3766)");
  // Without a line, without debug information, without a symbol, without an object.
  f.line = 0;
  CHECK(format_frame(1, f) == "#1 example::fail_on_purpose(int) at /src/examples/main.cpp (/bin/trainer+0x3766)");
  f.file.clear();
  CHECK(format_frame(2, f) == "#2 example::fail_on_purpose(int) (/bin/trainer+0x3766)");
  f.function.clear();
  CHECK(format_frame(3, f) == "#3 ?? (/bin/trainer+0x3766)");
  f.object.clear();
  CHECK(format_frame(12, f) == "#12 ?? (0x7f0000403766)");
}

TEST_CASE("a captured backtrace names this test's functions, files and lines") {
  const std::string trace = backtrace_test::calling_frame(0);
  INFO(trace);
  const std::string first = backtrace_test::line(trace, 0);
  const std::string second = backtrace_test::line(trace, 1);
  // Innermost first: the function that called capture_backtrace, at the line of the call.
  // (The functions' names carry the [abi:cxx11] tag of their std::string result.)
  CHECK(first.rfind("#0 backtrace_test::innermost_frame[abi:cxx11](int) at ", 0) == 0);
  CHECK(first.find("test_worker_backtrace.cpp:" + std::to_string(backtrace_test::g_capture_line) + " (") !=
        std::string::npos);
  CHECK(first.find("rankrun_worker_tests+0x") != std::string::npos);
  CHECK(second.rfind("#1 backtrace_test::calling_frame[abi:cxx11](int) at ", 0) == 0);
  CHECK(second.find("test_worker_backtrace.cpp:" + std::to_string(backtrace_test::g_caller_line) + " (") !=
        std::string::npos);
  // capture_backtrace itself is left out; doctest's runner and main are further out.
  CHECK(trace.find("capture_backtrace") == std::string::npos);
  CHECK(trace.find(" main ") != std::string::npos);

  // `skip` leaves out that many more frames.
  const std::string skipped = backtrace_test::calling_frame(1);
  INFO(skipped);
  CHECK(skipped.rfind("#0 backtrace_test::calling_frame[abi:cxx11](int) at ", 0) == 0);
}

TEST_CASE("a frame is resolved from its address") {
  const auto address = reinterpret_cast<std::uintptr_t>(&backtrace_test::waiting_for_a_stack_request);
  const FrameInfo f = rankrun::worker::resolve_frame(address, false);
  CHECK(f.address == address);
  CHECK(f.function == "backtrace_test::waiting_for_a_stack_request(int)");
  CHECK(std::filesystem::path(f.file).filename() == "test_worker_backtrace.cpp");
  CHECK(f.line > 0);
  CHECK(std::filesystem::path(f.object).filename() == "rankrun_worker_tests");
  CHECK(f.offset > 0);
  CHECK(f.offset < address);
  // An address nothing is loaded at: no function, file or object.
  const FrameInfo none = rankrun::worker::resolve_frame(0x10, true);
  CHECK(none.function.empty());
  CHECK(none.file.empty());
  CHECK(none.object.empty());
  CHECK(format_frame(0, none) == "#0 ?? (0x10)");
}

TEST_CASE("the stack-dump handler writes the interrupted thread's resolved frames") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("rankrun-backtrace-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int signo = SIGRTMIN + 8;
  ::setenv("RANKRUN_STACK_DIR", dir.c_str(), 1);
  ::setenv("RANKRUN_STACK_SIGNAL", std::to_string(signo).c_str(), 1);
  rankrun::worker::install_stack_dump_handler();
  ::unsetenv("RANKRUN_STACK_DIR");
  ::unsetenv("RANKRUN_STACK_SIGNAL");
  const fs::path file = dir / (std::to_string(::getpid()) + ".stack");
  REQUIRE(fs::exists(file));  // created at installation: rankrun may ask

  backtrace_test::waiting_for_a_stack_request(signo);
  // The handler writes raw frames at once; the symbolizer thread then replaces them.
  const std::string wanted = "backtrace_test::waiting_for_a_stack_request(int) at ";
  std::string dump;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(file);
    dump.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (dump.find(wanted) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  INFO(dump);
  CHECK(dump.rfind("Thread " + std::to_string(::getpid()) + " (native, innermost first):\n#0 ", 0) == 0);
  CHECK(dump.find(wanted) != std::string::npos);
  CHECK(dump.find("test_worker_backtrace.cpp:" + std::to_string(backtrace_test::g_raise_line) + " (") !=
        std::string::npos);
  // The dump starts at the interrupted frame: neither the handler nor the unwinder shows.
  CHECK(dump.find("stack_dump_handler.cpp") == std::string::npos);
  CHECK(dump.find("capture_frames") == std::string::npos);
  CHECK(!fs::exists(dir / (std::to_string(::getpid()) + ".stack.tmp")));
  fs::remove_all(dir);
}

TEST_CASE("leading runtime frames are dropped and the rest renumbered") {
  using rankrun::worker::drop_leading_frames;
  const std::string trace =
      "#0 ?? (/lib/libstdc++.so.6+0xa8e1a)\n"
      "#1 __cxa_throw (/lib/libstdc++.so.6+0xa8e3d)\n"
      "#2 step() at /src/t.cpp:12 (./trainer+0x4c)\n"
      "#3 ?? (/lib/libstdc++.so.6+0x10)\n";
  CHECK(drop_leading_frames(trace, "libstdc++") ==
        "#0 step() at /src/t.cpp:12 (./trainer+0x4c)\n"
        "#1 ?? (/lib/libstdc++.so.6+0x10)\n");
  CHECK(drop_leading_frames(trace, "not-there") == trace);
  CHECK(drop_leading_frames("", "libstdc++").empty());
}

TEST_CASE("terminate traces start at the thrower, whatever sits above the runtime frames") {
  using rankrun::worker::strip_terminate_frames;
  const std::string tail =
      "#4 __cxxabiv1::__terminate(void (*)()) (/lib/libstdc++.so.6+0xa8e1a)\n"
      "#5 __cxa_throw (/lib/libstdc++.so.6+0xa8e3d)\n"
      "#6 rankrun::Collectives::barrier() at /src/collectives.cpp:40 (/lib/librankrun_worker.so.0.1+0x4c)\n"
      "#7 main at /src/t.cpp:3 (./trainer+0x10)\n";
  const std::string expected =
      "#0 rankrun::Collectives::barrier() at /src/collectives.cpp:40 (/lib/librankrun_worker.so.0.1+0x4c)\n"
      "#1 main at /src/t.cpp:3 (./trainer+0x10)\n";
  // Optimised: the handler.
  CHECK(strip_terminate_frames(
            "#0 rankrun::(anonymous namespace)::on_terminate() (/lib/librankrun_worker.so.0.1+0x9)\n" + tail, 1) ==
        expected);
  // Debug build under ASan: more frames of the handler, and of the sanitizer.
  CHECK(strip_terminate_frames("#0 ?? (/lib/libasan.so.8+0x5)\n#1 ?? (/lib/librankrun_worker.so.0.1+0x10)\n"
                               "#2 ?? (/lib/librankrun_worker.so.0.1+0x20)\n" +
                                   tail,
                               1) == expected);
  // Static libstdc++: fall back to counting.
  CHECK(strip_terminate_frames("#0 ?? (./t+0x1)\n#1 ?? (./t+0x2)\n#2 main (./t+0x3)\n", 1) ==
        "#0 ?? (./t+0x2)\n#1 main (./t+0x3)\n");
}
