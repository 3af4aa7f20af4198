#pragma once
// Signals with their sender's pid. Asio's signal_set does not say who sent a signal; rankrun
// needs to know, because Slurm signals every process of a job step itself (rankrun's workers
// included): a signal from the step's slurmstepd must not be sent to the workers a second time.
// An SA_SIGINFO handler writes (signal, sender) to a pipe that the io_context reads.
//
// Every signal disposition rankrun sets is set here: the handler for the signals the job
// listens to, what the launcher, the guardian and the end of a job ignore, and the defaults a
// new worker starts with.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <vector>

namespace rankrun::launcher {

/// The launcher: a closed console (SIGPIPE) must not end rankrun before it stopped the workers.
void ignore_broken_pipes();

/// rankrun, first thing, before any thread starts: SIGCONT is blocked in every thread, so that
/// the spawner's signalfd sees each time rankrun is continued after a stop (which still happens
/// whatever the mask). Workers start with an empty mask (default_signals_for_exec()'s caller);
/// the other programs rankrun starts (gdb) get an empty mask too.
void block_continue_signal() noexcept;

/// The guardian: a terminal's signals and a closed console do not end it (it has its own
/// session already).
void ignore_terminal_signals();

/// In a new worker, between fork and exec (async-signal-safe): every signal to its default, so
/// that a signal arriving then does not run rankrun's handlers there.
void default_signals_for_exec() noexcept;

class UserSignals {
 public:
  using Handler = std::function<void(int signo, pid_t sender)>;
  /// Installs the handler for `signals` (at most one UserSignals at a time in a process).
  UserSignals(boost::asio::io_context& io, std::vector<int> signals, Handler handler);
  /// Restores the default dispositions.
  ~UserSignals();
  UserSignals(const UserSignals&) = delete;
  UserSignals& operator=(const UserSignals&) = delete;

  /// No more handler calls; the signals get their default disposition back, or (`ignore`) are
  /// ignored from now on: what is left of the job (reports to node 0, the cleanup) is short and
  /// bounded, and a late signal (Slurm sends several) must not cut it.
  void stop(bool ignore = false);

 private:
  struct Record {
    int signo;
    pid_t sender;
  };
  void read();

  std::vector<int> m_signals;
  Handler m_handler;
  int m_write_fd = -1;
  boost::asio::posix::stream_descriptor m_read;
  Record m_record{};
  bool m_stopped = false;
};

}  // namespace rankrun::launcher
