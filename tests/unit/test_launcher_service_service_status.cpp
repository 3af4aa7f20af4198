// The systemd notify messages and STATUS= lines (report/service_status.hpp).

#include <doctest/doctest.h>

#include "launcher/service/service_status.hpp"

using namespace rankrun::launcher;
using namespace std::chrono_literals;

TEST_CASE("service status: running, one node and several") {
  ServiceSnapshot s;
  s.ranks_running = 8;
  s.max_restarts = 3;
  CHECK(format_service_status(s) == "running: 8 ranks on this node (attempt 0, 0 restarts of 3)");
  s.restart_count = 1;
  s.nnodes = 3;
  s.node_rank = 1;
  s.last_step = 1200;
  CHECK(format_service_status(s) ==
        "running: 8 ranks on this node (attempt 1, 1 restart of 3), node 1 of 3, last step 1200");
  s.ranks_running = 1;
  s.last_step.reset();
  CHECK(format_service_status(s) == "running: 1 rank on this node (attempt 1, 1 restart of 3), node 1 of 3");
}

TEST_CASE("service status: waiting, stopping, done") {
  ServiceSnapshot s;
  s.state = ServiceSnapshot::State::WaitingForNodes;
  s.nnodes = 3;
  s.node_rank = 2;
  CHECK(format_service_status(s) == "waiting for nodes: rendezvous of 3 nodes (this is node 2)");
  s.state = ServiceSnapshot::State::Stopping;
  s.why = "rank 3 failed (exit 1)";
  CHECK(format_service_status(s) == "stopping: rank 3 failed (exit 1) (attempt 0, node 2 of 3)");
  s.nnodes = 1;
  s.why = "received SIGTERM\nsecond line";
  CHECK(format_service_status(s) == "stopping: received SIGTERM second line (attempt 0)");
  s.state = ServiceSnapshot::State::Done;
  s.why = "exit 0";
  CHECK(format_service_status(s) == "done: exit 0");
}

TEST_CASE("service status: notify messages") {
  CHECK(status_message("a\nb") == "STATUS=a b");
  CHECK(ready_message("running") == "READY=1\nSTATUS=running");
  CHECK(stopping_message("stopping: x") == "STOPPING=1\nSTATUS=stopping: x");
  CHECK(extend_timeout_message(36.0) == "EXTEND_TIMEOUT_USEC=36000000");
  CHECK(extend_timeout_message(0.0000015) == "EXTEND_TIMEOUT_USEC=2");
  CHECK(extend_timeout_message(-1) == "EXTEND_TIMEOUT_USEC=0");
  CHECK(std::string(k_watchdog_message) == "WATCHDOG=1");
}

TEST_CASE("service status: watchdog interval is half of WATCHDOG_USEC, for this process only") {
  CHECK(watchdog_interval(std::nullopt, std::nullopt, 42) == std::nullopt);
  CHECK(watchdog_interval(std::string("10000000"), std::nullopt, 42) == std::chrono::microseconds(5000000));
  CHECK(watchdog_interval(std::string("10000000"), std::string("42"), 42) == std::chrono::microseconds(5000000));
  CHECK(watchdog_interval(std::string("10000000"), std::string("43"), 42) == std::nullopt);
  CHECK(watchdog_interval(std::string("0"), std::nullopt, 42) == std::nullopt);
  CHECK(watchdog_interval(std::string("abc"), std::nullopt, 42) == std::nullopt);
  CHECK(watchdog_interval(std::string("10x"), std::nullopt, 42) == std::nullopt);
  CHECK(watchdog_interval(std::string("1"), std::nullopt, 42) == std::chrono::microseconds(1));
}
