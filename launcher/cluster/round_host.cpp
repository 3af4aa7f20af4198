#include "launcher/cluster/round_host.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace rankrun::launcher::cluster {
namespace {
using Clock = RoundKeeper::Clock;
// The waiting line is rewritten this often while a round forms (its time left changes).
constexpr auto k_status_every = std::chrono::seconds(1);
}  // namespace

namespace {
class StoreKeys final : public AgentsStore {
 public:
  explicit StoreKeys(rendezvous::StoreServer& store) : m_store(store) {}
  std::optional<std::string> value(const std::string& key) override {
    const auto space = m_store.find_key_space(k_agents_key_space);
    if (!space) return std::nullopt;
    const auto value = m_store.state(*space).value(key);
    if (!value) return std::nullopt;
    return std::string(*value);
  }
  void set(const std::string& key, const std::string& value) override {
    if (const auto space = m_store.find_key_space(k_agents_key_space)) m_store.set(*space, key, value);
  }
  void add_observer(rendezvous::StoreObserver* observer) override { m_store.add_observer(observer); }
  void remove_observer(rendezvous::StoreObserver* observer) override { m_store.remove_observer(observer); }
  std::size_t connections() const override {
    const auto space = m_store.find_key_space(k_agents_key_space);
    return space ? m_store.connection_count(*space) : 0;
  }

 private:
  rendezvous::StoreServer& m_store;
};
}  // namespace

std::unique_ptr<AgentsStore> store_keys(rendezvous::StoreServer& store) { return std::make_unique<StoreKeys>(store); }

RoundHost::RoundHost(boost::asio::io_context& io, RoundKeys& keys, RoundRules rules, Hooks hooks)
    : m_io(io), m_keys(keys), m_rules(rules), m_hooks(std::move(hooks)), m_keeper(rules, Clock::now()), m_timer(io) {
  arm();
}

RoundHost::~RoundHost() { stop(); }

void RoundHost::stop() {
  m_stopped = true;
  m_timer.cancel();
}

void RoundHost::on_join(std::uint64_t conn, rendezvous::KeySpaceId, std::string_view name) {
  if (name == k_agents_key_space) {
    m_agents.insert(conn);
  } else {
    m_agents.erase(conn);
  }
}

void RoundHost::on_close(std::uint64_t conn) {
  m_agents.erase(conn);
  const auto it = m_joiners.find(conn);
  if (it == m_joiners.end()) return;
  auto instance = std::move(it->second);
  m_joiners.erase(it);
  // A node waiting for a round went away (Ctrl-C, killed): no round waits for it. A member's
  // connection is not in m_joiners once its round closed (leases decide about members).
  boost::asio::post(m_io, [this, instance = std::move(instance)] { left(instance); });
}

void RoundHost::left(const std::string& instance) {
  if (!m_stopped) apply(m_keeper.leave(instance, Clock::now()));
}

void RoundHost::on_request(std::uint64_t conn, rendezvous::Op op, std::string_view key) {
  if (m_stopped || op != rendezvous::Op::Set || !m_agents.count(conn)) return;
  if (auto instance = instance_in_join_key(key)) {
    m_joiners[conn] = *instance;
    // The server applies the SET after this call: read the record then.
    boost::asio::post(m_io, [this, instance = std::move(*instance)] { joined(instance); });
  }
}

void RoundHost::set(const std::string& key, const std::string& value) { m_keys.set(key, value); }

void RoundHost::joined(const std::string& instance) {
  if (m_stopped) return;
  const auto value = m_keys.value(join_key(instance));
  const auto record = value ? decode_node(*value) : std::nullopt;
  if (!record || record->instance != instance) {
    const auto why = value ? foreign_record(*value) : std::nullopt;
    spdlog::warn("ignoring an unreadable join record for '{}'{}", instance, why ? ": " + *why : std::string());
    return;
  }
  spdlog::debug("{} ({}) asks to join", record->host, instance);
  apply(m_keeper.join(*record, Clock::now()));
}

void RoundHost::resume(int round, std::vector<NodeRecord> members) {
  m_keeper.resume(round, std::move(members), Clock::now());
  arm();
}

void RoundHost::lost(int node_rank) {
  if (m_stopped) return;
  apply(m_keeper.lost(node_rank, Clock::now()));
}

void RoundHost::close_job(const std::string& message, bool failed) {
  if (m_stopped || m_keeper.closed()) return;
  m_closed_message = message;
  m_failed = failed;
  set(k_closed_key, (failed ? "abort\n" : "closed\n") + message);
  apply(m_keeper.close_job());
}

void RoundHost::apply(const RoundStep& step) {
  // The restart first: the members hear the notice before anything of the next round.
  if (step.restart && m_hooks.restart) m_hooks.restart(*step.restart, m_keeper.round(), m_keeper.expected_nodes());
  if (step.closed) {
    const auto& round = *step.closed;
    std::set<std::string_view> members;
    for (const auto& m : round.members) members.insert(m.instance);
    for (auto it = m_joiners.begin(); it != m_joiners.end();) {
      it = members.count(it->second) ? m_joiners.erase(it) : std::next(it);
    }
    // The map first, then each member's answer: a node reads the pages once it has its answer.
    const auto pages = encode_pages(round);
    for (std::size_t p = 0; p < pages.size(); ++p) set(round_map_key(round.round, static_cast<int>(p)), pages[p]);
    Assignment a{round.round, 0, static_cast<int>(round.members.size()), static_cast<int>(pages.size())};
    for (const auto& m : round.members) {
      a.node_rank = m.node_rank;
      set(assign_key(m.instance), encode(a));
    }
    if (m_hooks.closed) m_hooks.closed(round);
  }
  for (const auto& instance : step.new_spares) {
    set(spare_key(instance), "the job has its maximum of " + std::to_string(m_rules.max_nodes) +
                                 " nodes (--nnodes=MIN:MAX); this node waits as a spare and joins when a node is lost");
  }
  for (const auto& [instance, message] : step.refused) set(assign_key(instance), "abort\n" + message);
  if (step.abort) {
    m_closed_message = *step.abort;
    m_failed = true;
    set(k_closed_key, "abort\n" + m_closed_message);
  }
  for (const auto& instance : step.told_closed) {
    set(assign_key(instance), (m_failed ? "abort\n" : "closed\n") +
                                  (m_closed_message.empty() ? std::string("the job is over") : m_closed_message));
  }
  arm();
}

void RoundHost::arm() {
  if (m_stopped) return;
  const auto now = Clock::now();
  // The waiting line costs a pass over the joined nodes: rewritten at most once a second while
  // nodes pour in (and at once for the first node and when a round closes), not after each join.
  if (now - m_status_at >= k_status_every || m_status.empty() || !m_keeper.forming()) {
    if (auto status = m_keeper.status(now); status != m_status) {
      m_status = std::move(status);
      set(k_status_key, m_status);
    }
    m_status_at = now;
  }
  m_timer.cancel();
  if (!m_keeper.forming()) return;
  auto next = now + k_status_every;
  if (const auto deadline = m_keeper.next_deadline()) next = std::min(next, *deadline);
  m_timer.expires_at(next);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (ec || m_stopped) return;
    apply(m_keeper.tick(Clock::now()));
  });
}

}  // namespace rankrun::launcher::cluster
