#include <doctest/doctest.h>

#include "launcher/hangs/hang_report.hpp"

using namespace rankrun::launcher;

namespace {
RankHangState running(int rank, const std::string& collective, const std::string& frame) {
  RankHangState r;
  r.rank = rank;
  r.stack_dumped = true;
  r.wait = WaitPoint{collective, frame};
  return r;
}
RankHangState exited(int rank, int code) {
  RankHangState r;
  r.rank = rank;
  r.alive = false;
  r.status = ExitStatus::exited(code);
  return r;
}
HangFinding finding(HangKind kind, std::vector<int> stuck) { return HangFinding{kind, std::move(stuck), {}, "x"}; }
}  // namespace

TEST_CASE("uneven work: the finished rank and the waiting one") {
  const std::vector<RankHangState> ranks{exited(0, 0), running(1, "all_reduce", "train.py:12 in step")};
  const auto v = hang_verdict(finding(HangKind::Straggler, {1}), ranks);
  CHECK(v.find("rank 1 is in all_reduce while rank 0 exited 0: uneven inputs?") == 0);
  const auto lines = format_rank_states(ranks);
  CHECK(lines.find("  rank 0: exited 0\n") != std::string::npos);
  CHECK(lines.find("  rank 1: running, in all_reduce at train.py:12 in step\n") != std::string::npos);
}

TEST_CASE("uneven work with the runtime's collective numbers") {
  auto done = exited(0, 0);
  done.collective = CollectiveState{"all_gather", 41, false, "grads"};
  auto stuck = running(1, "", "");
  stuck.wait.reset();
  stuck.collective = CollectiveState{"all_gather", 42, true, "grads"};
  const auto v = hang_verdict(finding(HangKind::Straggler, {1}), {done, stuck});
  CHECK(v.find("rank 1 is in all_gather #42 while rank 0 exited 0 after #41: uneven inputs?") == 0);
}

TEST_CASE("mismatched collectives are named per rank") {
  const std::vector<RankHangState> ranks{running(0, "barrier", "t.py:5 in main"),
                                         running(1, "all_reduce", "t.py:7 in main")};
  const auto v = hang_verdict(finding(HangKind::Collectives, {0, 1}), ranks);
  CHECK(v ==
        "ranks are in different collectives (rank 1 in all_reduce, rank 0 in barrier): mismatched collectives? "
        "Every rank must call the same ones in the same order.");
}

TEST_CASE("the sampler's word: DDP's backward is named, and where a rank is") {
  auto waiting = running(0, "barrier", "t.py:5 in main");
  auto in_backward = running(1, "", "");
  in_backward.wait.reset();
  in_backward.stack_dumped = false;
  in_backward.sampled_in = "backward";
  in_backward.sampled_at = "t.py:9 in train";
  in_backward.still_for = 12.4;
  const std::vector<RankHangState> ranks{waiting, in_backward};
  const auto v = hang_verdict(finding(HangKind::Collectives, {0, 1}), ranks);
  CHECK(v.find("rank 1 in DDP backward (gradient all-reduce), rank 0 in barrier") != std::string::npos);
  CHECK(format_rank_states(ranks).find("  rank 1: running, in DDP backward (gradient all-reduce) at t.py:9 in train, "
                                       "not moving for 12s (no stack dump)\n") != std::string::npos);
}

TEST_CASE("ranks in collectives after one exited 0: uneven inputs") {
  const std::vector<RankHangState> ranks{exited(0, 0), running(1, "all_reduce", "train.py:12 in step")};
  const auto v = hang_verdict(finding(HangKind::Collectives, {1}), ranks);
  CHECK(v.find("rank 1 is in all_reduce while rank 0 exited 0: uneven inputs?") == 0);
}

TEST_CASE("an outsider keeps the others waiting") {
  auto outside = running(0, "", "");
  outside.wait.reset();
  outside.sampled_at = "t.py:30 in save_checkpoint";
  const std::vector<RankHangState> ranks{outside, running(1, "barrier", "t.py:33 in main")};
  const auto v = hang_verdict(finding(HangKind::Outsider, {0}), ranks);
  CHECK(v.find("rank 1 waits in barrier for rank 0 (at t.py:30 in save_checkpoint), which never joined them") == 0);
}

TEST_CASE("late arrival names where the late rank is") {
  const std::vector<RankHangState> ranks{running(0, "init_process_group", "l.py:9 in <module>"),
                                         running(1, "", "l.py:5 in <module>")};
  const auto v = hang_verdict(finding(HangKind::LateArrival, {1}), ranks);
  CHECK(v.find("rank 1 never reached init_process_group (it is at l.py:5 in <module>) while rank 0 waited there") == 0);
}

