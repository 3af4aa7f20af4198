#include "launcher/hangs/stack_dump.hpp"

#include <charconv>

namespace rankrun::launcher {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::optional<StackFrame> parse_frame(std::string_view line) {
  // `  File "/path/x.py", line 12 in main`
  const auto open = line.find("File \"");
  if (open == std::string_view::npos) return std::nullopt;
  const auto close = line.find("\", line ", open + 6);
  if (close == std::string_view::npos) return std::nullopt;
  StackFrame f;
  f.file = std::string(line.substr(open + 6, close - open - 6));
  auto rest = line.substr(close + 8);
  const auto* end = rest.data() + rest.size();
  auto [p, ec] = std::from_chars(rest.data(), end, f.line);
  if (ec != std::errc()) return std::nullopt;
  rest.remove_prefix(static_cast<std::size_t>(p - rest.data()));
  if (starts_with(rest, " in ")) f.function = std::string(rest.substr(4));
  return f;
}

bool in_torch_distributed(const StackFrame& f) { return f.file.find("torch/distributed/") != std::string::npos; }

bool is_library(const StackFrame& f) {
  return f.file.find("/site-packages/") != std::string::npos || f.file.find("/dist-packages/") != std::string::npos ||
         starts_with(f.file, "/usr/lib/python") || starts_with(f.file, "<frozen");
}

std::string basename(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<ThreadStack> parse_faulthandler(std::string_view text) {
  std::vector<ThreadStack> threads;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    const auto line = text.substr(start, nl - start);
    start = nl + 1;
    if (starts_with(line, "Thread 0x") || starts_with(line, "Current thread 0x")) {
      ThreadStack t;
      t.current = starts_with(line, "Current");
      threads.push_back(std::move(t));
    } else if (auto f = parse_frame(line)) {
      if (threads.empty()) threads.emplace_back();  // a dump of one thread has no header
      threads.back().frames.push_back(std::move(*f));
    }
  }
  return threads;
}

std::optional<WaitPoint> find_wait_point(const std::vector<ThreadStack>& threads) {
  const ThreadStack* main = nullptr;
  for (const auto& t : threads) {
    if (!t.frames.empty() && t.frames.back().function == "<module>") main = &t;
  }
  if (!main) {
    for (const auto& t : threads) {
      if (!t.frames.empty()) {
        main = &t;
        break;
      }
    }
  }
  if (!main) return std::nullopt;
  WaitPoint w;
  const auto& frames = main->frames;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (!is_library(frames[i]) && w.user_frame.empty()) {
      w.user_frame = basename(frames[i].file) + ":" + std::to_string(frames[i].line) + " in " + frames[i].function;
      // The torch.distributed call the user made is the outermost torch frame just inside it.
      for (std::size_t j = i; j-- > 0;) {
        if (in_torch_distributed(frames[j]) && frames[j].function != "wrapper") {
          w.collective = frames[j].function;
          break;
        }
      }
    }
  }
  return w;
}

}  // namespace rankrun::launcher
