#pragma once
// Looks at running workers for the hang monitor: their samplers' latest word and CPU time
// while they run, and their stacks when a hang is diagnosed. The interface is what the hang
// monitor needs; ProcessStackCollector is the real one:
// - a Python worker's sampler (a fresh <pid>.where in the stack directory) is asked through a
//   <pid>.ask file and answers with <pid>.pystack, without a signal;
// - a process whose sampler does not answer but that registered a handler (a <pid>.stack file:
//   Python's faulthandler, the worker runtime's) gets the stack-dump signal;
// - a native worker without either gets gdb, when gdb is installed.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <optional>
#include <vector>

#include "launcher/cluster/rank_sample.hpp"

namespace rankrun::launcher {

/// What a look at one running rank found.
struct RankReading {
  std::optional<RankSample> sample;  // its sampler's latest, if it has one
  std::optional<double> cpu;         // the rank's process's CPU seconds (all threads), if readable
};

class StackCollector {
 public:
  virtual ~StackCollector() = default;
  /// One reading per entry of `pids` (-1: not running: an empty reading).
  virtual std::vector<RankReading> read(const std::vector<pid_t>& pids) {
    return std::vector<RankReading>(pids.size());
  }
  /// Asks each of `pids` (one per rank; -1: not running) and its descendants for their stacks,
  /// then calls `done` with one dump per entry of `pids` ("" when none came).
  virtual void collect(const std::vector<pid_t>& pids, std::function<void(std::vector<std::string> dumps)> done) = 0;
  /// Abandons a collection in progress (`done` is not called).
  virtual void cancel() = 0;
  /// The flight recorder dumps (torch's JSON: the generic recorder's, then NCCL's) that the
  /// samplers which answered the last collect() wrote, one list per entry of its `pids`.
  virtual std::vector<std::vector<std::string>> flight_dumps() const { return {}; }
  /// A rank that ended: the first line of the collective timeout it died of, when its sampler
  /// said so (<pid>.timeout), and the flight recorder dumps it left then.
  virtual std::optional<std::string> collective_timeout(pid_t /*pid*/) const { return std::nullopt; }
  virtual std::vector<std::string> flight_dumps_of(pid_t /*pid*/) const { return {}; }
};

class ProcessStackCollector final : public StackCollector {
 public:
  /// `stack_dir`: the open directory where workers write <pid>.stack (RANKRUN_STACK_DIR; it
  /// stays open while the collector lives): everything in it is reached through it, following
  /// no link; `stack_signal`: the signal that asks them (RANKRUN_STACK_SIGNAL).
  ProcessStackCollector(boost::asio::io_context& io, int stack_dir, int stack_signal);
  ~ProcessStackCollector() override;

  std::vector<RankReading> read(const std::vector<pid_t>& pids) override;
  void collect(const std::vector<pid_t>& pids, std::function<void(std::vector<std::string>)> done) override;
  void cancel() override;
  std::vector<std::vector<std::string>> flight_dumps() const override;
  std::optional<std::string> collective_timeout(pid_t pid) const override;
  std::vector<std::string> flight_dumps_of(pid_t pid) const override;

 private:
  /// The process of `root`'s tree whose sampler speaks for it: the first with a <pid>.where.
  std::optional<pid_t> sampled_process(pid_t root) const;
  /// A byte on the sampler's <pid>.wake FIFO, so that it answers an ask at once.
  void wake_sampler(pid_t pid) const;
  void wait_for_answers(std::chrono::steady_clock::time_point deadline);
  void signal_the_rest();
  void poll(std::chrono::steady_clock::time_point deadline);
  std::vector<std::string> read_dumps() const;
  void kill_debuggers();

  /// <pid><suffix>: a file of the stack directory.
  static std::string file_of(pid_t pid, const char* suffix) { return std::to_string(pid) + suffix; }

  int m_stack_dir;
  int m_stack_signal;
  boost::asio::steady_timer m_timer;
  std::vector<pid_t> m_pids;
  std::vector<std::optional<pid_t>> m_asked;  // by entry of m_pids: the sampler asked, until it answers
  std::vector<pid_t> m_answered;              // by entry of m_pids: the sampler that answered (-1: none)
  std::vector<pid_t> m_silent;                // by entry of m_pids: the sampler that did not (-1: none)
  std::vector<pid_t> m_gdb;                   // gdb processes started for native ranks without a handler
  std::function<void(std::vector<std::string>)> m_done;
};

/// SIGRTMIN + 8: the signal that asks a worker for its stack. Real-time, so it collides with
/// nothing a training script is likely to use (Slurm's SIGUSR1, for one).
int stack_dump_signal();

}  // namespace rankrun::launcher
