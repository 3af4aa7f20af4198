#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "launcher/hangs/flight_match.hpp"

using namespace rankrun::launcher;

// The dumps under data/flight_recorder/ were recorded from real torch 2.14 jobs (gloo, two ranks,
// TORCH_FR_BUFFER_SIZE=64) when rankrun stopped them as hung: the cases of
// tests/integration/scripts/collective_hangs.py and seed_hangs.py.

namespace {

std::string read_data(const std::string& name) {
  std::ifstream in(std::string(RANKRUN_TEST_DATA_DIR) + "/flight_recorder/" + name);
  REQUIRE_MESSAGE(in.good(), name);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

FlightDump dump_of(const std::string& name) {
  std::string error;
  auto d = parse_flight_dump(read_data(name), error);
  REQUIRE_MESSAGE(d, name << ": " << error);
  return *d;
}

std::vector<RankFlight> recorded(const std::string& c) {
  return {{0, dump_of(c + "_rank0.json"), "x.py:1 in f"}, {1, dump_of(c + "_rank1.json"), "x.py:2 in g"}};
}

FlightEntry entry(std::string group, std::int64_t seq, std::string op, std::string sizes = "[[4]]") {
  FlightEntry e;
  e.group = std::move(group);
  e.desc = e.group == "0" ? "default_pg" : "";
  e.seq = seq;
  e.op = std::move(op);
  e.backend = "nccl";
  e.sizes = std::move(sizes);
  e.dtypes = "Float";
  return e;
}

// A dump whose default group has run `ops` (1, 2, ...), the last `pending` of them not completed.
FlightDump synthetic(const std::vector<std::string>& ops, int pending = 1, int started = -1) {
  FlightDump d;
  const auto n = static_cast<std::int64_t>(ops.size());
  d.groups.push_back({"0", n, started < 0 ? n : started, n - pending});
  for (std::int64_t i = 0; i < n; ++i) d.entries.push_back(entry("0", i + 1, ops[static_cast<std::size_t>(i)]));
  return d;
}

}  // namespace

TEST_CASE("a real dump is read: each group's progress and its collectives") {
  const auto d = dump_of("stays_out_rank0.json");
  REQUIRE(d.groups.size() == 1);
  CHECK(d.groups[0].name == "0");
  CHECK(d.groups[0].enqueued == 3);
  CHECK(d.groups[0].completed == 2);
  CHECK(d.groups[0].started == -1);  // gloo does not say
  REQUIRE(d.entries.size() == 3);
  CHECK(d.entries[1].op == "broadcast");
  CHECK(d.entries[1].backend == "gloo");
  CHECK(d.entries[1].desc == "default_pg");
  CHECK(d.entries[1].sizes == "[[4]]");
  CHECK(d.entries[1].dtypes == "Float");
}

TEST_CASE("a group's last completed is raised over the retired entries that follow it") {
  // torch 2.14's gloo writes last_completed_collective from its two worker threads unordered: the
  // one that ran #2 can overwrite the 3 written by the one that ran #3. The entries say #3 retired.
  auto text = read_data("op_mismatch_rank1.json");
  const std::string said = R"("last_completed_collective":"3")";
  const auto at = text.find(said);
  REQUIRE(at != std::string::npos);
  text.replace(at, said.size(), R"("last_completed_collective":"2")");
  std::string error;
  const auto d = parse_flight_dump(text, error);
  REQUIRE(d);
  REQUIRE(d->groups.size() == 1);
  CHECK(d->groups[0].completed == 3);  // #4, the broadcast, is not retired
  CHECK(d->groups[0].started == -1);   // gloo does not say, and still does not
  CHECK(d->entries[2].retired);
  CHECK_FALSE(d->entries[3].retired);

  // A retired entry after one that is not does not count: #2 pending, #3 retired.
  const std::string two = R"("collective_seq_id":2,)";
  const auto second = text.find(two);
  REQUIRE(second != std::string::npos);
  const auto flag = text.find(R"("retired":true)", second);
  REQUIRE(flag != std::string::npos);
  text.replace(flag, 14, R"("retired":false)");
  const std::string completed_one = R"("last_completed_collective":"2")";
  text.replace(text.find(completed_one), completed_one.size(), R"("last_completed_collective":"1")");
  const auto gap = parse_flight_dump(text, error);
  REQUIRE(gap);
  CHECK(gap->groups[0].completed == 1);
}

TEST_CASE("ops that differ at one sequence id: all_gather against broadcast") {
  const auto v = match_flight_dumps(recorded("op_mismatch"));
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].seq == 4);
  CHECK(v.findings[0].look_first == std::vector<int>{1});
  CHECK(v.text() ==
        "Flight recorder: at collective #4 of the default group the ranks run different collectives: rank 0 all_gather "
        "([[4]] Float), rank 1 broadcast ([[4]] Float). Look at rank 1 first (the ranks split evenly; the side of the "
        "lowest rank is taken as the reference).");
}

