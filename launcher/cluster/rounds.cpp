#include "launcher/cluster/rounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace rankrun::launcher::cluster {
namespace {
// The waiting line and the abort message name this many of the joined hosts, then a count.
constexpr std::size_t k_hosts_shown = 16;

using Clock = RoundKeeper::Clock;

double seconds(Clock::duration d) { return std::max(0.0, std::chrono::duration<double>(d).count()); }

std::string nodes_range(const RoundRules& r) {
  return r.min_nodes == r.max_nodes ? std::to_string(r.max_nodes) : fmt::format("{}-{}", r.min_nodes, r.max_nodes);
}

}  // namespace

std::vector<NodeRecord> assign_ranks(std::vector<NodeRecord> members) {
  const int n = static_cast<int>(members.size());
  std::vector<bool> taken(members.size(), false);
  std::vector<int> rank(members.size(), -1);
  // Keep the ranks of the round before (lowest first, so that a clash is decided the same way
  // everywhere), then the newcomers in natural host order.
  std::vector<std::size_t> order(members.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = members[a];
    const auto& y = members[b];
    if (x.node_rank != y.node_rank) return x.node_rank < y.node_rank;
    if (x.host != y.host) return natural_less(x.host, y.host);
    return x.instance < y.instance;
  });
  for (auto i : order) {
    const int prev = members[i].node_rank;
    if (prev >= 0 && prev < n && !taken[static_cast<std::size_t>(prev)]) {
      taken[static_cast<std::size_t>(prev)] = true;
      rank[i] = prev;
    }
  }
  std::vector<std::size_t> rest;
  for (auto i : order) {
    if (rank[i] < 0) rest.push_back(i);
  }
  std::sort(rest.begin(), rest.end(), [&](std::size_t a, std::size_t b) {
    if (members[a].host != members[b].host) return natural_less(members[a].host, members[b].host);
    return members[a].instance < members[b].instance;
  });
  int next = 0;
  for (auto i : rest) {
    while (taken[static_cast<std::size_t>(next)]) ++next;
    taken[static_cast<std::size_t>(next)] = true;
    rank[i] = next;
  }
  for (std::size_t i = 0; i < members.size(); ++i) members[i].node_rank = rank[i];
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.node_rank < b.node_rank; });
  return members;
}

RoundKeeper::RoundKeeper(RoundRules rules, Clock::time_point now) : m_rules(rules) { begin_forming(0, {}, now); }

void RoundKeeper::begin_forming(int round, std::set<std::string> expected, Clock::time_point now) {
  m_state = State::Forming;
  m_round = round;
  m_expected = std::move(expected);
  m_started = now;
  m_min_at.reset();
  m_previous = std::move(m_members);
  m_members.clear();
}

void RoundKeeper::resume(int round, std::vector<NodeRecord> members, Clock::time_point now) {
  m_state = State::Running;
  m_round = round;
  m_started = now;
  m_min_at.reset();
  m_expected.clear();
  m_joined.clear();
  m_spares_told.clear();
  std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) { return a.node_rank < b.node_rank; });
  if (!members.empty()) m_run_id = members.front().run_id;
  m_history.push_back(fmt::format("round {}: {} node{} (formed before this node coordinated)", round, members.size(),
                                  members.size() == 1 ? "" : "s"));
  m_members = std::move(members);
}

RoundStep RoundKeeper::join(NodeRecord node, Clock::time_point now) {
  RoundStep step;
  if (m_state == State::Closed) {
    step.told_closed.push_back(node.instance);
    return step;
  }
  if (m_run_id.empty()) m_run_id = node.run_id;
  if (node.run_id != m_run_id) {
    step.refused.emplace_back(node.instance,
                              fmt::format("{} runs --rdzv-id={} but the job's nodes run --rdzv-id={}; give every node "
                                          "the same id",
                                          node.host, node.run_id, m_run_id));
    return step;
  }
  const auto same = [&](const NodeRecord& r) { return r.instance == node.instance; };
  if (auto it = std::find_if(m_joined.begin(), m_joined.end(), same); it != m_joined.end()) {
    *it = node;
  } else {
    m_joined.push_back(node);
  }
  if (m_state == State::Running) {
    if (std::any_of(m_members.begin(), m_members.end(), same)) return step;  // not a newcomer
    if (static_cast<int>(m_members.size()) < m_rules.max_nodes) {
      // torch's waiting list: the job restarts with the newcomer at the next round.
      std::set<std::string> expected;
      for (const auto& m : m_members) expected.insert(m.instance);
      step.restart = fmt::format("node {} joined", node.host);
      begin_forming(m_round + 1, std::move(expected), now);
    } else if (m_spares_told.insert(node.instance).second) {
      step.new_spares.push_back(node.instance);
      return step;
    } else {
      return step;
    }
  }
  evaluate(now, step);
  return step;
}

