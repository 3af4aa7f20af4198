#include <doctest/doctest.h>

#include "launcher/report/failure_report.hpp"

using namespace rankrun::launcher;

namespace {
RunSummary failed_run() {
  RunSummary s;
  s.entrypoint = "train.py";
  s.reason = StopReason::Failure;
  s.root = 1;
  s.exit_code = 3;
  for (int i = 0; i < 3; ++i) {
    RankReport r;
    r.rank = r.local_rank = i;
    r.pid = 100 + i;
    r.status = i == 1 ? ExitStatus::exited(3) : ExitStatus::killed(15);
    r.stopped_by_rankrun = i != 1;
    s.ranks.push_back(r);
  }
  s.ranks[1].stderr_tail = {"Traceback (most recent call last):", "ValueError: boom"};
  return s;
}
}  // namespace

TEST_CASE("the root cause comes first, the others are labelled terminated") {
  const auto text = format_summary(failed_run());
  const auto root_row = text.find("exit 3  <- root cause");
  const auto rank0_row = text.find("terminated by rankrun (SIGTERM)");
  REQUIRE(root_row != std::string::npos);
  REQUIRE(rank0_row != std::string::npos);
  CHECK(root_row < rank0_row);
  CHECK(text.find("train.py FAILED") != std::string::npos);
  CHECK(text.find("Root cause: rank 1 (local_rank 1, pid 101) exited with code 3") != std::string::npos);
  CHECK(text.find("    ValueError: boom") != std::string::npos);
  CHECK(text.find("rankrun: exit code 3 (rank 1's)") != std::string::npos);
}

TEST_CASE("the error file's message and traceback are shown") {
  auto s = failed_run();
  s.ranks[1].error = ErrorRecord{"ValueError: boom", "Traceback:\n  line 3", "1"};
  s.ranks[1].error_file = "/x/error.json";
  const auto text = format_summary(s);
  CHECK(text.find("  error: ValueError: boom") != std::string::npos);
  CHECK(text.find("  traceback (from /x/error.json):\n    Traceback:\n      line 3\n") != std::string::npos);
}

TEST_CASE("invalid device ordinal under pinning gets the fix") {
  auto s = failed_run();
  s.pinned = true;
  s.ranks[1].stderr_tail = {"RuntimeError: CUDA error: invalid device ordinal"};
  CHECK(format_summary(s).find("hint: rankrun gives each worker exactly one GPU") != std::string::npos);
  s.pinned = false;
  CHECK(format_summary(s).find("hint:") == std::string::npos);
}

TEST_CASE("success and signal summaries") {
  RunSummary s;
  s.entrypoint = "x";
  s.ranks.resize(2);
  s.ranks[0].status = s.ranks[1].status = ExitStatus::exited(0);
  CHECK(format_summary(s).find("all 2 ranks exited 0") != std::string::npos);
  s.reason = StopReason::Signal;
  s.signal = 2;
  s.exit_code = 130;
  const auto text = format_summary(s);
  CHECK(text.find("rankrun received SIGINT") != std::string::npos);
  CHECK(text.find("exit code 130 (128 + SIGINT)") != std::string::npos);
}