TEST_CASE("lost heartbeat") {
  auto r = running(0, "", "");
  r.wait.reset();
  r.stack_dumped = false;
  r.heartbeat_age = 12;
  r.step = 40;
  const auto v = hang_verdict(finding(HangKind::HeartbeatLost, {0}), {r});
  CHECK(v.find("rank 0 stopped heartbeating") == 0);
  CHECK(format_rank_states({r}) == "  rank 0: running (no stack dump); heartbeat 12s ago, step 40\n");
}

TEST_CASE("on a node whose ranks are not 0..n-1 the verdict names global ranks") {
  // Node 1 of a multi-node job: local ranks 0 and 1 are global ranks 6 and 7.
  const std::vector<RankHangState> ranks{exited(6, 0), running(7, "all_reduce", "train.py:12 in step")};
  CHECK(hang_verdict(finding(HangKind::Straggler, {1}), ranks).find("rank 7 is in all_reduce while rank 6 exited 0") ==
        0);
  CHECK(hang_verdict(finding(HangKind::HeartbeatLost, {1}), ranks).find("rank 7 stopped heartbeating") == 0);
  const std::vector<RankHangState> late{running(6, "", "train.py:3 in load"), running(7, "barrier", "x")};
  CHECK(hang_verdict(finding(HangKind::LateArrival, {0}), late)
            .find("rank 6 never reached init_process_group (it is at "
                  "train.py:3 in load) while rank 7 waited there") == 0);
}

TEST_CASE("every rank in init_process_group and none in rankrun's store: the script's own rendezvous") {
  auto a = running(0, "init_process_group", "t.py:6 in <module>");
  auto b = running(1, "init_process_group", "t.py:6 in <module>");
  a.arrival = b.arrival = Arrival::NeverConnected;
  const auto v = hang_verdict(finding(HangKind::Collectives, {0, 1}), {a, b});
  CHECK(v.find("none connected to rankrun's store: the script sets MASTER_ADDR/MASTER_PORT itself") !=
        std::string::npos);
  b.arrival = Arrival::Rendezvoused;
  CHECK(hang_verdict(finding(HangKind::Collectives, {0, 1}), {a, b}).find("rankrun's store") == std::string::npos);
}

TEST_CASE("uneven work: the ranks' batch counts when rankrun.data told them, else the fix") {
  std::vector<RankHangState> ranks{exited(0, 0), running(1, "all_reduce", "train.py:12 in step"),
                                   running(2, "all_reduce", "train.py:12 in step")};
  const auto f = finding(HangKind::Straggler, {1, 2});
  CHECK(data_note(f, ranks).find("rankrun.data.even_batches(loader) gives every rank the same number") !=
        std::string::npos);
  ranks[0].batches = RankBatches{0, 8, 8};
  ranks[1].batches = RankBatches{0, 12, 12};
  ranks[2].batches = RankBatches{0, 12, 12};
  CHECK(data_note(f, ranks) == "Batches read in epoch 0 (rankrun.data): rank 0 8 of 8, ranks 1,2 12 of 12.");
  ranks[2].batches = RankBatches{1, 0, 12};  // a rank already in the next epoch: the latest one is shown
  CHECK(data_note(f, ranks) ==
        "Batches read in epoch 1 (rankrun.data): rank 2 0 of 12, ranks 0,1 in an earlier epoch or not using "
        "rankrun.data.");
  CHECK(format_rank_states(ranks).find("rank 2: running, in all_reduce at train.py:12 in step; batches 0 of 12 in "
                                       "epoch 1") != std::string::npos);
}

TEST_CASE("no data note where the ranks ran the same collectives, or for other kinds of hang") {
  const std::vector<RankHangState> same{running(0, "all_reduce", "a"), running(1, "all_reduce", "a")};
  CHECK(data_note(finding(HangKind::Collectives, {0, 1}), same).empty());
  const std::vector<RankHangState> apart{running(0, "all_reduce", "a"), running(1, "barrier", "b")};
  CHECK_FALSE(data_note(finding(HangKind::Collectives, {0, 1}), apart).empty());
  CHECK(data_note(finding(HangKind::HeartbeatLost, {0}), apart).empty());
  CHECK(data_note(finding(HangKind::SectionOverrun, {0}), apart).empty());
}

TEST_CASE("a section overrun names the rank and the fix") {
  std::vector<RankHangState> ranks{running(0, "", "train.py:40 in save"), running(1, "barrier", "b")};
  ranks[0].section = "section 'checkpoint' for 900s of 900s";
  const auto v = hang_verdict(finding(HangKind::SectionOverrun, {0}), ranks);
  CHECK(v.find("rank 0 stayed in a section past the timeout it declared") == 0);
  CHECK(format_rank_states(ranks).find("; in section 'checkpoint' for 900s of 900s") != std::string::npos);
}