bool RoundKeeper::rejoined(int node_rank) const {
  if (m_state != State::Forming) return false;
  const auto it =
      std::find_if(m_previous.begin(), m_previous.end(), [&](const auto& m) { return m.node_rank == node_rank; });
  if (it == m_previous.end()) return false;
  return std::any_of(m_joined.begin(), m_joined.end(), [&](const auto& r) { return r.instance == it->instance; });
}

RoundStep RoundKeeper::lost(int node_rank, Clock::time_point now) {
  RoundStep step;
  if (m_state == State::Forming) {
    // A survivor of the round before died before it joined again (it refreshes its old lease
    // until it does): the round does not wait for it until the last call ends.
    const auto it =
        std::find_if(m_previous.begin(), m_previous.end(), [&](const auto& m) { return m.node_rank == node_rank; });
    if (it == m_previous.end()) return step;
    const auto instance = it->instance;
    const bool joined =
        std::any_of(m_joined.begin(), m_joined.end(), [&](const auto& r) { return r.instance == instance; });
    if (joined || !m_expected.erase(instance)) return step;
    evaluate(now, step);
    return step;
  }
  if (m_state != State::Running) return step;
  const auto it =
      std::find_if(m_members.begin(), m_members.end(), [&](const auto& m) { return m.node_rank == node_rank; });
  if (it == m_members.end()) return step;
  step.restart = fmt::format("node {} lost", it->host);
  std::set<std::string> expected;
  for (const auto& m : m_members) {
    if (m.node_rank != node_rank) expected.insert(m.instance);
  }
  // It may still be queued from an earlier round's join; it must not come back as itself.
  const auto instance = it->instance;
  m_joined.erase(
      std::remove_if(m_joined.begin(), m_joined.end(), [&](const auto& r) { return r.instance == instance; }),
      m_joined.end());
  begin_forming(m_round + 1, std::move(expected), now);
  evaluate(now, step);
  return step;
}

RoundStep RoundKeeper::leave(const std::string& instance, Clock::time_point now) {
  RoundStep step;
  const auto gone =
      std::remove_if(m_joined.begin(), m_joined.end(), [&](const auto& r) { return r.instance == instance; });
  if (gone == m_joined.end()) return step;
  m_joined.erase(gone, m_joined.end());
  m_expected.erase(instance);
  m_spares_told.erase(instance);
  if (m_state == State::Forming && static_cast<int>(m_joined.size()) < m_rules.min_nodes) m_min_at.reset();
  evaluate(now, step);
  return step;
}

RoundStep RoundKeeper::tick(Clock::time_point now) {
  RoundStep step;
  evaluate(now, step);
  return step;
}

RoundStep RoundKeeper::close_job() {
  RoundStep step;
  m_state = State::Closed;
  for (const auto& r : m_joined) step.told_closed.push_back(r.instance);
  m_joined.clear();
  return step;
}

