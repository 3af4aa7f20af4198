// The job as one node of several, through a fake rendezvous backend: the test plays the other
// nodes (a round forming, another node's failure, a lost node, a new round, the store host
// gone) and checks what this node does with its workers and what it tells the rest of the job.
// No process is started and no socket opened.

#include <doctest/doctest.h>
#include <signal.h>

#include <functional>
#include <memory>
#include <vector>

#include "job_harness.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::testing;
using namespace std::chrono_literals;

namespace {

/// Node `node_rank` of `nodes` nodes of `nproc` workers each.
LaunchConfig node_config(int nproc, int nodes, int node_rank) {
  auto c = config(nproc);
  c.nnodes = nodes;
  c.node_rank = node_rank;
  c.hosts_store = false;
  c.master_addr = "10.9.0.1";
  c.master_port = 29500;
  return c;
}

rdzv::Round round_of(int nodes, int nproc, int node_rank, int round = -1) {
  std::vector<cluster::NodeRecord> records;
  for (int n = 0; n < nodes; ++n)
    records.push_back({n, "10.9.0." + std::to_string(n + 1), nproc, "job", "i" + std::to_string(n)});
  rdzv::Round r;
  r.map = cluster::plan_nodes(records, nodes);
  r.node_rank = node_rank;
  r.host = "10.9.0." + std::to_string(node_rank + 1);
  r.round = round;
  return r;
}

cluster::StopNotice failure_on_node_0(int code) {
  cluster::StopNotice n;
  n.kind = cluster::StopKind::Failure;
  n.node_rank = 0;
  n.host = "10.9.0.1";
  n.rank = 0;
  n.local_rank = 0;
  n.status = ExitStatus::exited(code);
  n.restartable = true;
  return n;
}

cluster::StopNotice notice_of(cluster::StopKind kind) {
  cluster::StopNotice n;
  n.kind = kind;
  return n;
}

/// Steps played on the job's io_context in order: each runs once its condition holds (looked
/// at every 5 ms).
struct Play {
  explicit Play(boost::asio::io_context& io) : timer(io) {}
  Play& when(std::function<bool()> ready, std::function<void()> act) {
    steps.push_back({std::move(ready), std::move(act)});
    return *this;
  }
  void start() {
    timer.expires_after(5ms);
    timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      while (next < steps.size() && steps[next].ready()) steps[next++].act();
      if (next < steps.size()) start();
    });
  }
  struct Step {
    std::function<bool()> ready;
    std::function<void()> act;
  };
  boost::asio::steady_timer timer;
  std::vector<Step> steps;
  std::size_t next = 0;
};

struct NodeHarness : Harness {
  NodeHarness(LaunchConfig c, std::function<FakeWorker(int, int)> script)
      : Harness(std::move(c), std::move(script)), play(io) {
    backend = std::make_shared<FakeBackend::State>();
  }
  rdzv::Hooks& hooks() { return backend->hooks; }
  int run_play() {
    play.start();
    return run();
  }
  Play play;
};

}  // namespace

TEST_CASE("nodes: the workers start only once the round formed, with the round's ranks and the store it names") {
  NodeHarness h(node_config(2, 2, 1), [](int, int) { return runs_until_signalled(); });
  h.play
      .when([&] { return h.backend->started; },
            [&] {
              CHECK(h.spawner.starts.empty());  // nothing before the rendezvous
              h.hooks().formed(round_of(2, 2, 1));
            })
      .when([&] { return h.spawner.starts.size() == 2; }, [&] { h.hooks().notice(0, failure_on_node_0(3)); });
  CHECK(h.run_play() == 3);  // the root cause's code, on every node
  REQUIRE(h.spawner.starts.size() == 2);
  const auto& env = h.spawner.starts[1].env;
  CHECK(env.at("RANK") == "3");
  CHECK(env.at("WORLD_SIZE") == "4");
  CHECK(env.at("GROUP_RANK") == "1");
  CHECK(env.at("MASTER_ADDR") == "10.9.0.1");
  CHECK(env.at("MASTER_PORT") == "29500");
  CHECK(h.backend->attempts == std::vector<int>{0});
  // Another node's failure: this node's workers are stopped, and it publishes no stop of its own.
  CHECK(h.spawner.signals_to(0, SIGTERM) == 1);
  CHECK(h.spawner.signals_to(1, SIGTERM) == 1);
  CHECK(h.backend->published.empty());
  REQUIRE(h.backend->result);
  CHECK(h.backend->result->node_rank == 1);
  CHECK(h.backend->result->exit_code == 3);
  REQUIRE(h.backend->result->rows.size() == 2);
  CHECK(h.backend->result->rows[0].find("rank 2 (local 0") == 0);
  CHECK(h.backend->stopped_with == 3);
}

