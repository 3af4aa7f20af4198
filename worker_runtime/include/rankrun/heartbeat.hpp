#pragma once
// A background thread that tells the launcher this rank is alive and how far it got, by
// writing rankrun/hb/<rank> = "<unix_ms> <step> ..." (see store_keys.hpp) every interval: its
// step, the section it declared (a checkpoint, an evaluation: working, not hung, until the
// section's timeout) and its data loader's batch count.
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
  /// false: a beat every interval while the process lives (the trainer's thread may be stuck).
  /// true: a beat is written only when step() or beat() was called since the last one, so
  /// that a trainer's loop that stops calling stops the heartbeat too (rankrun.progress).
  bool on_calls_only = false;
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
  /// A sign of life without a new step (what on_calls_only waits for). Cheap.
  void beat();
  /// The rank declares that it is inside `name` (one line; cut to k_max_section_name bytes) for
  /// at most `timeout`: the launcher counts it as working, not hung, until then, and names the
  /// section in its warnings. Written at once (the thread wakes). Sections do not nest: a new
  /// one replaces the current one.
  void enter_section(std::string name, std::chrono::milliseconds timeout);
  /// Leaves the current section (written at once); nothing when there is none.
  void leave_section();
  /// The data loader's count in `epoch`: batches read so far of `planned` (rankrun.data);
  /// written with the next beat. Cheap.
  void batches(std::uint64_t epoch, std::uint64_t read, std::uint64_t planned);
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
