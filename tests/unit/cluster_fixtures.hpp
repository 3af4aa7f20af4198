#pragma once
// What the tests of several nodes share: the records they make of nodes (node(), three_nodes()),
// the rules of an elastic round (rules()), and running an io_context until a condition holds
// (run_until()).

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <string>

#include "launcher/cluster/records.hpp"
#include "launcher/cluster/rounds.hpp"

namespace rankrun::launcher::testing {

/// The fields of a node's record that a test chooses; those it leaves out are these.
struct NodeFields {
  int node_rank = -1;  // -1: none yet (an elastic node new to the job)
  int nproc = 2;
  std::string run_id = "job";
  std::string instance = {};  // empty: "instance-" and the host
};

/// A node's record on `host`: node("10.0.0.1"), node("h1", {.node_rank = 0, .instance = "a"}).
inline cluster::NodeRecord node(const std::string& host, NodeFields f = {}) {
  return cluster::NodeRecord{f.node_rank, host, f.nproc, f.run_id,
                             f.instance.empty() ? "instance-" + host : f.instance};
}

/// Three nodes of two ranks each, at 10.0.0.1 to 10.0.0.3: world size 6.
inline cluster::NodeMap three_nodes() {
  cluster::NodeMap m;
  m.nodes = {{0, "10.0.0.1", 2, 0}, {1, "10.0.0.2", 2, 2}, {2, "10.0.0.3", 2, 4}};
  m.world_size = 6;
  return m;
}

/// An elastic round of MIN:MAX nodes with torch's defaults: a 30 s last call, a 600 s join timeout.
inline cluster::RoundRules rules(int min_nodes, int max_nodes) {
  cluster::RoundRules r;
  r.min_nodes = min_nodes;
  r.max_nodes = max_nodes;
  r.last_call = std::chrono::seconds(30);
  r.join_timeout = std::chrono::seconds(600);
  return r;
}

/// Runs `io` in 10 ms slices until `done()` holds or `limit` has passed; whether `done()` holds.
inline bool run_until(boost::asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < end) {
    io.run_for(std::chrono::milliseconds(10));
    io.restart();
  }
  return done();
}

}  // namespace rankrun::launcher::testing