void RoundKeeper::evaluate(Clock::time_point now, RoundStep& step) {
  if (m_state != State::Forming) return;
  const int n = static_cast<int>(m_joined.size());
  if (n >= m_rules.min_nodes && !m_min_at) m_min_at = now;
  if (n < m_rules.min_nodes) {
    if (now - m_started < m_rules.join_timeout) return;
    step.abort = fmt::format(
        "round {} did not reach the minimum of {} node{} within join_timeout ({:.0f} s): {} came{}; {} missing; start "
        "rankrun on more nodes with the same --rdzv-endpoint and --rdzv-id, lower MIN in --nnodes, or raise --rdzv-conf "
        "join_timeout=",
        m_round, m_rules.min_nodes, m_rules.min_nodes == 1 ? "" : "s", seconds(m_rules.join_timeout), nodes_text(),
        n == 0 ? "" : " (" + joined_hosts() + ")", m_rules.min_nodes - n);
    m_state = State::Closed;
    for (const auto& r : m_joined) step.told_closed.push_back(r.instance);
    m_joined.clear();
    return;
  }
  const auto present = [&](const std::string& instance) {
    return std::any_of(m_joined.begin(), m_joined.end(), [&](const auto& r) { return r.instance == instance; });
  };
  const bool all_expected = !m_expected.empty() && std::all_of(m_expected.begin(), m_expected.end(), present);
  const bool full = n >= m_rules.max_nodes && m_expected.empty();
  const bool last_call_over = now - *m_min_at >= m_rules.last_call;
  if (!all_expected && !full && !last_call_over) return;

  // The members: the last round's survivors first, then the others in the order they came.
  std::vector<NodeRecord> chosen, left;
  for (const auto& r : m_joined) {
    if (m_expected.count(r.instance) && static_cast<int>(chosen.size()) < m_rules.max_nodes) chosen.push_back(r);
  }
  for (const auto& r : m_joined) {
    const bool in = std::any_of(chosen.begin(), chosen.end(), [&](const auto& c) { return c.instance == r.instance; });
    if (in) continue;
    if (static_cast<int>(chosen.size()) < m_rules.max_nodes) {
      chosen.push_back(r);
    } else {
      left.push_back(r);
    }
  }
  m_members = assign_ranks(std::move(chosen));
  m_joined = std::move(left);
  for (const auto& m : m_members) m_spares_told.erase(m.instance);
  for (const auto& r : m_joined) {
    if (m_spares_told.insert(r.instance).second) step.new_spares.push_back(r.instance);
  }
  int world = 0;
  for (const auto& m : m_members) world += m.nproc;
  m_history.push_back(fmt::format("round {}: {} node{} (world {})", m_round, m_members.size(),
                                  m_members.size() == 1 ? "" : "s", world));
  step.closed = RoundRecord{m_round, m_members};
  m_state = State::Running;
  m_expected.clear();
  m_min_at.reset();
}

int RoundKeeper::expected_nodes() const {
  std::set<std::string> all(m_expected);
  for (const auto& r : m_joined) all.insert(r.instance);
  return std::min(static_cast<int>(all.size()), m_rules.max_nodes);
}

std::optional<Clock::time_point> RoundKeeper::next_deadline() const {
  if (m_state != State::Forming) return std::nullopt;
  if (m_min_at) return *m_min_at + m_rules.last_call;
  return m_started + m_rules.join_timeout;
}

std::string RoundKeeper::joined_hosts() const {
  // The first few in natural order: the line stays short however many nodes joined.
  std::vector<std::string_view> hosts;
  for (const auto& r : m_joined) hosts.push_back(r.host);
  const auto shown = std::min(hosts.size(), k_hosts_shown);
  std::partial_sort(hosts.begin(), hosts.begin() + static_cast<std::ptrdiff_t>(shown), hosts.end(),
                    [](std::string_view a, std::string_view b) { return natural_less(a, b); });
  std::string out;
  for (std::size_t i = 0; i < shown; ++i) out += (out.empty() ? "" : ", ") + std::string(hosts[i]);
  if (hosts.size() > shown) out += fmt::format(" and {} more", hosts.size() - shown);
  return out;
}

std::string RoundKeeper::nodes_text() const {
  return fmt::format("{} node{}", m_joined.size(), m_joined.size() == 1 ? "" : "s");
}

std::string RoundKeeper::status(Clock::time_point now) const {
  if (m_state != State::Forming) return {};
  const int n = static_cast<int>(m_joined.size());
  std::string out = fmt::format("round {}: {} of {} nodes joined", m_round, n, nodes_range(m_rules));
  if (n > 0) out += " (" + joined_hosts() + ")";
  if (n < m_rules.min_nodes) {
    out += fmt::format("; need {} more; {:.0f} s left (join_timeout)", m_rules.min_nodes - n,
                       seconds(m_started + m_rules.join_timeout - now));
  } else if (m_min_at) {
    const auto missing = std::count_if(m_expected.begin(), m_expected.end(), [&](const std::string& instance) {
      return std::none_of(m_joined.begin(), m_joined.end(), [&](const auto& r) { return r.instance == instance; });
    });
    if (missing > 0)
      out += fmt::format("; waiting for {} node{} of the round before", missing, missing == 1 ? "" : "s");
    out += fmt::format("; last call, {:.0f} s left", seconds(*m_min_at + m_rules.last_call - now));
  }
  return out;
}

}  // namespace rankrun::launcher::cluster
