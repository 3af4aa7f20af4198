#include <doctest/doctest.h>

#include <vector>

#include "cluster_fixtures.hpp"
#include "launcher/job/stop_hold.hpp"

using namespace rankrun::launcher;
using rankrun::launcher::testing::three_nodes;

namespace {

StopHoldDecision decide(const std::vector<std::deque<std::string>>& tails, int root = 0, bool open = false,
                        bool read = true) {
  return decide_stop_hold(
      root, open, read,
      [&tails](int i) -> const std::deque<std::string>& { return tails[static_cast<std::size_t>(i)]; },
      static_cast<int>(tails.size()), three_nodes(), 1);
}

}  // namespace

TEST_CASE("a failure whose stderr is still open waits for its last lines first, once") {
  const std::vector<std::deque<std::string>> tails{{"ValueError: boom"}, {}};
  CHECK(decide(tails, 0, true, false).hold == StopHold::ReadTail);
  CHECK(decide(tails, 0, true, true).hold == StopHold::PublishNow);    // waited already
  CHECK(decide(tails, 0, false, false).hold == StopHold::PublishNow);  // read to its end
}

TEST_CASE("a failure that names a peer on another node it lost is held as that node's victim") {
  const std::vector<std::deque<std::string>> tails{
      {"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.3]:52211"},
      {}};
  const auto d = decide(tails);
  CHECK(d.hold == StopHold::AsVictim);
  CHECK(d.peer == 2);
  // its own node is nobody's victim
  const std::vector<std::deque<std::string>> self{{"Connection closed by peer [10.0.0.2]:40000"}, {}};
  CHECK(decide(self).hold == StopHold::PublishNow);
}

TEST_CASE("a rank that lost a peer on this node, which lost one on another: the same node's death") {
  const std::vector<std::deque<std::string>> tails{
      {"RuntimeError: Connection reset by peer"},                     // the root: a local peer went
      {"RuntimeError: Connection closed by peer [10.0.0.1]:43121"}};  // that peer lost node 0
  const auto d = decide(tails);
  CHECK(d.hold == StopHold::AsVictim);
  CHECK(d.peer == 0);
  // without a lost connection of its own, the others' tails are not its story
  const std::vector<std::deque<std::string>> unrelated{{"ValueError: boom"},
                                                       {"RuntimeError: Connection closed by peer [10.0.0.1]:43121"}};
  CHECK(decide(unrelated).hold == StopHold::PublishNow);
}

TEST_CASE("lost_a_connection knows gloo's and the kernel's words") {
  CHECK(lost_a_connection({"x", "Connection closed by peer [1.2.3.4]:5"}));
  CHECK(lost_a_connection({"Connection reset by peer"}));
  CHECK_FALSE(lost_a_connection({"ValueError: boom"}));
}