TEST_CASE("a traceback that is both in the error file and on stderr is shown once") {
  auto s = failed_run();
  ErrorRecord e;
  e.message = "std::runtime_error: boom";
  e.traceback = "#0 example::fail(int) at train.cpp:12\n#1 main at train.cpp:30";
  s.ranks[1].error = e;
  s.ranks[1].stderr_tail = {"loading shard 3", "terminate called: std::runtime_error: boom",
                            "  #0 example::fail(int) at train.cpp:12", "  #1 main at train.cpp:30"};
  const auto text = format_summary(s);
  const auto count = [&text](const std::string& needle) {
    std::size_t n = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  CHECK(count("example::fail(int) at train.cpp:12") == 1);
  CHECK(count("main at train.cpp:30") == 1);
  // What stderr adds to the traceback stays.
  CHECK(text.find("    loading shard 3") != std::string::npos);
  CHECK(text.find("    terminate called: std::runtime_error: boom") != std::string::npos);
  CHECK(text.find("last 2 lines of its stderr") != std::string::npos);
}

TEST_CASE("multi-node: a root cause on another node is named with its host, stderr and error") {
  RunSummary s;
  s.entrypoint = "train.py";
  s.reason = StopReason::Remote;
  s.exit_code = 3;
  s.node_label = "node 0 (10.0.0.1)";
  RankReport r;
  r.rank = 0;
  r.status = ExitStatus::killed(15);
  r.stopped_by_rankrun = true;
  s.ranks.push_back(r);
  cluster::StopNotice n;
  n.kind = cluster::StopKind::Failure;
  n.node_rank = 2;
  n.host = "10.0.0.3";
  n.rank = 4;
  n.local_rank = 0;
  n.status = ExitStatus::exited(3);
  n.stderr_tail = {"boom"};
  n.error = ErrorRecord{"ValueError: bad", "", ""};
  s.job_notice = n;
  const auto text = format_summary(s);
  CHECK(text.find("train.py FAILED on node 2 (10.0.0.3)") != std::string::npos);
  CHECK(text.find("terminated by rankrun (SIGTERM), because rank 4 failed") != std::string::npos);
  CHECK(text.find("Root cause: rank 4 (local 0) on node 2 (10.0.0.3) exited with code 3\n  error: ValueError: bad\n"
                  "  last 1 line of its stderr:\n    boom\n") != std::string::npos);
  CHECK(text.find("exit code 3 (rank 4's, on node 2)") != std::string::npos);

  // Its own time, as its node knew it (no two hosts' clocks compared).
  n.ms = 2310;
  s.job_notice = n;
  CHECK(format_summary(s).find("Root cause: rank 4 (local 0) on node 2 (10.0.0.3) exited with code 3 after 2.31s\n") !=
        std::string::npos);
  n.ms_exact = false;
  s.job_notice = n;
  CHECK(format_summary(s).find("exited with code 3 by 2.31s\n") != std::string::npos);
  n.ms = -1;

  n.kind = cluster::StopKind::NodeLost;
  n.ranks = "ranks 4-5";
  s.job_notice = n;
  s.reason = StopReason::NodeLost;
  s.exit_code = k_exit_node_lost;
  const auto lost = format_summary(s);
  CHECK(lost.find("train.py stopped: node 2 (10.0.0.3) was lost (ranks 4-5)") != std::string::npos);
  CHECK(lost.find("exit code 122 (node 2 lost)") != std::string::npos);
}

TEST_CASE("multi-node: a node that lost the store host tells one story, even when its workers failed first") {
  // Node 0's rankrun is gone: this node's workers fail at once ("connection closed by peer"),
  // then its link to node 0 times out. The report says the store host was lost, once.
  auto s = failed_run();
  s.node_label = "node 1 (10.0.0.2)";
  s.store_host_lost = true;
  s.exit_code = k_exit_store_host_lost;
  const auto text = format_summary(s);
  CHECK(text.find("train.py stopped: node 1 (10.0.0.2) lost the store host") != std::string::npos);
  CHECK(text.find("Root cause: node 1 (10.0.0.2) lost the store host") != std::string::npos);
  CHECK(text.find("<- root cause") == std::string::npos);
  CHECK(text.find("Root cause: rank") == std::string::npos);
  CHECK(text.find("exit code 123 (the store host was lost)") != std::string::npos);
  CHECK(text.find("rank 1's") == std::string::npos);
  // Its own failure had gone out as the root cause before: that stays the story, and the loss
  // is said after it.
  s.root_sent = true;
  s.exit_code = 1;
  const auto own = format_summary(s);
  CHECK(own.find("train.py FAILED on node 1 (10.0.0.2), then lost the store host") != std::string::npos);
  CHECK(own.find("<- root cause") != std::string::npos);
  CHECK(own.find("Root cause: rank") != std::string::npos);
  s.root_sent = false;
  // A restart barrier that timed out is not called a lost store host.
  s.exit_code = k_exit_rendezvous;
  const auto barrier = format_summary(s);
  CHECK(barrier.find("the nodes were not all ready for the restart") != std::string::npos);
  CHECK(barrier.find("exit code 121 (the rendezvous failed)") != std::string::npos);
}

TEST_CASE("rankrun's own failure is the root cause; workers it never started say so") {
  auto s = failed_run();
  s.reason = StopReason::Internal;
  s.root.reset();
  s.exit_code = k_exit_internal;
  s.own_failure = "cannot create /logs/attempt_1/2: No space left on device; check --log-dir";
  s.ranks[1].status = ExitStatus::killed(15);
  s.ranks[2].status.reset();
  s.ranks[2].pid = 0;
  const auto text = format_summary(s);
  CHECK(text.find("rankrun: train.py stopped: rankrun could not go on") != std::string::npos);
  CHECK(text.find("Root cause: rankrun could not go on: cannot create /logs/attempt_1/2: No space left on device; "
                  "check --log-dir\n") != std::string::npos);
  CHECK(text.find("  2      2      -         not started") != std::string::npos);
  CHECK(text.find("<- root cause") == std::string::npos);
  CHECK(text.find("rankrun: exit code 118 (rankrun's own failure)") != std::string::npos);
}