TEST_CASE("a rank that skipped one all_reduce of a thousand parts at the last one") {
  // the ring holds the last 64 collectives only: they are compared from where both have them
  const auto v = match_flight_dumps(recorded("skip_one"));
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].seq == 1000);
  CHECK(v.text().find("rank 0 all_reduce ([[16]] Float), rank 1 barrier (no tensors)") != std::string::npos);
}

TEST_CASE("a rank that never enqueued the collective the others wait in is named, with its last") {
  const auto v = match_flight_dumps(recorded("stays_out"));
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].seq == 3);
  CHECK(v.findings[0].look_first == std::vector<int>{1});
  CHECK(v.text() ==
        "Flight recorder: rank 0 is in all_reduce #3 of the default group; rank 1 never enqueued it, its last was "
        "broadcast #2 (now at x.py:2 in g). Look at rank 1 first.");
}

TEST_CASE("the seeds: the extra batch's gradient all_reduce against the epoch's end") {
  const auto epoch = match_flight_dumps(recorded("epoch_allreduce"));
  REQUIRE(epoch.findings.size() == 1);
  CHECK(epoch.findings[0].seq == 10);
  CHECK(epoch.text().find(
            "different sizes or dtypes: rank 0 all_reduce ([[1]] Float), rank 1 all_reduce ([[2]] Float)") !=
        std::string::npos);
  const auto ddp5 = match_flight_dumps(recorded("ddp5"));
  REQUIRE(ddp5.findings.size() == 1);
  CHECK(ddp5.findings[0].seq == 11);
  CHECK(ddp5.findings[0].look_first == std::vector<int>{1});
  CHECK(ddp5.text().find("rank 0 barrier (no tensors), rank 1 all_reduce ([[2]] Float)") != std::string::npos);
}

TEST_CASE("the majority is the reference: the one rank of eight that differs is looked at first") {
  std::vector<RankFlight> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back({r, synthetic({"all_reduce", "all_reduce", r == 5 ? "broadcast" : "all_reduce"}), ""});
  }
  const auto v = match_flight_dumps(ranks);
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].look_first == std::vector<int>{5});
  CHECK_FALSE(v.findings[0].even);
  INFO(v.text());
  CHECK(
      v.text().find("ranks 0-4,6,7 all_reduce ([[4]] Float), rank 5 broadcast ([[4]] Float). Look at rank 5 first.") !=
      std::string::npos);
}

TEST_CASE("seven ranks in all_reduce #1042, one still at #1041") {
  std::vector<RankFlight> ranks;
  std::vector<std::string> ops(1041, "all_reduce");
  ops.back() = "broadcast";
  for (int r = 0; r < 8; ++r) {
    auto mine = ops;
    if (r != 3) mine.push_back("all_reduce");
    ranks.push_back({r, synthetic(mine, r == 3 ? 0 : 1), r == 3 ? "train.py:88 in step" : ""});
  }
  const auto v = match_flight_dumps(ranks);
  REQUIRE(v.findings.size() == 1);
  CHECK(
      v.text() ==
      "Flight recorder: ranks 0-2,4-7 are in all_reduce #1042 of the default group; rank 3 never enqueued it, its last "
      "was broadcast #1041 (now at train.py:88 in step). Look at rank 3 first.");
}

