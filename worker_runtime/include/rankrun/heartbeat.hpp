#pragma once
// A background thread that tells the launcher this rank is alive and how far it got, by
// writing rankrun/hb/<rank> = "<unix_ms> <step>" (see store_keys.hpp) every interval.
// Costs nothing unless constructed; one store connection of its own while it runs.
// Public header: C++17.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "rankrun/worker_context.hpp"

namespace rankrun {

struct HeartbeatOptions {
  /// Also bounds each connection attempt and store call of the thread. Left at its default,
  /// RANKRUN_HEARTBEAT_INTERVAL_MS (set by rankrun from --heartbeat-timeout) replaces it.
  std::chrono::milliseconds interval{std::chrono::seconds(5)};
};

class Heartbeat {
 public:
  /// Starts the thread when the context has a store; otherwise does nothing (a world of one
  /// outside a launcher). Store failures never reach the trainer: the thread retries at the
  /// next interval and keeps the message for last_error().
  explicit Heartbeat(const WorkerContext& context, HeartbeatOptions options = {});
  /// Stops and joins the thread: at most one interval (a store call in flight).
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Sets the step reported by the next heartbeats. Cheap (an atomic store).
  void step(std::int64_t n);
  std::int64_t current_step() const;
  /// Heartbeats written so far.
  std::uint64_t beats() const;
  bool running() const;
  /// The last store error the thread hit, empty if none.
  std::string last_error() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace rankrun
