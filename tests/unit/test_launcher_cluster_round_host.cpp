// cluster/round_host: the coordinator's side of the elastic rounds, on keys in memory (its
// RoundKeys) and the store's traffic played to it as the store's observers hear it: what it
// writes when a round closes, fails or restarts, and what it makes of joins and hang-ups.

#include <doctest/doctest.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cluster_fixtures.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/cluster/round_host.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::cluster;
using namespace std::chrono_literals;
using rankrun::launcher::testing::node;
using rankrun::launcher::testing::rules;
namespace rz = rankrun::rendezvous;

namespace {

// The agents' keys, and the order they were written in.
class MemoryKeys final : public RoundKeys {
 public:
  std::optional<std::string> value(const std::string& key) override {
    const auto it = values.find(key);
    return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  void set(const std::string& key, const std::string& value) override {
    values[key] = value;
    written.push_back(key);
  }
  /// Where `key` was first written; -1: never.
  int first_write(const std::string& key) const {
    const auto it = std::find(written.begin(), written.end(), key);
    return it == written.end() ? -1 : static_cast<int>(it - written.begin());
  }

  std::map<std::string, std::string> values;
  std::vector<std::string> written;
};

// What a node writes to ask for a round (the record under join/<instance>).
void ask(MemoryKeys& keys, const NodeRecord& n) { keys.values[join_key(n.instance)] = encode(n); }

struct Heard {
  std::vector<RoundRecord> closed;
  std::vector<std::string> restarts;  // why
  int next_round = -1;
  int next_nodes = -1;
  RoundHost::Hooks hooks() {
    return RoundHost::Hooks{[this](const std::string& why, int round, int nodes) {
                              restarts.push_back(why);
                              next_round = round;
                              next_nodes = nodes;
                            },
                            [this](const RoundRecord& r) { closed.push_back(r); }};
  }
};

std::set<std::string> instances(const RoundRecord& r) {
  std::set<std::string> out;
  for (const auto& m : r.members) out.insert(m.instance);
  return out;
}

}  // namespace

TEST_CASE("round host: a round closes at MAX: the waiting line, the map's pages, then each member's assignment") {
  boost::asio::io_context io;
  MemoryKeys keys;
  Heard heard;
  RoundHost host(io, keys, rules(2, 2), heard.hooks());
  const auto a = node("10.0.0.1"), b = node("10.0.0.2");
  REQUIRE(keys.value(k_status_key) == "round 0: 0 of 2 nodes joined; need 2 more; 600 s left (join_timeout)");
  ask(keys, a);
  host.joined(a.instance);
  // The waiting line is rewritten at most once a second while nodes come, by the host's timer.
  io.run_for(1200ms);
  io.restart();
  REQUIRE(keys.value(k_status_key));
  CHECK(keys.value(k_status_key)->rfind("round 0: 1 of 2 nodes joined (10.0.0.1); need 1 more", 0) == 0);
  CHECK(heard.closed.empty());
  ask(keys, b);
  host.joined(b.instance);
  REQUIRE(heard.closed.size() == 1);
  CHECK(heard.closed[0].round == 0);
  CHECK(instances(heard.closed[0]) == std::set<std::string>{a.instance, b.instance});
  CHECK(host.keeper().running());
  // A node reads the pages once it has its answer: the pages first.
  const int page = keys.first_write(round_map_key(0, 0));
  REQUIRE(page >= 0);
  std::set<int> given;
  for (const auto& n : {a, b}) {
    const auto answer = keys.value(assign_key(n.instance));
    REQUIRE(answer);
    const auto assignment = decode_assignment(*answer);
    REQUIRE(assignment);
    CHECK(assignment->round == 0);
    CHECK(assignment->nodes == 2);
    given.insert(assignment->node_rank);
    CHECK(keys.first_write(assign_key(n.instance)) > page);
  }
  CHECK(given == std::set<int>{0, 1});
}

TEST_CASE("round host: a join record that is not one is ignored; a join for another job is refused") {
  boost::asio::io_context io;
  MemoryKeys keys;
  Heard heard;
  RoundHost host(io, keys, rules(2, 2), heard.hooks());
  keys.values[join_key("garbage")] = "not a record";
  host.joined("garbage");
  CHECK_FALSE(keys.value(assign_key("garbage")));
  const auto a = node("10.0.0.1");
  auto other = node("10.0.0.9");
  other.run_id = "another-job";
  ask(keys, a);
  host.joined(a.instance);
  ask(keys, other);
  host.joined(other.instance);
  const auto refused = keys.value(assign_key(other.instance));
  REQUIRE(refused);
  CHECK(refused->rfind("abort\n", 0) == 0);
  CHECK(heard.closed.empty());
}

TEST_CASE(
    "round host: on the store's traffic: a join SET in the agents' key space counts once applied; a waiting node that hangs up does not") {
  boost::asio::io_context io;
  MemoryKeys keys;
  Heard heard;
  RoundHost host(io, keys, rules(2, 2), heard.hooks());
  const auto a = node("10.0.0.1"), b = node("10.0.0.2"), c = node("10.0.0.3"), d = node("10.0.0.4");
  // a asks on connection 1 and hangs up before the round forms.
  host.on_join(1, 1, k_agents_key_space);
  host.on_request(1, rz::Op::Set, join_key(a.instance));
  ask(keys, a);  // the store applies the SET after its observers heard it
  io.run_for(20ms);
  io.restart();
  host.on_close(1);
  io.run_for(20ms);
  io.restart();
  // d's connection is a worker's (another key space): its SET of a join key is none.
  host.on_join(4, 2, "attempt-0");
  host.on_request(4, rz::Op::Set, join_key(d.instance));
  ask(keys, d);
  // b asks: with a gone, the round still waits for a second node.
  host.on_join(2, 1, k_agents_key_space);
  host.on_request(2, rz::Op::Set, join_key(b.instance));
  ask(keys, b);
  io.run_for(20ms);
  io.restart();
  CHECK(heard.closed.empty());
  host.on_join(3, 1, k_agents_key_space);
  host.on_request(3, rz::Op::Set, join_key(c.instance));
  ask(keys, c);
  io.run_for(20ms);
  io.restart();
  REQUIRE(heard.closed.size() == 1);
  CHECK(instances(heard.closed[0]) == std::set<std::string>{b.instance, c.instance});
}

TEST_CASE("round host: a member lost ends the running round: the restart hook hears why, and the next round's size") {
  boost::asio::io_context io;
  MemoryKeys keys;
  Heard heard;
  RoundHost host(io, keys, rules(1, 3), heard.hooks());
  const auto a = node("10.0.0.1"), b = node("10.0.0.2"), c = node("10.0.0.3");
  for (const auto& n : {a, b, c}) {
    ask(keys, n);
    host.joined(n.instance);
  }
  REQUIRE(heard.closed.size() == 1);  // MAX: at once
  const auto& members = heard.closed[0].members;
  const auto lost = std::find_if(members.begin(), members.end(), [&](const NodeRecord& m) { return m.host == b.host; });
  REQUIRE(lost != members.end());
  host.lost(lost->node_rank);
  REQUIRE(heard.restarts.size() == 1);
  CHECK(heard.restarts[0].find(b.host) != std::string::npos);
  CHECK(heard.next_round == 1);
  CHECK(heard.next_nodes == 2);
  CHECK(host.keeper().forming());
}

TEST_CASE("round host: the job closed: every waiting node is told, and every later one; before it ran, as a failure") {
  boost::asio::io_context io;
  const auto a = node("10.0.0.1"), b = node("10.0.0.2");
  for (const bool failed : {false, true}) {
    CAPTURE(failed);
    MemoryKeys keys;
    Heard heard;
    RoundHost host(io, keys, rules(3, 3), heard.hooks());
    ask(keys, a);
    host.joined(a.instance);
    host.close_job("the job ended with exit code 0", failed);
    const std::string told = (failed ? "abort\n" : "closed\n") + std::string("the job ended with exit code 0");
    CHECK(keys.value(k_closed_key) == told);
    CHECK(keys.value(assign_key(a.instance)) == told);
    ask(keys, b);
    host.joined(b.instance);
    CHECK(keys.value(assign_key(b.instance)) == told);
    CHECK(heard.closed.empty());
  }
}

TEST_CASE("round host: a round that does not reach MIN within join_timeout fails: the waiting nodes are told why") {
  boost::asio::io_context io;
  MemoryKeys keys;
  Heard heard;
  auto r = rules(2, 2);
  r.join_timeout = 100ms;
  RoundHost host(io, keys, r, heard.hooks());
  const auto a = node("10.0.0.1");
  ask(keys, a);
  host.joined(a.instance);
  io.run_for(400ms);  // the host's own timer
  const auto closed = keys.value(k_closed_key);
  REQUIRE(closed);
  CHECK(closed->rfind("abort\n", 0) == 0);
  CHECK(closed->find(a.host) != std::string::npos);  // the message names who came
  const auto answer = keys.value(assign_key(a.instance));
  REQUIRE(answer);
  CHECK(answer->rfind("abort\n", 0) == 0);
  CHECK(heard.closed.empty());
}
