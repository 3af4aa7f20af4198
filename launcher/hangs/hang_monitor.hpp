#pragma once
// Watches a running attempt for hangs (hang_policy.hpp decides), and when one is found,
// diagnoses it before anything is killed: asks every live rank for its stack (Python through
// faulthandler, native through the worker runtime's handler, else gdb), prints the dumps
// prefixed by rank, a line per rank and a verdict, then hands over to the supervisor.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/console.hpp"
#include "launcher/exit_status.hpp"
#include "launcher/hang_policy.hpp"
#include "launcher/hang_report.hpp"

namespace rankrun::launcher {

/// What the store knows about a rank, read when a hang is reported.
struct RankStoreView {
  std::optional<CollectiveState> collective;
  std::optional<double> heartbeat_age;
  std::optional<std::int64_t> step;
  std::string last_key;
};

class HangMonitor {
 public:
  struct Hooks {
    std::function<RankStoreView(int local_rank)> store_view;
    /// Called once the diagnosis is printed: the supervisor stops the job as hung.
    std::function<void()> hung;
  };

  /// `stack_dir`: where workers write <pid>.stack (RANKRUN_STACK_DIR); `stack_signal`: the
  /// signal that asks them (RANKRUN_STACK_SIGNAL).
  HangMonitor(boost::asio::io_context& io, HangTimeouts timeouts, std::string stack_dir, int stack_signal,
              Console& console, Hooks hooks);

  /// A new attempt: `pids` by local rank, `ranks` global ranks by local rank; dumps are also
  /// saved to `<attempt_dir>/<local_rank>/stacks.txt` when `attempt_dir` is not empty.
  void start_attempt(const std::vector<pid_t>& pids, const std::vector<int>& ranks, std::string attempt_dir);
  void on_output(int local_rank);
  void on_exit(int local_rank, const ExitStatus& status);
  void on_heartbeat(int local_rank);
  void on_progress(int local_rank);
  void on_rendezvous(int local_rank);
  /// No more checks (the attempt is ending).
  void stop();

  const HangTimeouts& timeouts() const { return m_timeouts; }

 private:
  void arm();
  void on_timer();
  void diagnose(const HangFinding& finding);
  void collect_dumps(const HangFinding& finding, HangTime deadline);
  void report(const HangFinding& finding);
  RankActivity* rank(int local_rank);

  boost::asio::io_context& m_io;
  HangTimeouts m_timeouts;
  std::string m_stack_dir;
  int m_stack_signal;
  Console& m_console;
  Hooks m_hooks;
  boost::asio::steady_timer m_timer;
  std::optional<HangTime> m_armed_for;
  std::vector<RankActivity> m_ranks;
  std::vector<pid_t> m_pids;
  std::vector<int> m_global;
  std::vector<std::optional<ExitStatus>> m_status;
  std::vector<pid_t> m_gdb;  // gdb processes started for native ranks without a handler
  std::string m_attempt_dir;
  bool m_stopped = true;
  bool m_diagnosing = false;
};

/// SIGRTMIN + 8: the signal that asks a worker for its stack. Real-time, so it collides with
/// nothing a training script is likely to use (Slurm's SIGUSR1, for one).
int stack_dump_signal();

}  // namespace rankrun::launcher
