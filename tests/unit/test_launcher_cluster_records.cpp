#include <doctest/doctest.h>

#include <stdexcept>

#include "launcher/cluster/records.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;

TEST_CASE("node records round-trip and reject what is not one") {
  NodeRecord r{2, "10.0.0.3", 8, "job-7", "123-abc"};
  const auto back = decode_node(encode(r));
  REQUIRE(back);
  CHECK(back->node_rank == 2);
  CHECK(back->host == "10.0.0.3");
  CHECK(back->nproc == 8);
  CHECK(back->run_id == "job-7");
  CHECK(back->instance == "123-abc");
  CHECK_FALSE(decode_node(""));
  CHECK_FALSE(decode_node(R"({"record":"node","version":2,"node_rank":"x","host":"a","nproc":1})"));
  CHECK_FALSE(decode_node(R"({"record":"node","version":2,"node_rank":1,"host":"a","nproc":0})"));
  CHECK_FALSE(decode_node(R"({"record":"node","version":2,"node_rank":1,"host":"a","nproc":4294967297})"));
  CHECK_FALSE(decode_node(R"({"record":"node","version":2,"node_rank":1,"host":"a","nproc":1)"));  // cut short
  CHECK(decode_node(R"({"record":"node","version":2,"node_rank":1,"host":"a","nproc":1,"later":[1]})"));
  CHECK_FALSE(decode_node(R"({"record":"stop","version":2,"kind":"hang","node_rank":0})"));
  CHECK_FALSE(decode_node(std::string(k_max_record + 1, 'x')));
}

TEST_CASE("a record of another rankrun version is refused, and why is said") {
  NodeRecord r{2, "10.0.0.3", 8, "job-7", "123-abc"};
  auto newer = encode(r);
  newer.replace(newer.find("\"version\":2"), 11, "\"version\":3");
  CHECK_FALSE(decode_node(newer));
  REQUIRE(foreign_record(newer));
  CHECK(*foreign_record(newer) ==
        "a node runs another rankrun: its records are version 3 and this rankrun reads version 2; run the same "
        "rankrun version on every node");
  const std::string older = "rankrun-node/1\nnode_rank=1\nhost=a\nnproc=1\nrun_id=j\ninstance=i\n";
  CHECK_FALSE(decode_node(older));
  REQUIRE(foreign_record(older));
  CHECK(foreign_record(older)->find("its record is 'rankrun-node/1' (version 1)") != std::string::npos);
  CHECK_FALSE(foreign_record(encode(r)));  // this version's
  CHECK_FALSE(foreign_record("garbage"));
  CHECK_FALSE(foreign_record(R"({"version":3})"));  // no record
}

TEST_CASE("the node map gives contiguous global ranks, nodes may differ in size") {
  const auto map = plan_nodes({{1, "b", 4, "j", "i1"}, {0, "a", 2, "j", "i0"}, {2, "c", 1, "j", "i2"}}, 3);
  REQUIRE(map.nodes.size() == 3);
  CHECK(map.world_size == 7);
  CHECK(map.nodes[1].first_rank == 2);
  CHECK(map.nodes[2].first_rank == 6);
  CHECK(format_node_map(map) == "node 0 a: ranks 0-1\nnode 1 b: ranks 2-5\nnode 2 c: rank 6\n");
  CHECK(map.node_of_rank(5)->node_rank == 1);
  CHECK(map.node_of_rank(7) == nullptr);
  CHECK_THROWS_WITH_AS(plan_nodes({{0, "a", 1, "j", "i"}, {2, "c", 1, "j", "i"}}, 3),
                       "no node announced node rank 1 of 3", std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan_nodes({{0, "a", 1, "j", "i"}, {1, "b", 1, "k", "i"}}, 2),
                       doctest::Contains("node 1 (b) runs --rdzv-id=k but node 0 (a) runs --rdzv-id=j"),
                       std::invalid_argument);
}

TEST_CASE("the waiting line names who came, who is missing and the time left") {
  CHECK(format_waiting({1, 0, 1}, 4, 893.4) ==
        "waiting for nodes: 2 of 4 arrived (0,1); missing nodes 2,3; 893 s left");
  CHECK(format_waiting({}, 2, -1) == "waiting for nodes: 0 of 2 arrived; missing nodes 0,1; 0 s left");
  CHECK(parse_roster("0,2,x,1,") == std::vector<int>{0, 2, 1});
  CHECK(missing_nodes({0, 2}, 4) == std::vector<int>{1, 3});
}

TEST_CASE("keys name their node and attempt") {
  CHECK(node_in_key("lease/3", "lease/") == 3);
  CHECK_FALSE(node_in_key("lease/x", "lease/"));
  CHECK_FALSE(node_in_key("final/3", "lease/"));
  CHECK(done_in_key(done_key(4, 2)) == std::pair{4, 2});
  CHECK_FALSE(done_in_key("attempt/4/ready/2"));
}

