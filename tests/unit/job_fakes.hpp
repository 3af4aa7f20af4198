#pragma once
// Fakes for the Job's seams: a spawner whose "workers" are scripted events on the io_context
// (no process is started), a stack collector that returns canned dumps, and a cleanup that
// answers at once.

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/hangs/stack_collector.hpp"
#include "launcher/processes/leftovers.hpp"
#include "launcher/processes/spawner.hpp"
#include "launcher/rdzv/backend.hpp"

namespace rankrun::launcher::testing {

/// How a fake worker behaves in one attempt.
struct FakeWorker {
  std::optional<std::chrono::milliseconds> exit_after;  // exits on its own then
  ExitStatus exit_status = ExitStatus::exited(0);
  std::set<int> survives;   // signals it ignores (SIGKILL included: unkillable)
  std::string stderr_text;  // written at start
  /// Runs when the worker starts (on the io_context's thread), with its environment.
  std::function<void(int slot, const EnvMap& env)> on_start;
};

class FakeSpawner final : public Spawner {
 public:
  struct Start {
    int slot;
    pid_t pid;
    std::vector<std::string> argv;
    EnvMap env;
  };
  struct Signal {
    int slot;
    int signo;
  };

  /// `script(attempt, slot)` says how each worker of each attempt behaves.
  FakeSpawner(boost::asio::io_context& io, std::function<FakeWorker(int attempt, int slot)> script)
      : m_io(io), m_script(std::move(script)) {}

  void listen(WorkerListener listener) override { m_listener = std::move(listener); }

  pid_t start(int slot, const std::vector<std::string>& argv, const EnvMap& env) override {
    const int attempt = m_attempts[slot]++;
    const pid_t pid = 4000000 + static_cast<pid_t>(starts.size());
    starts.push_back({slot, pid, argv, env});
    auto& w = m_running[slot];
    w = Running{};
    w.pid = pid;
    w.behaviour = m_script(attempt, slot);
    w.timer = std::make_unique<boost::asio::steady_timer>(m_io);
    if (!w.behaviour.stderr_text.empty()) {
      boost::asio::post(m_io, [this, slot, pid, text = w.behaviour.stderr_text] {
        if (m_running[slot].pid == pid && m_listener.output) m_listener.output(slot, StreamId::Err, text);
      });
    }
    if (w.behaviour.on_start) w.behaviour.on_start(slot, env);
    if (w.behaviour.exit_after) {
      w.timer->expires_after(*w.behaviour.exit_after);
      w.timer->async_wait([this, slot, pid](boost::system::error_code ec) {
        if (!ec && m_running[slot].pid == pid) exit(slot, m_running[slot].behaviour.exit_status);
      });
    }
    return pid;
  }

  void signal(int slot, int signo) override {
    signals.push_back({slot, signo});
    auto& w = m_running[slot];
    if (!w.alive || w.behaviour.survives.count(signo)) return;
    const pid_t pid = w.pid;
    boost::asio::post(m_io, [this, slot, pid, signo] {
      if (m_running[slot].pid == pid && m_running[slot].alive) exit(slot, ExitStatus::killed(signo));
    });
  }

  void stop_reading(int slot) override { close_streams(slot); }
  /// The worker now running in `slot` exits with `status` (posted: safe from any thread).
  void exit_later(int slot, ExitStatus status) {
    boost::asio::post(m_io, [this, slot, status] {
      if (m_running[slot].alive) exit(slot, status);
    });
  }

  void stop() override {
    stopped = true;
    for (auto& [slot, w] : m_running) {
      if (w.timer) w.timer->cancel();
    }
  }

  bool alive(int slot) { return m_running[slot].alive; }
  int signals_to(int slot, int signo) const {
    int n = 0;
    for (const auto& s : signals) n += s.slot == slot && s.signo == signo;
    return n;
  }

  std::vector<Start> starts;
  std::vector<Signal> signals;
  bool stopped = false;

 private:
  struct Running {
    pid_t pid = -1;
    FakeWorker behaviour;
    bool alive = true;
    bool streams_open = true;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  // As a process does: its output ends, then it is reaped.
  void exit(int slot, ExitStatus status) {
    auto& w = m_running[slot];
    w.alive = false;
    w.timer->cancel();
    close_streams(slot);
    if (m_listener.exited) m_listener.exited(slot, status, ExitSeen{std::chrono::steady_clock::now(), true});
  }

