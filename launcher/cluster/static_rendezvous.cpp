#include "launcher/cluster/static_rendezvous.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

namespace rankrun::launcher::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

}  // namespace

std::string abort_rendezvous(LinkStore& client, const std::string& message) {
  return client.compare_set(k_complete_key, "", "abort\n" + message);
}

std::optional<RendezvousFailure> claim_node_rank(LinkStore& client, const NodeRecord& me, int nnodes) {
  const auto mine = encode(me);
  const auto current = client.compare_set(node_key(me.node_rank), "", mine);
  if (current != mine) {
    const auto other = decode_node(current);
    auto message = "node rank " + std::to_string(me.node_rank) +
                   " is claimed by two nodes: " + (other ? other->host : std::string("another node")) +
                   " (first) and " + me.host + "; give every node its own --node-rank from 0 to " +
                   std::to_string(nnodes - 1);
    // The nodes already waiting learn it too, instead of waiting for the timeout.
    abort_rendezvous(client, message);
    return RendezvousFailure{EarlyEnd::Usage, std::move(message)};
  }
  client.append(k_roster_key, std::to_string(me.node_rank) + ",");
  if (client.add(k_arrived_key, 1) >= nnodes) client.compare_set(k_complete_key, "", "ok");
  return std::nullopt;
}

StepResult<Complete> wait_for_completion(LinkStore& client, int nnodes, milliseconds timeout,
                                         Clock::time_point deadline, const std::function<bool()>& stopping,
                                         const Say& say) {
  std::string last_line;
  auto next_progress = Clock::now() + k_progress_first;
  const auto until_next = [&] {
    const auto next = std::min(next_progress, deadline);
    return std::clamp(std::chrono::duration_cast<milliseconds>(next - Clock::now()), milliseconds(1), k_progress_every);
  };
  while (!client.wait({k_complete_key}, until_next())) {
    if (stopping()) return Stopped{};
    const auto arrived = parse_roster(client.get(k_roster_key));
    const double left = seconds_left(deadline);
    if (left <= 0) {
      auto summary = format_waiting(arrived, nnodes, 0);
      summary = summary.substr(19, summary.rfind(';') - 19);  // without "waiting for nodes: " and the time left
      auto message = "the rendezvous timed out after " + std::to_string(timeout.count() / 1000) + " s: " + summary +
                     "; start rankrun on every node with the same --nnodes, --master-addr and --master-port, or "
                     "raise --rdzv-conf timeout=";
      // The other nodes learn it now, with this message, rather than each at its own timeout.
      if (abort_rendezvous(client, message) == "ok") break;
      return RendezvousFailure{EarlyEnd::RendezvousFailed, std::move(message)};
    }
    const auto line = format_waiting(arrived, nnodes, left);
    const auto changed = line.substr(0, line.rfind(';')) != last_line.substr(0, last_line.rfind(';'));
    if (changed || Clock::now() >= next_progress) {
      say(line);
      last_line = line;
      next_progress = Clock::now() + k_progress_every;
    }
  }
  const auto complete = client.get(k_complete_key);
  if (complete != "ok") {
    return RendezvousFailure{EarlyEnd::RendezvousFailed,
                             "the rendezvous was aborted: " + complete.substr(complete.find('\n') + 1)};
  }
  return Complete{};
}

std::variant<NodeMap, RendezvousFailure> read_node_map(LinkStore& client, int nnodes) {
  std::vector<std::string> keys;
  for (int i = 0; i < nnodes; ++i) keys.push_back(node_key(i));
  std::vector<NodeRecord> records;
  for (const auto& value : client.multi_get(keys)) {
    if (const auto r = decode_node(value)) {
      records.push_back(*r);
    } else if (auto why = foreign_record(value)) {
      return RendezvousFailure{EarlyEnd::RendezvousFailed, std::move(*why)};
    }
  }
  try {
    return plan_nodes(records, nnodes);
  } catch (const std::invalid_argument& e) {
    return RendezvousFailure{EarlyEnd::RendezvousFailed, e.what()};
  }
}

StepResult<NodeMap> static_rendezvous(LinkStore& client, const NodeRecord& me, int nnodes, milliseconds timeout,
                                      const std::function<bool()>& stopping, const Say& say) {
  const auto deadline = Clock::now() + timeout;
  if (auto failure = claim_node_rank(client, me, nnodes)) return std::move(*failure);
  auto complete = wait_for_completion(client, nnodes, timeout, deadline, stopping, say);
  if (auto* failure = std::get_if<RendezvousFailure>(&complete)) return std::move(*failure);
  if (std::holds_alternative<Stopped>(complete)) return Stopped{};
  auto map = read_node_map(client, nnodes);
  if (auto* failure = std::get_if<RendezvousFailure>(&map)) return std::move(*failure);
  return std::get<NodeMap>(std::move(map));
}

}  // namespace rankrun::launcher::cluster