TEST_CASE("nodes: a local failure is published as the attempt's notice, and the job ends when the notice comes back") {
  NodeHarness h(node_config(2, 2, 1),
                [](int, int slot) { return slot == 1 ? exits(4, 30ms) : runs_until_signalled(); });
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(2, 2, 1)); })
      .when([&] { return !h.backend->published.empty() && !h.spawner.alive(0); },
            [&] {
              const auto& [attempt, n] = h.backend->published.front();
              CHECK(attempt == 0);
              CHECK(n.kind == cluster::StopKind::Failure);
              CHECK(n.rank == 3);
              CHECK(n.local_rank == 1);
              CHECK(n.node_rank == 1);
              CHECK(n.host == "10.9.0.2");
              CHECK(n.status == ExitStatus::exited(4));
              CHECK(n.restartable);
              CHECK_FALSE(h.backend->ended_with);  // cleaned up, but the notice decides
              h.hooks().notice(0, n);
            });
  CHECK(h.run_play() == 4);
  CHECK(h.backend->published.size() == 1);
  CHECK(h.backend->ended_with == 4);
}

TEST_CASE("nodes: ranks that all exit 0 say so; success comes with the coordinator's notice") {
  NodeHarness h(node_config(2, 2, 0), [](int, int) { return exits(0); });
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(2, 2, 0)); })
      .when([&] { return !h.backend->done.empty(); },
            [&] {
              CHECK(h.backend->done == std::vector<int>{0});
              CHECK_FALSE(h.backend->ended_with);
              h.hooks().notice(0, notice_of(cluster::StopKind::Success));
            });
  CHECK(h.run_play() == 0);
  CHECK(h.backend->published.empty());
  CHECK(h.backend->ended_with == 0);
}

TEST_CASE("nodes: a lost node ends the job with 122 and no restart, even with restarts left") {
  auto c = node_config(1, 3, 2);
  c.max_restarts = 3;
  NodeHarness h(c, [](int, int) { return runs_until_signalled(); });
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(3, 1, 2)); })
      .when([&] { return h.spawner.starts.size() == 1; },
            [&] {
              auto n = notice_of(cluster::StopKind::NodeLost);
              n.node_rank = 1;
              h.hooks().notice(0, n);
            });
  CHECK(h.run_play() == k_exit_node_lost);
  CHECK(h.spawner.starts.size() == 1);
  CHECK(h.backend->attempts == std::vector<int>{0});
}

TEST_CASE("nodes: another node's failure restarts every worker after the barrier, with restarts left") {
  auto c = node_config(1, 2, 1);
  c.max_restarts = 1;
  NodeHarness h(c, [](int attempt, int) { return attempt == 0 ? runs_until_signalled() : exits(0); });
  h.backend->hold_attempts = true;
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(2, 1, 1)); })
      .when([&] { return static_cast<bool>(h.backend->held); }, [&] { h.backend->release(); })
      .when([&] { return h.spawner.starts.size() == 1; }, [&] { h.hooks().notice(0, failure_on_node_0(3)); })
      .when([&] { return h.backend->attempts.size() == 2; },
            [&] {
              CHECK(h.spawner.starts.size() == 1);  // the barrier holds the restart
              h.backend->release();
            })
      .when([&] { return !h.backend->done.empty(); },
            [&] { h.hooks().notice(1, notice_of(cluster::StopKind::Success)); });
  CHECK(h.run_play() == 0);
  REQUIRE(h.spawner.starts.size() == 2);
  CHECK(h.spawner.starts[1].env.at("TORCHELASTIC_RESTART_COUNT") == "1");
  CHECK(h.backend->attempts == std::vector<int>{0, 1});
  CHECK(h.backend->done == std::vector<int>{1});
}

