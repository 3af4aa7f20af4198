#include "launcher/cluster/attempt_steps.hpp"

#include <algorithm>
#include <vector>

namespace rankrun::launcher::cluster {

using std::chrono::milliseconds;

milliseconds lease_interval(milliseconds node_timeout) {
  return std::clamp(node_timeout / 5, milliseconds(200), milliseconds(3000));
}

milliseconds reply_timeout(milliseconds node_timeout) { return std::max(milliseconds(300), node_timeout / 3); }

milliseconds reconnect_try(milliseconds node_timeout, milliseconds left) {
  return std::max(milliseconds(200), std::min(reply_timeout(node_timeout), left));
}

void refresh_lease(LinkStore& client, NodeLease& lease) {
  if (!client.has_leases()) {
    client.set(lease.key, std::to_string(++lease.beats));
  } else if (lease.beats++ == 0) {
    client.set_leased(lease.key, "0", lease.granted);  // goes with the node's etcd lease
  } else {
    client.keep_alive(lease.granted);
  }
}

NoticeWait await_notice(LinkStore& client, int attempt, milliseconds interval) {
  NoticeWait out;
  if (client.wait({stop_key(attempt)}, interval)) {
    out.published = true;
    out.notice = decode_notice(client.get(stop_key(attempt)));
  }
  return out;
}

NoticeWait watch_interval(LinkStore& client, NodeLease& lease, int attempt, milliseconds interval) {
  refresh_lease(client, lease);
  return await_notice(client, attempt, interval);
}

std::optional<StopNotice> publish_stop(LinkStore& client, int attempt, const StopNotice& notice) {
  return decode_notice(client.compare_set(stop_key(attempt), "", encode(notice)));
}

void attempt_done(LinkStore& client, int attempt, int node_rank) { client.set(done_key(attempt, node_rank), "1"); }

StepResult<std::string> ready_for(LinkStore& client, int attempt, int node_rank, int nnodes, bool coordinator,
                                  milliseconds timeout, const std::function<bool(LinkStore&)>& between,
                                  milliseconds slice) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  client.set(ready_key(attempt, node_rank), "1");
  std::vector<std::string> keys;
  if (coordinator) {
    for (int i = 0; i < nnodes; ++i) keys.push_back(ready_key(attempt, i));
  } else {
    keys.push_back(open_key(attempt));
  }
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (client.wait(keys, std::clamp(left, milliseconds(1), slice))) break;
    if (client.check({stop_key(attempt)})) return Stopped{};
    if (Clock::now() >= deadline) {
      return RendezvousFailure{
          EarlyEnd::RendezvousFailed,
          "restart " + std::to_string(attempt) + ": the nodes were not all ready within the rendezvous timeout"};
    }
    if (between && !between(client)) return Stopped{};
  }
  if (coordinator) return std::string();
  return client.get(open_key(attempt));
}

void open_attempt(LinkStore& client, int attempt, std::string_view value) { client.set(open_key(attempt), value); }

void publish_final(LinkStore& client, int node_rank, const NodeFinal& final_result) {
  client.set(final_key(node_rank), encode(final_result));
}

}  // namespace rankrun::launcher::cluster
