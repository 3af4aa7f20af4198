// The job's lifecycle through the fake spawner: no process is started. Each case runs a whole
// Job on its own io_context (the store it hosts listens on 127.0.0.1, port chosen by the kernel).

#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <mutex>
#include <thread>

#include "job_harness.hpp"
#include "launcher/job/job.hpp"
#include "rendezvous/store_client.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::testing;
using namespace std::chrono_literals;

TEST_CASE("job: every worker exits 0; the job succeeds and everything is shut") {
  Harness h(config(3), [](int, int) { return exits(0); });
  CHECK(h.run() == 0);
  REQUIRE(h.spawner.starts.size() == 3);
  CHECK(h.spawner.signals.empty());
  CHECK(h.cleanup.rounds == 1);
  CHECK(h.cleanup.closed);
  CHECK(h.spawner.stopped);
  // What a worker is started with: the command, ${local_rank} substituted, and torchrun's
  // environment pointing at the store this job hosts.
  const auto& second = h.spawner.starts[1];
  CHECK(second.argv == std::vector<std::string>{"/opt/fake/worker", "--rank=1"});
  CHECK(second.env.at("RANK") == "1");
  CHECK(second.env.at("MASTER_PORT") == std::to_string(h.port));
  CHECK(second.env.at("TORCHELASTIC_USE_AGENT_STORE") == "True");
  CHECK(second.env.at("TORCHELASTIC_RESTART_COUNT") == "0");
}

TEST_CASE("job: fail-fast: the first failure stops the others with SIGTERM and its code is the job's") {
  Harness h(config(3), [](int, int slot) { return slot == 1 ? exits(3) : runs_until_signalled(); });
  CHECK(h.run() == 3);
  CHECK(h.spawner.signals_to(0, SIGTERM) == 1);
  CHECK(h.spawner.signals_to(2, SIGTERM) == 1);
  CHECK(h.spawner.signals_to(1, SIGTERM) == 0);  // it had already exited
  CHECK(h.spawner.signals_to(0, SIGKILL) == 0);  // it stopped within the grace period
}

TEST_CASE("job: a worker that ignores SIGTERM gets SIGKILL after the grace period") {
  Harness h(config(2), [](int, int slot) {
    if (slot == 1) return exits(4);
    FakeWorker w;
    w.survives = {SIGTERM};
    return w;
  });
  CHECK(h.run() == 4);
  CHECK(h.spawner.signals_to(0, SIGTERM) == 1);
  CHECK(h.spawner.signals_to(0, SIGKILL) == 1);
}

TEST_CASE("job: a worker that survives SIGKILL: rankrun gives up at the kill deadline and exits 125") {
  Harness h(config(2), [](int, int slot) {
    if (slot == 1) return exits(1);
    FakeWorker w;
    w.survives = {SIGTERM, SIGKILL};
    return w;
  });
  CHECK(h.run() == k_exit_unkillable);
  CHECK(h.spawner.signals_to(0, SIGKILL) == 1);
  CHECK(h.spawner.alive(0));
  CHECK(h.cleanup.rounds == 1);
}

TEST_CASE("job: a leftover the cleanup cannot kill makes a successful job exit 125") {
  Harness h(config(1), [](int, int) { return exits(0); });
  h.cleanup.unkillable = true;
  CHECK(h.run() == k_exit_unkillable);
}

TEST_CASE("job: restarts start every worker again, in a new key space, until one attempt succeeds") {
  auto c = config(2);
  c.max_restarts = 3;
  // Rank 0 of each failing attempt, as a worker would: connects to the store, looks for the key
  // the attempt before left, leaves it, then exits 1. A restart must not see the key.
  std::vector<std::thread> clients;
  std::mutex mutex;
  std::vector<bool> saw_key_before;
  FakeSpawner* spawner = nullptr;
  Harness h(c, [&](int attempt, int slot) {
    if (attempt >= 2) return exits(0);
    if (slot != 0) return runs_until_signalled();
    FakeWorker w;
    w.on_start = [&](int s, const EnvMap& env) {
      const auto port = static_cast<std::uint16_t>(std::stoi(env.at("MASTER_PORT")));
      clients.emplace_back([&, s, port] {
        rankrun::rendezvous::StoreClient client("127.0.0.1", port);
        const bool seen = client.check({"left-by-an-attempt"});
        client.set("left-by-an-attempt", "1");
        {
          std::lock_guard<std::mutex> lock(mutex);
          saw_key_before.push_back(seen);
        }
        spawner->exit_later(s, ExitStatus::exited(1));
      });
    };
    return w;
  });
  spawner = &h.spawner;
  const int code = h.run();
  for (auto& t : clients) t.join();
  CHECK(code == 0);
  CHECK(saw_key_before == std::vector<bool>{false, false});  // each attempt's key space is new
  REQUIRE(h.spawner.starts.size() == 6);
  CHECK(h.spawner.starts[4].env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(h.spawner.starts[5].env.at("TORCHELASTIC_RESTART_COUNT") == "2");
  CHECK(h.spawner.starts[4].env.at("MASTER_PORT") == std::to_string(h.port));  // the same store
  CHECK(h.cleanup.rounds == 3);                                                // after each attempt
  CHECK(std::filesystem::exists(h.dir.path + "/attempt_2/1"));
}

TEST_CASE("job: restarts stop when the budget is spent; the last failure's code is the job's") {
  auto c = config(1);
  c.max_restarts = 1;
  Harness h(c, [](int attempt, int) { return exits(attempt == 0 ? 5 : 6); });
  CHECK(h.run() == 6);
  CHECK(h.spawner.starts.size() == 2);
}

TEST_CASE("job: a signal rankrun receives is forwarded to every worker, and no restart follows") {
  auto c = config(2);
  c.max_restarts = 5;
  Harness h(c, [](int, int) { return runs_until_signalled(); });
  CHECK(h.run([](Job& job) { job.signal_received(SIGINT); }) == 128 + SIGINT);
  CHECK(h.spawner.signals_to(0, SIGINT) == 1);
  CHECK(h.spawner.signals_to(1, SIGINT) == 1);
  CHECK(h.spawner.signals_to(0, SIGTERM) == 0);
  CHECK(h.spawner.starts.size() == 2);
}

TEST_CASE("job: a second signal kills at once, without waiting for the grace period") {
  auto c = config(1);
  c.term_timeout = 60;
  Harness h(c, [](int, int) {
    FakeWorker w;
    w.survives = {SIGTERM};
    return w;
  });
  CHECK(h.run([](Job& job) {
    job.signal_received(SIGTERM);
    job.signal_received(SIGTERM);
  }) == 128 + SIGTERM);
  CHECK(h.spawner.signals_to(0, SIGKILL) == 1);
}

TEST_CASE("job: a hang (a straggler) is diagnosed with the stacks of the live ranks, then stopped: exit 124") {
  auto c = config(2);
  c.hang.exit_timeout = Seconds(0.1);
  Harness h(c, [](int, int slot) { return slot == 0 ? exits(0) : runs_until_signalled(); });
  CHECK(h.run() == k_exit_hung);
  REQUIRE(h.stacks.asked.size() == 2);
  CHECK(h.stacks.asked[0] == -1);  // exited: not asked
  CHECK(h.stacks.asked[1] == h.spawner.starts[1].pid);
  CHECK(h.spawner.signals_to(1, SIGTERM) == 1);
}
