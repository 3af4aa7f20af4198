#include <spdlog/spdlog.h>

#include "launcher/types/launch_error.hpp"
#include "launcher/rdzv/backend.hpp"
#include "launcher/cluster/records.hpp"
#include "launcher/rdzv/etcd_backend.hpp"
#include "launcher/rdzv/single_node.hpp"
#include "launcher/rdzv/store_backends.hpp"

namespace rankrun::launcher::rdzv {

std::unique_ptr<Backend> make_backend(boost::asio::io_context& io, const LaunchConfig& config, JobSide side,
                                      Channels channels) {
  switch (config.rdzv) {
    case RdzvKind::Single: return std::make_unique<SingleNode>(config);
    case RdzvKind::Static:
    case RdzvKind::C10d: return std::make_unique<StoreBackend>(io, config, std::move(side), std::move(channels));
    case RdzvKind::Etcd: return std::make_unique<EtcdBackend>(io, config, std::move(side), std::move(channels));
  }
  throw LaunchError("no rendezvous backend for this configuration");
}

rendezvous::ServerOptions store_options(const LaunchConfig& c, std::string bind_address) {
  rendezvous::ServerOptions options;
  options.bind_address = std::move(bind_address);
  options.port = c.master_port.value_or(0);
  options.protocol = c.store_protocol;
  // c10d's store is the rendezvous endpoint's; etcd's node rank 0 hosts the workers' store alone.
  options.port_flag = c.rdzv == RdzvKind::C10d ? "--rdzv-endpoint" : "--master-port";
  // The other nodes must know it.
  options.any_port_will_do = c.nnodes == 1;
  options.memory_quota = c.store_memory;
  options.limits.max_connections_per_peer = c.store_connections_per_address;
  options.per_address_flag = "--store-connections-per-address";
  if (c.rdzv == RdzvKind::Etcd) {
    // The agents meet in etcd: no client names a key space here (an outsider would get one of
    // its own, "rankrun-agents" outside the quota).
    options.max_client_key_spaces = 0;
  } else {
    options.unmetered_key_spaces = {cluster::k_agents_key_space};
    // The nodes' links (a few connections each) keep their room when workers' connections
    // flood the store.
    if (c.nnodes > 1) options.agent_reserve = 64 + 4 * static_cast<std::size_t>(c.nnodes);
  }
  // A connection that asks for the agents' key space proves the job's secret.
  options.job_secret = c.job_secret;
  options.issue_credential = c.issue_secret_credential;
  return options;
}

std::unique_ptr<rendezvous::StoreServer> open_store(boost::asio::io_context& io, const LaunchConfig& c) {
  try {
    const auto address = store_bind_address(c);
    if (address != c.master_addr) {
      spdlog::info(
          "the store listens on every interface: {} is this machine's loopback, which the other nodes "
          "cannot reach",
          c.master_addr);
    }
    try {
      return std::make_unique<rendezvous::StoreServer>(io, store_options(c, address));
    } catch (const rendezvous::StorePortInUse&) {
      throw;
    } catch (const rendezvous::StoreBindError&) {
      if (address != "::") throw;
      return std::make_unique<rendezvous::StoreServer>(io, store_options(c, "0.0.0.0"));  // a kernel without IPv6
    }
  } catch (const rendezvous::StorePortInUse& e) {
    if (is_elastic(c.rdzv) && !c.is_host) {
      // Several nodes of one machine (a test on loopback): the first to bind hosts the store.
      spdlog::info("the rendezvous port {}:{} is taken on this machine; joining the store there as a node",
                   c.master_addr, c.master_port.value_or(0));
      return nullptr;
    }
    throw LaunchError(e.what());
  } catch (const rendezvous::StoreBindError& e) {
    throw LaunchError(e.what());
  }
}

}  // namespace rankrun::launcher::rdzv
