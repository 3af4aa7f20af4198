#pragma once
// Everything a trainer needs to join a rankrun job, in one object:
//
//   int train(int argc, char** argv) {
//     rankrun::WorkerSession session;                 // env, store, heartbeat
//     rankrun::DistributedSampler sampler(n, session.context());
//     for (int epoch = 0; ...) {
//       sampler.set_epoch(epoch);
//       for (...) { ...; session.step(++step); }
//       session.collectives().barrier("epoch-" + std::to_string(epoch));
//     }
//     return 0;
//   }
//   RANKRUN_RECORD(train)                              // failure record on exceptions
//
// Public header: C++17.

#include <cstdint>
#include <memory>

#include "rankrun/collectives.hpp"
#include "rankrun/heartbeat.hpp"
#include "rankrun/worker_context.hpp"

namespace rankrun {

struct SessionOptions {
  CollectiveOptions collectives;
  /// Run the heartbeat thread (only when the job has a store).
  bool heartbeat = true;
  HeartbeatOptions heartbeat_options;
  /// install_failure_handler() on construction.
  bool failure_handler = true;
};

class WorkerSession {
 public:
  /// Reads the process environment; throws EnvError naming every bad variable, or
  /// WorkerError when the store cannot be reached.
  explicit WorkerSession(SessionOptions options = {});
  WorkerSession(const WorkerContext& context, SessionOptions options = {});
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  const WorkerContext& context() const { return m_context; }
  int rank() const { return m_context.rank; }
  int world_size() const { return m_context.world_size; }
  Collectives& collectives() { return m_collectives; }
  /// Progress for the heartbeat (no-op without one).
  void step(std::int64_t n);
  /// nullptr when heartbeats are off.
  Heartbeat* heartbeat() { return m_heartbeat.get(); }

 private:
  WorkerContext m_context;
  Collectives m_collectives;
  std::unique_ptr<Heartbeat> m_heartbeat;
};

}  // namespace rankrun
