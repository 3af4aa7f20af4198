#include <doctest/doctest.h>

#include "worker_runtime/backtrace.hpp"

using rankrun::worker::demangle_backtrace_line;

TEST_CASE("backtrace lines are demangled in place") {
  CHECK(demangle_backtrace_line("./trainer(_Z10train_stepi+0x1a) [0x4011d6]") ==
        "./trainer(train_step(int)+0x1a) [0x4011d6]");
  CHECK(demangle_backtrace_line("./t(_ZN7rankrun6worker3fooEv) [0x1]") == "./t(rankrun::worker::foo()) [0x1]");
  // C symbols, anonymous frames and odd lines stay as they are.
  CHECK(demangle_backtrace_line("/lib/libc.so.6(__libc_start_main+0xf3) [0x7f]") ==
        "/lib/libc.so.6(__libc_start_main+0xf3) [0x7f]");
  CHECK(demangle_backtrace_line("./trainer(+0x1234) [0x55]") == "./trainer(+0x1234) [0x55]");
  CHECK(demangle_backtrace_line("[0x55]") == "[0x55]");
  CHECK(demangle_backtrace_line("./t(_Znot_valid+0x1) [0x1]") == "./t(_Znot_valid+0x1) [0x1]");
}

TEST_CASE("a captured backtrace names this test's frames") {
  const std::string trace = rankrun::worker::capture_backtrace(0);
  CHECK(trace.rfind("#0 ", 0) == 0);
  CHECK(trace.find("\n#1 ") != std::string::npos);
}

TEST_CASE("leading runtime frames are dropped and the rest renumbered") {
  using rankrun::worker::drop_leading_frames;
  const std::string trace =
      "#0 /lib/libstdc++.so.6(+0xa8e1a) [0x1]\n"
      "#1 /lib/libstdc++.so.6(__cxa_throw+0x3d) [0x2]\n"
      "#2 ./trainer(step()+0x4c) [0x3]\n"
      "#3 /lib/libstdc++.so.6(+0x10) [0x4]\n";
  CHECK(drop_leading_frames(trace, "libstdc++") ==
        "#0 ./trainer(step()+0x4c) [0x3]\n"
        "#1 /lib/libstdc++.so.6(+0x10) [0x4]\n");
  CHECK(drop_leading_frames(trace, "not-there") == trace);
  CHECK(drop_leading_frames("", "libstdc++").empty());
}

TEST_CASE("terminate traces start at the thrower, whatever sits above the runtime frames") {
  using rankrun::worker::strip_terminate_frames;
  const std::string tail =
      "#4 /lib/libstdc++.so.6(+0xa8e1a) [0x1]\n"
      "#5 /lib/libstdc++.so.6(__cxa_throw+0x3d) [0x2]\n"
      "#6 /lib/librankrun_worker.so(rankrun::Collectives::barrier()+0x4c) [0x3]\n"
      "#7 ./trainer(main+0x10) [0x4]\n";
  const std::string expected =
      "#0 /lib/librankrun_worker.so(rankrun::Collectives::barrier()+0x4c) [0x3]\n"
      "#1 ./trainer(main+0x10) [0x4]\n";
  // Optimised: capture_backtrace and the handler.
  CHECK(strip_terminate_frames("#0 /lib/librankrun_worker.so(+0x10) [0x9]\n" + tail, 1) == expected);
  // Debug build under ASan: an interceptor frame too.
  CHECK(strip_terminate_frames("#0 /lib/libasan.so.8(backtrace+0x5) [0x8]\n#1 /lib/librankrun_worker.so(+0x10) [0x9]\n"
                               "#2 /lib/librankrun_worker.so(+0x20) [0xa]\n" + tail, 1) == expected);
  // Static libstdc++: fall back to counting.
  CHECK(strip_terminate_frames("#0 ./t(+0x1) [0x1]\n#1 ./t(+0x2) [0x2]\n#2 ./t(main+0x3) [0x3]\n", 1) ==
        "#0 ./t(+0x2) [0x2]\n#1 ./t(main+0x3) [0x3]\n");
}