TEST_CASE("every rank enqueued it; the ones that have not started it on the device are looked at first") {
  std::vector<RankFlight> ranks;
  ranks.push_back({0, synthetic({"all_reduce", "all_reduce"}, 1, 2), ""});
  ranks.push_back({1, synthetic({"all_reduce", "all_reduce"}, 1, 1), ""});
  const auto v = match_flight_dumps(ranks);
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].look_first == std::vector<int>{1});
  CHECK(v.text() ==
        "Flight recorder: every rank enqueued all_reduce #2 of the default group; rank 0 started it, rank 1 has not "
        "started it (what runs before it on the device does not finish). Look at rank 1 first.");
}

TEST_CASE("no rank parts: every rank in the same collective is said, and who did not answer") {
  std::vector<RankFlight> ranks;
  ranks.push_back({0, synthetic({"all_reduce"}), ""});
  ranks.push_back({1, synthetic({"all_reduce"}), ""});
  ranks.push_back({2, std::nullopt, ""});
  const auto v = match_flight_dumps(ranks);
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].look_first.empty());
  CHECK(v.silent == std::vector<int>{2});
  CHECK(v.text() ==
        "Flight recorder: ranks 0,1 are in all_reduce #1 of the default group, which every rank enqueued, and none "
        "completed it. No flight recorder dump came from rank 2.");
}

TEST_CASE("groups are matched among their members only; the default group is said first") {
  std::vector<RankFlight> ranks;
  for (int r = 0; r < 4; ++r) {
    FlightDump d = synthetic({"all_reduce"}, 0);
    // ranks 0 and 1 share group 1; rank 1 never enqueued its second collective
    if (r < 2) {
      d.groups.push_back({"1", r == 0 ? 2 : 1, r == 0 ? 2 : 1, 1});
      d.entries.push_back(entry("1", 1, "all_gather"));
      if (r == 0) d.entries.push_back(entry("1", 2, "all_gather"));
    }
    ranks.push_back({r, d, ""});
  }
  const auto v = match_flight_dumps(ranks);
  REQUIRE(v.findings.size() == 1);
  CHECK(v.findings[0].group == "1");
  CHECK(v.findings[0].look_first == std::vector<int>{1});
  CHECK(v.text().find("rank 0 is in all_gather #2 of group 1;") != std::string::npos);
}

TEST_CASE("a dump that is not one is refused with the reason") {
  std::string error;
  CHECK_FALSE(parse_flight_dump("not json", error));
  CHECK(error == "not a JSON object");
  CHECK_FALSE(parse_flight_dump("{\"entries\": []}", error));
  CHECK(error == "no pg_status");
  CHECK_FALSE(parse_flight_dump(std::string(100, '[') + std::string(100, ']'), error));
  CHECK(error == "nested deeper than 16");
  // entries it cannot read are skipped, the rest kept
  const auto d = parse_flight_dump(
      R"({"pg_status":{"0":{"last_enqueued_collective":"2","last_completed_collective":"1"}},
          "entries":[{"collective_seq_id":"x"},{"collective_seq_id":2,"process_group":["0","default_pg"],
          "profiling_name":"gloo:all_reduce","input_sizes":[[2,3]],"input_dtypes":["Float"]},
          {"collective_seq_id":1,"is_p2p":true,"process_group":["0",""]}]})",
      error);
  REQUIRE(d);
  REQUIRE(d->entries.size() == 1);
  CHECK(d->entries[0].sizes == "[[2, 3]]");
  CHECK(d->groups[0].started == -1);
}

TEST_CASE("two recorders of one process make one dump") {
  FlightDump generic = synthetic({"all_reduce"}, 0);
  FlightDump nccl;
  nccl.groups.push_back({"0", 3, 3, 2});
  nccl.groups.push_back({"2", 1, 1, 1});
  nccl.entries.push_back(entry("0", 3, "all_reduce"));
  const auto m = merge_flight_dumps(generic, nccl);
  REQUIRE(m.groups.size() == 2);
  CHECK(m.groups[0].enqueued == 3);
  CHECK(m.entries.size() == 2);
}
