#include "launcher/job/workers_store.hpp"

#include <boost/asio/post.hpp>
#include <chrono>
#include <algorithm>
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

std::int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The worker's wall clock turned into this process's steady clock (both read now).
std::optional<RankSection> section_of(const rankrun::HeartbeatValue& beat) {
  if (!beat.section) return std::nullopt;
  const auto ago = std::chrono::milliseconds(std::max<std::int64_t>(0, unix_ms_now() - beat.section->since_ms));
  return RankSection{beat.section->name, HangClock::now() - ago,
                     Seconds(static_cast<double>(beat.section->timeout_ms) / 1000.0)};
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
  m_rates.assign(pids.size(), StepRate{});
  m_calls.assign(pids.size(), std::nullopt);
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
  add_heartbeat(view, local_rank, rank);
  view.last_key = m_watch->last_key(local_rank);
  const auto arrivals = m_watch->arrivals();
  if (local_rank >= 0 && static_cast<std::size_t>(local_rank) < arrivals.size())
    view.arrival = arrivals[static_cast<std::size_t>(local_rank)];
  return view;
}

RankStoreView WorkersStore::heartbeat_view(int local_rank, int rank) const {
  RankStoreView view;
  add_heartbeat(view, local_rank, rank);
  return view;
}

void WorkersStore::add_heartbeat(RankStoreView& view, int local_rank, int rank) const {
  if (!m_server) return;
  const auto& state = m_server->state(m_key_space);
  if (const auto hb = state.value(rankrun::heartbeat_key(rank))) {
    if (const auto beat = rankrun::parse_heartbeat(*hb)) {
      view.heartbeat_age = static_cast<double>(unix_ms_now() - beat->unix_ms) / 1000.0;
      view.step = beat->step;
      view.section = section_of(*beat);
      if (beat->batches) view.batches = RankBatches{beat->batches->epoch, beat->batches->read, beat->batches->planned};
    }
  }
  if (local_rank >= 0 && static_cast<std::size_t>(local_rank) < m_rates.size())
    view.steps_per_second = m_rates[static_cast<std::size_t>(local_rank)].per_second();
}

void WorkersStore::read_step(int local_rank, int rank, std::function<void(const StepReport&)> then) {
  // The value is applied after the event's call returns; read it then, to see a new step.
  boost::asio::post(m_io, [this, local_rank, rank, space = m_key_space, then = std::move(then)] {
    if (m_stopped || !m_server || space != m_key_space) return;
    if (const auto hb = m_server->state(space).value(rankrun::heartbeat_key(rank))) {
      if (const auto beat = rankrun::parse_heartbeat(*hb)) {
        m_watch->heartbeat_value(local_rank, beat->step);
        StepReport report{beat->step, section_of(*beat), std::nullopt, false};
        if (local_rank >= 0 && static_cast<std::size_t>(local_rank) < m_rates.size()) {
          auto& rate = m_rates[static_cast<std::size_t>(local_rank)];
          const auto now = std::chrono::steady_clock::now();
          rate.add(now, beat->step);
          report.per_second = rate.per_second();
          report.periodic = beat->step >= 0 && rate.due(now, k_step_event_interval);
          auto& calls = m_calls[static_cast<std::size_t>(local_rank)];
          report.called = beat->calls && calls != beat->calls;
          calls = beat->calls;
        }
        then(report);
      }
    }
  });
}

void WorkersStore::map_connections() {
  if (m_watch) m_watch->resolve_now();
}

std::vector<Arrival> WorkersStore::arrivals() { return m_watch ? m_watch->arrivals() : std::vector<Arrival>{}; }
UnmatchedConnections WorkersStore::unmatched_connections() const {
  return m_watch ? m_watch->unmatched() : UnmatchedConnections{};
}
std::optional<DuplicateRank> WorkersStore::duplicate_rank() {
  return m_watch ? m_watch->duplicate_rank() : std::nullopt;
}

void WorkersStore::stop() {
  m_stopped = true;
  if (m_watch) m_watch->stop();
  if (m_server) m_server->stop();
}

}  // namespace rankrun::launcher
