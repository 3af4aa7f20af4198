#include "launcher/job/workers_store.hpp"

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <utility>

#include "rankrun/store_keys.hpp"

namespace rankrun::launcher {
namespace {

// The key space of an attempt's workers: reached only as the default of a new connection (the
// store never lets a client join it by name), and named with 64 random bits besides, so that no
// client can guess the name and take it first.
std::string attempt_key_space(int attempt) {
  std::random_device random;  // getrandom()
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "-%08x%08x", random(), random());
  return "attempt_" + std::to_string(attempt) + suffix;
}

}  // namespace

WorkersStore::WorkersStore(boost::asio::io_context& io, std::unique_ptr<rendezvous::StoreServer> server, int first_rank,
                           StoreWatch::Listener events)
    : m_io(io), m_events(std::move(events)), m_server(std::move(server)) {
  if (!m_server) return;
  watch(first_rank);
  // Workers of every node join the default key space: it must be attempt 0's before any node
  // can start them.
  m_key_space = m_server->begin_key_space(attempt_key_space(0));
}

WorkersStore::~WorkersStore() {
  if (m_server && m_watch) m_server->remove_observer(&*m_watch);
}

void WorkersStore::watch(int first_rank) {
  m_watch.emplace(m_io, m_server->port(), first_rank, m_events);
  m_server->add_observer(&*m_watch);
}

void WorkersStore::host(std::unique_ptr<rendezvous::StoreServer> server, int first_rank, int attempt) {
  m_server = std::move(server);
  watch(first_rank);
  m_key_space = m_server->begin_key_space(attempt_key_space(attempt));
  m_key_space_attempt = attempt;
}

void WorkersStore::set_first_rank(int first_rank) {
  if (m_watch) m_watch->set_first_rank(first_rank);
}

void WorkersStore::start_attempt(int attempt, const std::vector<pid_t>& pids) {
  if (m_server && attempt != m_key_space_attempt) {
    const auto previous = m_key_space;
    m_key_space = m_server->begin_key_space(attempt_key_space(attempt));
    m_key_space_attempt = attempt;
    m_server->end_key_space(previous);
  }
  if (m_watch) m_watch->start_attempt(pids);
}

RankStoreView WorkersStore::view(int local_rank, int rank) {
  RankStoreView view;
  if (!m_server) return view;  // a multi-node job's other nodes: the store is node 0's
  const auto& state = m_server->state(m_key_space);
  if (const auto coll = state.value(rankrun::collective_record_key(rank))) {
    if (const auto record = rankrun::parse_collective_record(*coll)) {
      view.collective = CollectiveState{record->kind, record->seq, record->entered, record->name};
    }
  }
  if (const auto hb = state.value(rankrun::heartbeat_key(rank))) {
    if (const auto beat = rankrun::parse_heartbeat(*hb)) {
      const auto now_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      view.heartbeat_age = static_cast<double>(now_ms - beat->unix_ms) / 1000.0;
      view.step = beat->step;
    }
  }
  view.last_key = m_watch->last_key(local_rank);
  const auto arrivals = m_watch->arrivals();
  if (local_rank >= 0 && static_cast<std::size_t>(local_rank) < arrivals.size())
    view.arrival = arrivals[static_cast<std::size_t>(local_rank)];
  return view;
}

void WorkersStore::read_step(int local_rank, int rank, std::function<void(long long step)> then) {
  // The value is applied after the event's call returns; read it then, to see a new step.
  boost::asio::post(m_io, [this, local_rank, rank, space = m_key_space, then = std::move(then)] {
    if (m_stopped || !m_server || space != m_key_space) return;
    if (const auto hb = m_server->state(space).value(rankrun::heartbeat_key(rank))) {
      if (const auto beat = rankrun::parse_heartbeat(*hb)) {
        m_watch->heartbeat_value(local_rank, beat->step);
        then(beat->step);
      }
    }
  });
}

std::vector<Arrival> WorkersStore::arrivals() { return m_watch ? m_watch->arrivals() : std::vector<Arrival>{}; }
std::optional<DuplicateRank> WorkersStore::duplicate_rank() {
  return m_watch ? m_watch->duplicate_rank() : std::nullopt;
}

void WorkersStore::stop() {
  m_stopped = true;
  if (m_watch) m_watch->stop();
  if (m_server) m_server->stop();
}

}  // namespace rankrun::launcher
