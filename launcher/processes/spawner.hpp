#pragma once
// The seam between a job and its processes: the Job starts, signals and hears from its workers
// only through a Spawner. PosixSpawner (posix_spawner.hpp) is the real one; the tests use a
// fake that starts nothing, so the job's lifecycle is tested without processes.

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/types/env_map.hpp"
#include "launcher/types/streams.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/processes/exit_order.hpp"

namespace rankrun::launcher {

/// Everything that happens to a started worker, in order: output chunks, each stream's end,
/// and its exit (the exit may come before the streams end: a daemon can hold them open).
/// Exits come in the order the workers ended, with when rankrun saw each (exit_order.hpp).
/// Called on the job's io_context thread.
struct WorkerListener {
  std::function<void(int slot, StreamId stream, std::string_view bytes)> output;
  std::function<void(int slot, StreamId stream)> closed;
  std::function<void(int slot, ExitStatus status, ExitSeen seen)> exited;
};

/// Where a worker runs (--numa-binding): its CPUs (empty: rankrun's own) and the NUMA node its
/// memory should come from (-1: the kernel's default policy).
struct WorkerPlacement {
  std::vector<int> cpus;
  int memory_node = -1;
};

class Spawner {
 public:
  virtual ~Spawner() = default;

  /// Where worker `slot` runs from its next start() on (a spawner that cannot place keeps its
  /// default).
  virtual void place(int /*slot*/, const WorkerPlacement& /*placement*/) {}

  /// Where events go; set once, before the first start().
  virtual void listen(WorkerListener listener) = 0;
  /// Starts worker `slot` (its local rank) with `argv` (argv[0] a resolved path) and exactly
  /// `env`; returns its pid. A slot is reused by the next attempt. Throws LaunchError.
  virtual pid_t start(int slot, const std::vector<std::string>& argv, const EnvMap& env) = 0;
  /// Sends `signo` to the worker's process group (the worker and its children).
  virtual void signal(int slot, int signo) = 0;
  /// Stops reading the worker's output (a daemon it started holds it open); each stream still
  /// open reports closed().
  virtual void stop_reading(int slot) = 0;
  /// The job is over: collect what has exited and stop listening (so that io_context::run()
  /// can return).
  virtual void stop() = 0;
};

}  // namespace rankrun::launcher
