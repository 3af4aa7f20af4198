#include "launcher/rdzv/store_backends.hpp"

#include <spdlog/spdlog.h>

#include <mutex>
#include <utility>

#include "launcher/cluster/records.hpp"
#include "base/host_port.hpp"
#include "rendezvous/store_client.hpp"

namespace rankrun::launcher::rdzv {
namespace {

using Clock = std::chrono::steady_clock;

// What the node knows of its job secret, for the message of a store host that refused it.
struct SecretOrigin {
  bool has_one = false;
  std::string origin;          // where this node's came from
  std::string munge_unusable;  // why MUNGE could not give it one under Slurm
};

// The rendezvous failure of a store host that refused this node's handshake.
std::string refused_message(const rendezvous::StoreRefused& e, const std::string& where, const SecretOrigin& mine) {
  if (!e.secrets_differ) {
    return where + " refused this node's connection: " + (e.server_reason.empty() ? e.detail() : e.server_reason);
  }
  // "refused this connection: no job secret", "has no job secret, and this end has one".
  return "the job secrets differ: " + where + " " + e.detail() + "; give every node the same secret (" +
         (mine.has_one ? "this node's is from " + mine.origin
                       : "this node has none: set --rdzv-conf secret_file=PATH or RANKRUN_JOB_SECRET_FILE=PATH" +
                             (mine.munge_unusable.empty() ? std::string()
                                                          : "; MUNGE could not be used: " + mine.munge_unusable)) +
         ")";
}

}  // namespace

cluster::LinkChannel store_channel(const LaunchConfig& c, const std::string& host, std::uint16_t port) {
  // The secret every connection proves: the configuration's, or the one the first connection
  // takes from the store host's credential (MUNGE), which the later ones prove.
  struct Secret {
    std::mutex mutex;
    std::shared_ptr<const rendezvous::JobSecret> secret;
  };
  auto held = std::make_shared<Secret>();
  held->secret = c.job_secret;
  const bool elastic = c.rdzv == RdzvKind::C10d;

  cluster::LinkChannel channel;
  channel.where = "the store host " + host_port(host, port);
  channel.unreachable_hint = elastic ? "; check --rdzv-endpoint and that rankrun runs on that host"
                                     : "; check --master-addr/--master-port and that node 0 runs";
  channel.connect = [host, port, held, take = c.take_secret_credential](const cluster::LinkConnect& how) {
    rendezvous::ClientOptions options;
    options.connect_timeout = how.connect_timeout;
    options.timeout = how.reply_timeout;
    options.user_timeout = how.reply_timeout;
    options.patience = how.patience;
    options.on_slow_reply = how.slow_reply;
    options.key_space = cluster::k_agents_key_space;
    {
      const std::lock_guard lock(held->mutex);
      options.job_secret = held->secret;
    }
    if (!options.job_secret && take) {
      options.take_credential = [held, take](const std::string& credential) {
        auto secret = take(credential);
        const std::lock_guard lock(held->mutex);
        held->secret = secret;
        return secret;
      };
    }
    options.cancel_fd = how.cancel_fd;
    return cluster::wrap(std::make_unique<rendezvous::StoreClient>(host, port, options));
  };
  const SecretOrigin mine{c.job_secret || c.take_secret_credential, c.job_secret_origin, c.munge_unusable};
  channel.refusal = [where = channel.where, elastic,
                     mine](const rendezvous::StoreError& e) -> std::optional<std::string> {
    // The store host will not have this node.
    if (const auto* refused = dynamic_cast<const rendezvous::StoreRefused*>(&e))
      return refused_message(*refused, where, mine);
    // What listens there is something else ("the server at H:P is not a store: ...").
    if (e.kind() == rendezvous::StoreFailure::NotAStore) {
      return std::string(e.what()) + (elastic ? "; check --rdzv-endpoint (the rendezvous host's port)"
                                              : "; check --master-addr/--master-port (node 0's store)");
    }
    return std::nullopt;
  };
  return channel;
}

StoreBackend::StoreBackend(boost::asio::io_context& io, const LaunchConfig& config, JobSide side, Channels channels)
    : LinkedBackend(io, config, std::move(side), std::move(channels)), m_elastic(config.rdzv == RdzvKind::C10d) {}

StoreBackend::~StoreBackend() {
  if (m_agents) {
    if (m_leases) m_agents->remove_observer(m_leases.get());
    if (m_rounds) m_agents->remove_observer(m_rounds.get());
  }
  stop_parts();
}

cluster::LinkChannel StoreBackend::channel() const {
  return store_channel(m_config, m_config.master_addr, workers_port());
}

std::function<bool(int)> StoreBackend::attempt_opener() const {
  // The store host opens every attempt, whatever its rank in the round.
  return [host = coordinates()](int) { return host; };
}

std::string StoreBackend::role(int) const { return coordinates() ? " (this node hosts the store)" : ""; }

std::string StoreBackend::where() const {
  return "the store host " + m_config.master_addr + ":" + std::to_string(workers_port());
}

void StoreBackend::coordinate() {
  auto* store = m_side.store();
  if (!store) return;
  m_agents = m_channels.hosted ? m_channels.hosted(*store) : cluster::store_keys(*store);
  make_leases();
  m_agents->add_observer(m_leases.get());
  if (!m_elastic) return;
  make_rounds(*m_agents, nullptr);
  m_agents->add_observer(m_rounds.get());
}

std::optional<std::string> StoreBackend::agent_value(const std::string& key) const {
  if (!m_agents) return std::nullopt;
  return m_agents->value(key);
}

void StoreBackend::on_node_lost(int node_rank) {
  if (!m_map || static_cast<std::size_t>(node_rank) >= m_map->nodes.size()) return;
  const auto& node = m_map->nodes[static_cast<std::size_t>(node_rank)];
  if (m_rounds && m_rounds->keeper().rejoined(node_rank)) {
    spdlog::debug("node {} ({}) let its lease of the round before lapse: it has joined the next round", node_rank,
                  node.host);
    return;
  }
  spdlog::error("node {} ({}, {}) is lost: no lease for {} s (--node-timeout)", node_rank, node.host,
                cluster::ranks_of(node), m_config.node_timeout);
  if (finished()) return;
  if (m_rounds) {
    // Elastic: the round ends, a new one forms without it (RoundHost's restart hook).
    m_rounds->lost(node_rank);
    return;
  }
  cluster::StopNotice n;
  n.kind = cluster::StopKind::NodeLost;
  n.node_rank = node_rank;
  n.host = node.host;
  n.ranks = cluster::ranks_of(node);
  m_link->publish_stop(m_side.attempt(), n);
}

void StoreBackend::log_start() const {
  if (m_elastic) {
    spdlog::info("elastic rendezvous at {}:{} ({}), {} to {} nodes", m_config.master_addr, workers_port(),
                 coordinates() ? "hosted here" : "hosted there", m_config.min_nodes, m_config.nnodes);
  } else {
    spdlog::info("node {} of {}: rendezvous at {}:{}", m_config.node_rank, m_config.nnodes, m_config.master_addr,
                 workers_port());
  }
}

void StoreBackend::formed_here(int round, int nodes) {
  if (!m_leases) return;
  m_leases->set_self(m_node_rank);  // this node hosts the store: its own lease proves nothing
  if (round >= 0) {
    m_leases->start_round(nodes, cluster::lease_prefix(round));
  } else {
    m_leases->start();
  }
}

void StoreBackend::abort_waiting(int signo, std::function<void()> done) {
  if (m_elastic) {
    // A waiting node leaves alone; the store host tells every waiting node.
    if (m_rounds) m_rounds->close_job("rankrun on the store host received " + signal_name(signo), !m_map);
    done();
    return;
  }
  // Every node waits for the same rendezvous: they all hear why it ends.
  m_link->abort_rendezvous("rankrun on node " + std::to_string(m_node_rank) + " received " + signal_name(signo),
                           std::move(done));
}

// Before any worker exists (a failed rendezvous, a signal during it): node 0 keeps serving a
// moment, until the other nodes have read how the rendezvous ended and hung up (at most
// k_linger), so that they report the same cause and not a lost store.
void StoreBackend::leave_early(std::function<void()> shut_down) {
  m_shut_down = std::move(shut_down);
  if (!coordinates() || !m_link) {
    this->shut_down();
    return;
  }
  m_link->stop();
  linger(Clock::now() + k_linger);
}

// c10d's store host, once every node's result is in: the waiting nodes (spares, late ones) were
// just told that the rendezvous is closed; the store serves until they have read it and hung
// up (at most k_linger), so that they exit 119 and not as if the store host was lost. The
// static rendezvous has nobody waiting: it shuts down at once.
void StoreBackend::serve_last_answers() {
  if (!m_rounds) {
    shut_down();
    return;
  }
  m_link->stop();
  linger(Clock::now() + k_linger);
}

void StoreBackend::linger(Clock::time_point deadline) {
  if (!m_agents || m_agents->connections() == 0 || Clock::now() >= deadline) {
    shut_down();
    return;
  }
  m_timer.expires_after(std::chrono::milliseconds(20));
  m_timer.async_wait([this, deadline](boost::system::error_code ec) {
    if (!ec) linger(deadline);
  });
}

}  // namespace rankrun::launcher::rdzv
