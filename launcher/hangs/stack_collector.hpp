#pragma once
// Asks running workers for their stacks when a hang is diagnosed. The interface is what the
// hang monitor needs; ProcessStackCollector is the real one: a process that registered a
// handler (a <pid>.stack file in the stack directory: Python through rankrun's sitecustomize,
// native through the worker runtime) gets the stack-dump signal; a native worker without one
// gets gdb, when gdb is installed.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace rankrun::launcher {

class StackCollector {
 public:
  virtual ~StackCollector() = default;
  /// Asks each of `pids` (one per rank; -1: not running) and its descendants for their stacks,
  /// then calls `done` with one dump per entry of `pids` ("" when none came).
  virtual void collect(const std::vector<pid_t>& pids, std::function<void(std::vector<std::string> dumps)> done) = 0;
  /// Abandons a collection in progress (`done` is not called).
  virtual void cancel() = 0;
};

class ProcessStackCollector final : public StackCollector {
 public:
  /// `stack_dir`: where workers write <pid>.stack (RANKRUN_STACK_DIR); `stack_signal`: the
  /// signal that asks them (RANKRUN_STACK_SIGNAL).
  ProcessStackCollector(boost::asio::io_context& io, std::string stack_dir, int stack_signal);
  ~ProcessStackCollector() override;

  void collect(const std::vector<pid_t>& pids, std::function<void(std::vector<std::string>)> done) override;
  void cancel() override;

 private:
  void poll(std::chrono::steady_clock::time_point deadline);
  std::vector<std::string> read_dumps() const;
  void kill_debuggers();

  std::string m_stack_dir;
  int m_stack_signal;
  boost::asio::steady_timer m_timer;
  std::vector<pid_t> m_pids;
  std::vector<pid_t> m_gdb;  // gdb processes started for native ranks without a handler
  std::function<void(std::vector<std::string>)> m_done;
};

/// SIGRTMIN + 8: the signal that asks a worker for its stack. Real-time, so it collides with
/// nothing a training script is likely to use (Slurm's SIGUSR1, for one).
int stack_dump_signal();

}  // namespace rankrun::launcher
