#include "launcher/cluster/elastic_join.hpp"

#include <stdexcept>
#include <utility>
#include <vector>

#include "rendezvous/store_client.hpp"

namespace rankrun::launcher::cluster {

using std::chrono::milliseconds;

JoinAnswer join_round(LinkStore& client, const NodeRecord& me, const std::function<bool(LinkStore&)>& waiting,
                      milliseconds poll, std::int64_t lease, JoinState& state) {
  JoinAnswer out;
  const auto assign = assign_key(me.instance);
  if (!state.cleared) {
    client.delete_key(assign);
    state.cleared = true;
  }
  // Again on a retry: the join may have lapsed with the lost connection's lease (etcd).
  client.set_leased(join_key(me.instance), encode(me), lease);
  while (!client.wait({assign}, poll)) {
    if (!waiting(client)) {
      out.message = "stopped";
      return out;
    }
  }
  const auto answer = client.get(assign);
  if (answer.rfind("abort\n", 0) == 0 || answer.rfind("closed\n", 0) == 0) {
    out.kind = answer[0] == 'c' ? JoinAnswer::Kind::Closed : JoinAnswer::Kind::Abort;
    out.message = answer.substr(answer.find('\n') + 1);
    return out;
  }
  // The round's map, in pages; this node's entry must be the one it announced.
  const auto a = decode_assignment(answer);
  std::optional<RoundRecord> record;
  if (a) {
    std::vector<std::string> keys;
    for (int p = 0; p < a->pages; ++p) keys.push_back(round_map_key(a->round, p));
    record = decode_pages(client.multi_get(keys), a->round, a->nodes);
  }
  const auto& mine = record ? record->members[static_cast<std::size_t>(a->node_rank)] : me;
  if (!record || mine.host != me.host || mine.nproc != me.nproc) {
    const auto why = foreign_record(answer);
    out.message = why ? *why : "the answer to this node's join is not readable: " + answer.substr(0, 200);
    return out;
  }
  out.kind = JoinAnswer::Kind::Round;
  out.node_rank = a->node_rank;
  out.round = std::move(*record);
  return out;
}

JoinProgress::JoinProgress(std::string instance, std::int64_t lease, milliseconds keep_every)
    : m_instance(std::move(instance)),
      m_lease(lease),
      m_keep_every(keep_every),
      m_next_keep(Clock::now() + keep_every),
      m_next_progress(Clock::now() + k_progress_first) {}

milliseconds JoinProgress::poll() const { return m_lease != 0 ? m_keep_every : k_progress_first; }

void JoinProgress::step(LinkStore& client, const Say& say) {
  if (m_lease != 0 && Clock::now() >= m_next_keep) {
    client.keep_alive(m_lease);
    m_next_keep = Clock::now() + m_keep_every;
  }
  if (!m_spare_told && client.check({spare_key(m_instance)})) {
    m_spare_told = true;
    say(client.get(spare_key(m_instance)));
  }
  const auto line = client.check({k_status_key}) ? client.get(k_status_key) : std::string();
  if (line.empty() || m_spare_told) return;
  const auto changed = line.substr(0, line.rfind(';')) != m_last_line.substr(0, m_last_line.rfind(';'));
  if (changed || Clock::now() >= m_next_progress) {
    say("waiting for nodes: " + line);
    m_last_line = line;
    m_next_progress = Clock::now() + k_progress_every;
  }
}

std::int64_t renew_or_grant(LinkStore& client, std::int64_t current, milliseconds ttl) {
  if (!client.has_leases()) return 0;
  if (current != 0) {
    try {
      client.keep_alive(current);
      return current;
    } catch (const rendezvous::StoreError&) {
      // Lapsed (the job counted this node as lost): a new one.
    }
  }
  return client.grant(ttl);
}

std::variant<JoinedRound, RendezvousFailure> joined_round(const JoinAnswer& answer) {
  if (answer.kind != JoinAnswer::Kind::Round) {
    const bool closed = answer.kind == JoinAnswer::Kind::Closed;
    return RendezvousFailure{closed ? EarlyEnd::RendezvousClosed : EarlyEnd::RendezvousFailed,
                             closed ? "the rendezvous is closed: " + answer.message : answer.message};
  }
  const auto& members = answer.round.members;
  const int nnodes = static_cast<int>(members.size());
  try {
    return JoinedRound{plan_nodes(members, nnodes), answer.node_rank, answer.round.round};
  } catch (const std::invalid_argument& e) {
    return RendezvousFailure{EarlyEnd::RendezvousFailed, e.what()};
  }
}

}  // namespace rankrun::launcher::cluster
