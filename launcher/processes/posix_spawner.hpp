#pragma once

#include <sys/resource.h>
// Starts workers through Boost.Process with a clean slate: its own session and process
// group, a parent-death signal, an empty signal mask, default signal dispositions, and no
// file descriptor of rankrun's beyond its stdin/stdout/stderr.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <array>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <boost/process/async_pipe.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/processes/spawner.hpp"
#include "base/unique_fd.hpp"

namespace rankrun::launcher {

/// Resolves `name` the way execvp would (PATH search unless it contains '/'). Throws
/// LaunchError naming the program and the fix when it is missing or not executable.
std::string resolve_executable(const std::string& name, const std::string& path_env, const std::string& what);

/// Starts workers through Boost.Process, reads their output on the io_context, and owns the one
/// reap loop of rankrun: every child (workers, orphans adopted as a subreaper, debuggers) is
/// reaped by reap_children(), on SIGCHLD or when called; the workers' exits are reported in the
/// order they ended (each worker's pidfd in an epoll set, exit_order.hpp), however late rankrun
/// looks.
class PosixSpawner final : public Spawner {
 public:
  /// With a `cgroup_procs_fd` (an open cgroup.procs, -1: none), each worker moves itself into
  /// that cgroup before exec. `before_reap` runs before each round of waitpid(), while exited
  /// children are still zombies (the shared-memory tracker confirms creators then). Workers get
  /// `worker_files` as their limit on open files (rankrun raises its own: the limit it was
  /// started with); a zero rlim_max leaves them rankrun's.
  PosixSpawner(boost::asio::io_context& io, int cgroup_procs_fd, std::function<void()> before_reap,
               rlimit worker_files = {});
  /// SIGKILLs and reaps the workers still running (an exception must not leak GPU processes).
  ~PosixSpawner() override;

  void listen(WorkerListener listener) override;
  pid_t start(int slot, const std::vector<std::string>& argv, const EnvMap& env) override;
  void place(int slot, const WorkerPlacement& placement) override;
  void signal(int slot, int signo) override;
  void stop_reading(int slot) override;
  void stop() override;

  /// waitpid() for every child that has exited; workers' exits go to the listener, in the order
  /// they ended.
  void reap_children();
  /// A worker's record of when it failed (stacks/<pid>.failed), for exits seen together.
  void read_failure_records(std::function<std::optional<std::int64_t>(pid_t)> reader) {
    m_failure_record = std::move(reader);
  }

 private:
  struct Stream {
    std::unique_ptr<boost::process::async_pipe> pipe;
    std::array<char, 65536> buffer{};
    bool open = false;
  };
  struct Slot {
    pid_t pid = -1;
    bool running = false;
    bool signalled = false;  // signal() reached it while it ran
    UniqueFd pidfd;          // in m_exits while the worker runs (-1: the kernel has no pidfd_open)
    Stream out, err;
  };

  void read(int slot, StreamId id);
  void close(int slot, StreamId id);
  void wait_sigchld();
  void wait_continued();
  /// The pids of the workers whose pidfds became readable since the last call, in that order.
  std::vector<pid_t> ended_in_order();
  /// Reads the SIGCONTs that came since the last call: rankrun was stopped and continued then.
  void note_continued();
  Stream& stream(int slot, StreamId id);

  boost::asio::io_context& m_io;
  int m_cgroup_procs_fd;
  rlimit m_worker_files;
  std::function<void()> m_before_reap;
  std::function<std::optional<std::int64_t>(pid_t)> m_failure_record;
  WorkerListener m_listener;
  boost::asio::signal_set m_sigchld;
  UniqueFd m_exits;  // epoll set of the running workers' pidfds: its ready list is their exit order
  boost::asio::posix::stream_descriptor m_continued_fd;  // signalfd of SIGCONT (block_continue_signal())
  std::chrono::steady_clock::time_point m_continued{};
  // The earliest the exits of the next round of reaping can have happened: its last look that
  // found no more exits, its last signal to a worker, its last start of one.
  std::chrono::steady_clock::time_point m_earliest_exit{};
  std::array<char, 128> m_continued_buf{};
  std::vector<std::unique_ptr<Slot>> m_slots;
  std::vector<WorkerPlacement> m_placements;  // by slot, kept across attempts (--numa-binding)
  bool m_stopped = false;
};

}  // namespace rankrun::launcher
