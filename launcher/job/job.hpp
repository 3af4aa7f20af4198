#pragma once
// The effectful shell around SupervisorPolicy: spawns the workers, routes their output, turns
// child exits, signals and timers into events, and carries out the policy's actions. Runs on
// one io_context thread (the one that spawned the workers: PR_SET_PDEATHSIG follows the thread).

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/console.hpp"
#include "launcher/failure_report.hpp"
#include "launcher/hang_monitor.hpp"
#include "launcher/line_splitter.hpp"
#include "launcher/options.hpp"
#include "launcher/posix_spawner.hpp"
#include "launcher/rank_plan.hpp"
#include "launcher/supervisor_policy.hpp"
#include "launcher/worker_env.hpp"

namespace rankrun::launcher {

/// What the supervisor needs to start an attempt, from run_launch().
struct AttemptSetup {
  /// Called before each attempt (restart count given); returns the environment shared by the
  /// attempt's workers (store address, fresh key space).
  std::function<JobEnv(int restart_count)> job_env;
  /// How far the ranks got in the store rendezvous, for the summary (may be empty).
  std::function<std::string()> arrivals;
  /// Called once every worker is reaped and the summary printed (stops the store, so that
  /// io_context::run() returns).
  std::function<void()> on_finish;
  /// Called before each round of waitpid(), while exited children are still zombies.
  std::function<void()> before_reap;
  /// The job cgroup's cgroup.procs, which each worker enters before exec (-1: none).
  int cgroup_procs_fd = -1;
  /// Called once the workers of an attempt are gone (or will not die), before the next attempt
  /// or the summary: ends what is left of the job (daemons, shared memory) and calls back
  /// with true when some process could not be killed.
  std::function<void(std::size_t workers, std::function<void(bool unkillable)>)> clean_up;
  /// Watches each attempt for hangs (null: no hang detection).
  HangMonitor* hang = nullptr;
};

class Supervisor {
 public:
  Supervisor(boost::asio::io_context& io, const LaunchConfig& config, EnvMap parent_env, std::string run_dir,
             AttemptSetup setup);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  /// Starts the workers; io.run() then drives everything. exit_code() is set when io stops.
  void start();
  int exit_code() const { return m_exit_code; }
  /// The hang monitor has printed its diagnosis: stop the job as hung.
  void hang_detected() { dispatch(event::HangDetected{}); }
  /// Local ranks of the workers still running, for reporting from outside (the store).
  const std::vector<pid_t> worker_pids() const;

 private:
  struct Stream {
    std::unique_ptr<boost::process::async_pipe> pipe;
    LineSplitter splitter;
    int console_fd = -1;  // -1: not shown on the console
    int file_fd = -1;     // -1: no redirect/tee file
    bool keep_tail = false;
    bool open = false;
    std::array<char, 65536> buffer{};
  };
  struct Worker {
    WorkerPlan plan;
    pid_t pid = -1;
    std::string error_file;
    std::chrono::steady_clock::time_point started, ended;
    Stream out, err;
    std::deque<std::string> stderr_tail;
  };

  void start_attempt();
  void spawn(Worker& w, const JobEnv& job, const std::string& attempt_dir);
  void read_stream(Worker& w, Stream& s);
  void emit_line(Worker& w, Stream& s, std::string_view line);
  void close_stream(Stream& s);
  void wait_signals();
  void wait_children();
  void reap();
  void dispatch(const Event& event);
  void carry_out(const Action& action);
  void signal_workers(int signo);
  void after_drain(std::function<void()> then);
  void clean_up_then(std::function<void(bool unkillable)> then);
  void give_up_on_workers();
  void check_drained();
  void finish(int exit_code);
  RunSummary summarize(int exit_code) const;
  std::string attempt_dir(int restart_count) const;

  boost::asio::io_context& m_io;
  const LaunchConfig& m_config;
  EnvMap m_parent_env;
  std::string m_run_dir;
  AttemptSetup m_setup;
  std::vector<std::string> m_argv;  // argv[0] resolved
  bool m_default_omp = false;
  SupervisorPolicy m_policy;
  Console m_console;
  std::vector<std::unique_ptr<Worker>> m_workers;
  boost::asio::signal_set m_signals;
  boost::asio::signal_set m_sigchld;
  boost::asio::steady_timer m_grace_timer;
  boost::asio::steady_timer m_drain_timer;
  boost::asio::steady_timer m_kill_timer;
  std::function<void()> m_after_drain;
  std::chrono::steady_clock::time_point m_job_start;
  int m_exit_code = 0;
  bool m_finished = false;
  bool m_giving_up = false;  // a worker survived SIGKILL; the job ends with kExitUnkillable
};

}  // namespace rankrun::launcher
