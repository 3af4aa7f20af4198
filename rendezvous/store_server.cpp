// StoreServer's public calls, over its Impl (store_server_impl.hpp names the files of each
// concern), and stopping.

#include "rendezvous/store_server.hpp"

#include <sys/resource.h>

#include "rendezvous/store_server_impl.hpp"

namespace rankrun::rendezvous {

StoreServer::Impl::Impl(boost::asio::io_context& io, ServerOptions options)
    : m_io(io), m_options(std::move(options)), m_listener(io) {
  m_budget.limit = m_options.memory_quota;
  // Descriptors are kept in reserve for everything else the process opens (its logs, its
  // workers' pipes, its own connections to other nodes): a flood of connections reaches the
  // connection limit before the descriptor limit.
  m_connections.limit = m_options.limits.max_connections;
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    constexpr rlim_t k_reserve = 256;
    const rlim_t usable = nofile.rlim_cur > 2 * k_reserve ? nofile.rlim_cur - k_reserve : nofile.rlim_cur / 2;
    m_connections.limit = std::min<std::size_t>(m_connections.limit, static_cast<std::size_t>(usable));
  }
  m_connections.agent_reserve = std::min(m_options.agent_reserve, m_connections.limit / 2);
  m_spaces.current_default = create_key_space("default", false);
}

void StoreServer::Impl::close_all() {
  // Closing calls back into on_connection_closed, which erases from the maps: walk a copy.
  std::vector<std::shared_ptr<StoreConnection>> all;
  all.reserve(m_connections.open);
  for (auto& [id, space] : m_spaces.by_id) {
    for (auto& [conn, connection] : space->connections) all.push_back(connection);
  }
  for (auto& connection : all) connection->close({});
}

void StoreServer::Impl::stop() {
  if (m_stopped) return;
  m_stopped = true;
  boost::system::error_code ec;
  m_listener.acceptor.close(ec);
  m_listener.retry_timer.cancel();
  close_all();
}

StoreServer::StoreServer(boost::asio::io_context& io, ServerOptions options, StoreObserver* observer)
    : m_impl(std::make_shared<Impl>(io, std::move(options))) {
  m_impl->add_observer(observer);
  m_impl->listen();
  m_impl->do_accept();
}

StoreServer::~StoreServer() {
  // The observers may already be half torn down by their owners: no callbacks from here on.
  m_impl->m_observers.list.clear();
  m_impl->stop();
}

std::uint16_t StoreServer::port() const { return m_impl->m_listener.port; }
const std::string& StoreServer::address() const { return m_impl->m_listener.address; }

StoreServer::KeySpaceId StoreServer::begin_key_space(std::string name) {
  return m_impl->begin_key_space(std::move(name));
}
void StoreServer::end_key_space(KeySpaceId space) { m_impl->end_key_space(space); }
StoreServer::KeySpaceId StoreServer::default_key_space() const { return m_impl->m_spaces.current_default->id; }

std::optional<StoreServer::KeySpaceId> StoreServer::find_key_space(std::string_view name) const {
  auto it = m_impl->m_spaces.by_name.find(name);
  if (it == m_impl->m_spaces.by_name.end()) return std::nullopt;
  return it->second->id;
}

const std::string& StoreServer::key_space_name(KeySpaceId space) const { return m_impl->key_space(space).name; }

std::vector<StoreServer::KeySpaceId> StoreServer::key_spaces() const {
  std::vector<KeySpaceId> ids;
  ids.reserve(m_impl->m_spaces.by_id.size());
  for (const auto& [id, space] : m_impl->m_spaces.by_id) ids.push_back(id);
  return ids;
}

void StoreServer::add_observer(StoreObserver* observer) { m_impl->add_observer(observer); }
void StoreServer::remove_observer(StoreObserver* observer) { m_impl->remove_observer(observer); }
void StoreServer::reset() { m_impl->reset(); }
void StoreServer::stop() { m_impl->stop(); }
void StoreServer::admit_workers_from(std::optional<std::vector<std::string>> addresses) {
  m_impl->admit_workers_from(std::move(addresses));
}

std::size_t StoreServer::connection_count() const { return m_impl->m_connections.open; }

std::size_t StoreServer::connection_count(KeySpaceId space) const {
  auto it = m_impl->m_spaces.by_id.find(space);
  return it == m_impl->m_spaces.by_id.end() ? 0 : it->second->connections.size();
}

std::size_t StoreServer::buffered_bytes() const {
  std::size_t total = 0;
  for (const auto& [id, space] : m_impl->m_spaces.by_id) {
    for (const auto& [cid, connection] : space->connections) total += connection->buffered_bytes();
  }
  return total;
}

const StoreState& StoreServer::state() const { return m_impl->m_spaces.current_default->state; }
const StoreState& StoreServer::state(KeySpaceId space) const { return m_impl->key_space(space).state; }

void StoreServer::set(KeySpaceId space_id, const std::string& key, const std::string& value) {
  auto& space = m_impl->key_space(space_id);
  Request request;
  request.op = Op::Set;
  request.keys = {key};
  request.values = {value};
  // Connection id 0 is never a client's (they count from 1): the reply goes nowhere.
  Effects effects;
  space.state.apply(0, request, effects);
  Impl::wake(space, effects);
}

}  // namespace rankrun::rendezvous