  void close_streams(int slot) {
    auto& w = m_running[slot];
    if (!w.streams_open) return;
    w.streams_open = false;
    if (m_listener.closed) {
      m_listener.closed(slot, StreamId::Out);
      m_listener.closed(slot, StreamId::Err);
    }
  }

  boost::asio::io_context& m_io;
  std::function<FakeWorker(int, int)> m_script;
  WorkerListener m_listener;
  std::map<int, int> m_attempts;
  std::map<int, Running> m_running;
};

class FakeStacks final : public StackCollector {
 public:
  void collect(const std::vector<pid_t>& pids, std::function<void(std::vector<std::string>)> done) override {
    asked = pids;
    std::vector<std::string> dumps;
    for (pid_t pid : pids) {
      dumps.push_back(
          pid > 0 ? "Thread 0x00007f (most recent call first):\n  File \"train.py\", line 7 in wait_for_peer\n" : "");
    }
    done(std::move(dumps));
  }
  void cancel() override {}

  std::vector<pid_t> asked;
};

class FakeCleanup final : public AttemptCleanup {
 public:
  void clean_up(std::size_t, std::function<void(bool)> done) override {
    ++rounds;
    done(unkillable);
  }
  void close() override { closed = true; }

  bool unkillable = false;
  int rounds = 0;
  bool closed = false;
};

/// A rendezvous backend the test drives: it records what the Job tells it, and the test plays
/// the rest of the job through its hooks (a round formed, a notice, the job lost). The barrier
/// before an attempt lets it start at once unless `hold_attempts` (then release() does).
class FakeBackend final : public rdzv::Backend {
 public:
  struct State {
    rdzv::Hooks hooks;
    rdzv::JobSide side;
    bool started = false;
    bool hold_attempts = false;
    std::vector<int> attempts;                                   // before_attempt(), in order
    std::vector<std::pair<int, cluster::StopNotice>> published;  // publish_stop()
    std::vector<int> done;                                       // attempt_done()
    int rejoins = 0;
    std::vector<int> aborted_by;               // abort_waiting() signals
    std::optional<int> ended_with;             // job_ended()'s code
    std::optional<cluster::NodeFinal> result;  // job_ended()'s result
    bool left_early = false;
    std::optional<int> stopped_with;
    std::function<void()> held;
    /// Lets the held attempt start.
    void release() {
      if (auto go = std::exchange(held, nullptr)) go();
    }
  };
  FakeBackend(std::shared_ptr<State> state, rdzv::JobSide side) : m_state(std::move(state)) {
    m_state->side = std::move(side);
  }

  void start(rdzv::Hooks hooks) override {
    m_state->hooks = std::move(hooks);
    m_state->started = true;
  }
  void start_aborted(rdzv::Hooks hooks, const std::string&, std::function<void()> done) override {
    m_state->hooks = std::move(hooks);
    done();
  }
  std::string workers_host() const override { return "10.9.0.1"; }
  std::uint16_t workers_port() const override { return 29500; }
  std::string role(int) const override { return {}; }
  std::string where() const override { return "the fake store host"; }
  void before_attempt(int attempt, std::function<void()> go) override {
    m_state->attempts.push_back(attempt);
    if (m_state->hold_attempts) {
      m_state->held = std::move(go);
    } else {
      go();
    }
  }
  void rejoin() override { ++m_state->rejoins; }
  void publish_stop(int attempt, cluster::StopNotice notice) override {
    m_state->published.emplace_back(attempt, std::move(notice));
  }
  void attempt_done(int attempt) override { m_state->done.push_back(attempt); }
  void abort_waiting(int signo, std::function<void()> done) override {
    m_state->aborted_by.push_back(signo);
    done();
  }
  void job_ended(int exit_code, std::optional<cluster::NodeFinal> result, std::function<void()> shut_down) override {
    m_state->ended_with = exit_code;
    m_state->result = std::move(result);
    shut_down();
  }
  void leave_early(std::function<void()> shut_down) override {
    m_state->left_early = true;
    shut_down();
  }
  void stop(int exit_code) override { m_state->stopped_with = exit_code; }

 private:
  std::shared_ptr<State> m_state;
};

}  // namespace rankrun::launcher::testing