TEST_CASE("a failure notice carries the root cause, bounded, and decides every node's exit code") {
  StopNotice n;
  n.kind = StopKind::Failure;
  n.node_rank = 2;
  n.host = "10.0.0.3";
  n.rank = 4;
  n.local_rank = 0;
  n.status = ExitStatus::exited(3);
  n.restartable = true;
  n.error = ErrorRecord{"ValueError: bad\nline two", "Traceback\n  x", "1"};
  n.error_file = "/tmp/e.json";
  for (int i = 0; i < 50; ++i) n.stderr_tail.push_back("line " + std::to_string(i) + " with a \\ backslash");
  n.stderr_tail.push_back(std::string(5000, 'z'));
  const auto text = encode(n);
  CHECK(text.size() < k_max_record);
  const auto back = decode_notice(text);
  REQUIRE(back);
  CHECK(back->rank == 4);
  CHECK(back->status == ExitStatus::exited(3));
  CHECK(back->restartable);
  REQUIRE(back->error);
  CHECK(back->error->message == "ValueError: bad\nline two");
  CHECK(back->stderr_tail.size() == 20);
  CHECK(back->stderr_tail[0] == "line 31 with a \\ backslash");
  CHECK(back->stderr_tail.back().size() == 1027);
  CHECK(back->exit_code() == 3);
  CHECK(back->describe() == "rank 4 (local 0) on node 2 (10.0.0.3) exited with code 3");
  CHECK(back->ms == -1);  // its time unknown: none sent

  StopNotice timed = n;
  timed.ms = 2310;
  timed.ms_exact = false;
  const auto timed_back = decode_notice(encode(timed));
  REQUIRE(timed_back);
  CHECK(timed_back->ms == 2310);
  CHECK_FALSE(timed_back->ms_exact);

  StopNotice killed = n;
  killed.status = ExitStatus::killed(9);
  CHECK(decode_notice(encode(killed))->exit_code() == 137);

  StopNotice sig;
  sig.kind = StopKind::Signal;
  sig.node_rank = 1;
  sig.host = "h1";
  sig.signo = 2;
  CHECK(decode_notice(encode(sig))->exit_code() == 130);
  CHECK(sig.describe() == "rankrun on node 1 (h1) received SIGINT");

  StopNotice lost;
  lost.kind = StopKind::NodeLost;
  lost.node_rank = 1;
  lost.host = "h1";
  lost.ranks = "ranks 2-3";
  CHECK(decode_notice(encode(lost))->exit_code() == k_exit_node_lost);
  CHECK(decode_notice(encode(lost))->describe() == "node 1 (h1) was lost (ranks 2-3): its lease lapsed");

  StopNotice ok;
  ok.kind = StopKind::Success;
  CHECK(decode_notice(encode(ok))->exit_code() == 0);

  CHECK_FALSE(decode_notice(R"({"record":"stop","version":2,"kind":"meteor","node_rank":0})"));
  CHECK_FALSE(decode_notice(R"({"record":"stop","version":2,"kind":"failure","node_rank":0})"));  // no rank
  CHECK_FALSE(decode_notice(R"({"record":"stop","version":2,"kind":"signal","node_rank":0,"signo":0})"));
  CHECK_FALSE(decode_notice(R"({"record":"stop","version":2,"kind":"hang","node_rank":0,"stderr":[1]})"));
  CHECK_FALSE(decode_notice(R"({"record":"stop","version":2,"kind":"hang","node_rank":0,"restartable":"1"})"));
  CHECK_FALSE(decode_notice("not json"));
}

TEST_CASE("finals round-trip and make the job summary, lost nodes included") {
  NodeFinal f{1, "b", 3, {"rank 2 (local 0, pid 5): exit 3  <- root cause"}};
  const auto back = decode_final(encode(f));
  REQUIRE(back);
  CHECK(back->rows == f.rows);
  const auto map = plan_nodes({{0, "a", 1, "j", "i"}, {1, "b", 1, "j", "i"}, {2, "c", 1, "j", "i"}}, 3);
  const auto text =
      format_job_summary(map, {NodeFinal{0, "a", 3, {"rank 0 (local 0, pid 4): SIGTERM"}}, *back}, {2}, 3);
  CHECK(text ==
        "rankrun: job summary (3 nodes, 3 ranks):\n"
        "  node 0 a (rank 0): exit 3\n    rank 0 (local 0, pid 4): SIGTERM\n"
        "  node 1 b (rank 1): exit 3\n    rank 2 (local 0, pid 5): exit 3  <- root cause\n"
        "  node 2 c (rank 2): LOST (its lease lapsed; its ranks' results are unknown)\n"
        "rankrun: job exit code 3\n");
}

TEST_CASE("a node's own failure goes to every node: what it could not do, and 118 everywhere") {
  StopNotice n;
  n.kind = StopKind::Internal;
  n.node_rank = 2;
  n.host = "10.0.0.3";
  n.report = "cannot create /logs/attempt_1/4: No space left on device; check --log-dir";
  const auto back = decode_notice(encode(n));
  REQUIRE(back);
  CHECK(back->kind == StopKind::Internal);
  CHECK(back->report == n.report);
  CHECK(back->exit_code() == k_exit_internal);
  CHECK_FALSE(back->restartable);
  CHECK(back->describe() ==
        "rankrun on node 2 (10.0.0.3) could not go on: cannot create /logs/attempt_1/4: No space left on device; check "
        "--log-dir");
}
