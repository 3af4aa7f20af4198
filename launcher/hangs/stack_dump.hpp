#pragma once
// Reads the stack dumps of stuck ranks: Python's faulthandler format, to find where a rank
// waits (which torch.distributed call, from which line of the user's code). Pure.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::launcher {

struct StackFrame {
  std::string file;
  int line = 0;
  std::string function;
};

struct ThreadStack {
  bool current = false;            // "Current thread" in faulthandler's output
  std::vector<StackFrame> frames;  // innermost first, as faulthandler prints them
};

/// Parses faulthandler's dump ("Thread 0x… (most recent call first):" blocks of
/// `  File "f", line N in func` lines). Lines that don't fit are skipped.
std::vector<ThreadStack> parse_faulthandler(std::string_view text);

struct WaitPoint {
  /// The torch.distributed function the user's code called and is blocked in
  /// ("all_reduce", "barrier", "init_process_group"), or empty when not in torch.distributed.
  std::string collective;
  /// The innermost frame of the user's own code: "train.py:12 in main".
  std::string user_frame;
};

/// Where the main thread (the one that runs `<module>`) waits, if the dump says.
std::optional<WaitPoint> find_wait_point(const std::vector<ThreadStack>& threads);

}  // namespace rankrun::launcher