TEST_CASE("nodes: a membership change rejoins, and the next round restarts the workers with its ranks") {
  auto c = node_config(2, 3, 0);
  c.rdzv = RdzvKind::C10d;
  c.min_nodes = 1;
  c.max_restarts = 0;
  NodeHarness h(c, [](int attempt, int) { return attempt == 0 ? runs_until_signalled() : exits(0); });
  const int round1 = cluster::attempt_id(1, 0);
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(2, 2, 1, 0)); })
      .when([&] { return h.spawner.starts.size() == 2; },
            [&] {
              auto n = notice_of(cluster::StopKind::Membership);
              n.why = "node 10.9.0.3 joined";
              n.next_round = 1;
              n.next_nodes = 3;
              h.hooks().notice(0, n);
            })
      .when([&] { return h.backend->rejoins == 1; },
            [&] {
              CHECK(h.spawner.starts.size() == 2);  // no worker before the next round
              h.hooks().formed(round_of(3, 2, 2, 1));
            })
      .when([&] { return !h.backend->done.empty(); },
            [&] { h.hooks().notice(round1, notice_of(cluster::StopKind::Success)); });
  CHECK(h.run_play() == 0);
  REQUIRE(h.spawner.starts.size() == 4);
  CHECK(h.backend->attempts == std::vector<int>{0, round1});
  CHECK(h.spawner.starts[0].env.at("RANK") == "2");
  CHECK(h.spawner.starts[3].env.at("RANK") == "5");
  CHECK(h.spawner.starts[3].env.at("WORLD_SIZE") == "6");
  CHECK(h.spawner.starts[3].env.at("GROUP_RANK") == "2");
  // A membership change does not use up --max-restarts (0 here).
  CHECK(h.spawner.starts[3].env.at("TORCHELASTIC_RESTART_COUNT") == "0");
  CHECK(h.backend->done == std::vector<int>{round1});
}

TEST_CASE("nodes: losing the store host stops this node's workers with 123 and sends no result") {
  NodeHarness h(node_config(1, 2, 1), [](int, int) { return runs_until_signalled(); });
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(2, 1, 1)); })
      .when([&] { return h.spawner.starts.size() == 1; }, [&] { h.hooks().lost("connection reset by peer"); });
  CHECK(h.run_play() == k_exit_store_host_lost);
  CHECK(h.spawner.signals_to(0, SIGTERM) == 1);
  REQUIRE(h.backend->ended_with);
  CHECK_FALSE(h.backend->result);
}

TEST_CASE("nodes: a node whose own failure went out as the root cause exits with its code when the store host goes") {
  NodeHarness h(node_config(2, 2, 1),
                [](int, int slot) { return slot == 1 ? exits(4, 30ms) : runs_until_signalled(); });
  h.play.when([&] { return h.backend->started; }, [&] { h.hooks().formed(round_of(2, 2, 1)); })
      .when([&] { return !h.backend->published.empty() && !h.spawner.alive(0); },
            [&] { h.hooks().lost("connection reset by peer"); });
  CHECK(h.run_play() == 4);
  REQUIRE(h.backend->ended_with);
  CHECK(*h.backend->ended_with == 4);
  CHECK_FALSE(h.backend->result);  // nobody to send it to
}

TEST_CASE("nodes: a signal while the round forms ends the wait; no worker starts") {
  NodeHarness h(node_config(1, 2, 1), [](int, int) { return runs_until_signalled(); });
  std::function<void(Job&)> during = [&](Job& job) { job.signal_received(SIGTERM); };
  CHECK(h.run(during) == 128 + SIGTERM);
  CHECK(h.spawner.starts.empty());
  CHECK(h.backend->aborted_by == std::vector<int>{SIGTERM});
  CHECK(h.backend->left_early);
  CHECK_FALSE(h.backend->ended_with);
}

TEST_CASE("nodes: the rendezvous failing ends the node with its code before any worker") {
  NodeHarness h(node_config(1, 2, 1), [](int, int) { return runs_until_signalled(); });
  h.play.when([&] { return h.backend->started; },
              [&] { h.hooks().failed(EarlyEnd::RendezvousFailed, "nodes missing at the timeout"); });
  CHECK(h.run_play() == k_exit_rendezvous);
  CHECK(h.spawner.starts.empty());
  CHECK(h.backend->left_early);
}
