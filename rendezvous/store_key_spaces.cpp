// StoreServer's key spaces (store_server.hpp says what they are): those the launcher begins for
// its workers, those clients create by name, the move of a connection into the one it names;
// and the observers that the server tells of its traffic.

#include <spdlog/spdlog.h>

#include "rendezvous/port_owner.hpp"
#include "base/text.hpp"
#include "rendezvous/store_server_impl.hpp"

namespace rankrun::rendezvous {

std::string quoted_name(std::string_view name) {
  constexpr std::size_t k_max = 64;
  return "'" + printable(name, k_max) + "'" +
         (name.size() > k_max ? " (" + std::to_string(name.size()) + " bytes)" : "");
}

KeySpace* StoreServer::Impl::create_key_space(std::string name, bool by_client) {
  const auto& unmetered = m_options.unmetered_key_spaces;
  MemoryBudget* budget = std::find(unmetered.begin(), unmetered.end(), name) == unmetered.end() ? &m_budget : nullptr;
  auto space = std::make_unique<KeySpace>(m_spaces.next_id++, std::move(name), m_options.limits, by_client, budget);
  KeySpace* raw = space.get();
  m_spaces.by_name.emplace(raw->name, raw);
  m_spaces.by_id.emplace(raw->id, std::move(space));
  if (by_client) ++m_spaces.made_by_clients;
  return raw;
}

KeySpaceId StoreServer::Impl::begin_key_space(std::string name) {
  if (!is_valid_key_space_name(name)) {
    throw std::invalid_argument("key space name " + quoted_name(name) + " is not 1 to " +
                                std::to_string(k_max_key_space_name) + " printable ASCII characters without blanks");
  }
  if (m_spaces.by_name.find(name) != m_spaces.by_name.end()) {
    throw std::invalid_argument("key space " + quoted_name(name) + " already exists");
  }
  m_spaces.current_default = create_key_space(std::move(name), false);
  spdlog::debug("store: key space {} '{}' begun; new connections join it", m_spaces.current_default->id,
                m_spaces.current_default->name);
  return m_spaces.current_default->id;
}

void StoreServer::Impl::end_key_space(KeySpaceId id) {
  auto it = m_spaces.by_id.find(id);
  if (it == m_spaces.by_id.end()) return;
  // Detached first, so that callbacks made while its connections close find it gone (ending it
  // again is a no-op, and nothing can join it); it is destroyed when this function returns.
  std::unique_ptr<KeySpace> space = std::move(it->second);
  m_spaces.by_id.erase(it);
  m_spaces.by_name.erase(space->name);
  if (space->by_client) --m_spaces.made_by_clients;
  if (m_spaces.current_default == space.get()) m_spaces.current_default = create_key_space(space->name, false);
  spdlog::debug("store: key space {} '{}' ended: {} keys dropped, {} connections closed", space->id, space->name,
                space->state.num_keys(), space->connections.size());
  // Closing calls back into on_connection_closed, which erases from the map: walk a copy.
  std::vector<std::shared_ptr<StoreConnection>> closing;
  closing.reserve(space->connections.size());
  for (auto& [conn, connection] : space->connections) closing.push_back(connection);
  for (auto& connection : closing) connection->close({});
}

void StoreServer::Impl::reset() {
  std::vector<KeySpaceId> ids;
  for (auto& [id, space] : m_spaces.by_id) ids.push_back(id);
  // Ending the default begins a fresh one with its name, which is not in `ids`.
  for (KeySpaceId id : ids) end_key_space(id);
}

const KeySpace& StoreServer::Impl::key_space(KeySpaceId id) const {
  auto it = m_spaces.by_id.find(id);
  if (it == m_spaces.by_id.end()) throw std::out_of_range("the store has no key space " + std::to_string(id));
  return *it->second;
}

std::string StoreServer::Impl::choose_key_space(StoreConnection& connection, std::string_view name,
                                                std::string* refusal) {
  if (!is_valid_key_space_name(name)) {
    return "key space name " + quoted_name(name) + " is not 1 to " + std::to_string(k_max_key_space_name) +
           " printable ASCII characters without blanks";
  }
  KeySpace* target = nullptr;
  if (auto found = m_spaces.by_name.find(name); found != m_spaces.by_name.end()) {
    target = found->second;
    if (!target->by_client) {
      // The workers' key spaces (and the first default) are reached as the default of a new
      // connection, never by name: an outsider who guessed "attempt_0" would read them.
      std::string why = "asked for key space " + quoted_name(name) + " by name, which only new connections join";
      if (refusal) *refusal = why;
      return why;
    }
  } else if (m_options.max_client_key_spaces == 0) {
    // A store for workers alone (unmodified torch clients, which name no key space).
    std::string why = "asked for key space " + quoted_name(name) + " by name, and this store serves its workers only";
    if (refusal) *refusal = why;
    return why;
  } else if (m_spaces.made_by_clients >= m_options.max_client_key_spaces) {
    return "cannot create key space " + quoted_name(name) + ": " + std::to_string(m_spaces.made_by_clients) +
           " key spaces made by clients exist (the limit)";
  } else {
    target = create_key_space(std::string(name), true);
    spdlog::debug("store: key space {} '{}' created by connection {}", target->id, target->name, connection.id());
  }
  KeySpace* from = connection.key_space();
  if (target == from) return {};
  // Nothing to carry over: this is the connection's first request that touches keys.
  auto node = from->connections.extract(connection.id());
  from->state.disconnect(connection.id());
  target->connections.insert(std::move(node));
  connection.set_key_space(target);
  if (target->by_client && !from->by_client) ++m_workers.agents[canonical_ip(connection.peer_ip())];
  mark_identified(connection.id());
  notify(&connection, [&](StoreObserver& o) { o.on_join(connection.id(), target->id, target->name); });
  return {};
}

void StoreServer::Impl::add_observer(StoreObserver* observer) {
  if (observer == nullptr) return;
  if (std::find(m_observers.list.begin(), m_observers.list.end(), observer) != m_observers.list.end()) return;
  m_observers.list.push_back(observer);
}

void StoreServer::Impl::remove_observer(StoreObserver* observer) {
  auto it = std::find(m_observers.list.begin(), m_observers.list.end(), observer);
  if (it == m_observers.list.end() || observer == nullptr) return;
  if (m_observers.notifying > 0) {
    *it = nullptr;  // a notification is walking the vector by index
    m_observers.dirty = true;
  } else {
    m_observers.list.erase(it);
  }
}

}  // namespace rankrun::rendezvous
