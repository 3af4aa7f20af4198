#include "rankrun/collectives.hpp"

#include <chrono>
#include <optional>

#include "rankrun/store_keys.hpp"
#include "rendezvous/store_client.hpp"
#include "worker_runtime/collective_protocol.hpp"

namespace rankrun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::string_view k_done_ok = "ok";
constexpr std::string_view k_done_mismatch = "mismatch\n";

void check_name(std::string_view name) {
  if (name.find('\n') != std::string_view::npos)
    throw std::invalid_argument("collective name must not contain a newline: '" + std::string(name) + "'");
}

}  // namespace

struct Collectives::Impl {
  WorkerContext context;
  CollectiveOptions options;
  std::optional<rendezvous::StoreClient> store;
  std::uint64_t seq = 0;
  // Keys this rank wrote for the previous call, deleted once the next call completes (then
  // every rank has finished reading them).
  std::vector<std::string> stale_keys;

  std::string key(std::uint64_t s, std::string_view leaf) const {
    return collective_key_base(options.group, s) + std::string(leaf);
  }
  std::string arrival_key(std::uint64_t s, int rank) const { return key(s, "r" + std::to_string(rank)); }

  // Runs one call up to the point where every rank has arrived; returns its number.
  std::uint64_t exchange(std::string_view kind, std::string_view name, std::string_view payload,
                         std::optional<milliseconds> timeout_arg);
  std::vector<int> missing_ranks(std::uint64_t s);
  void record(std::string_view kind, std::uint64_t s, bool entered, std::string_view name);
  void delete_stale();
  [[noreturn]] void store_failed(std::string_view kind, std::string_view name, std::uint64_t s,
                                 const rendezvous::StoreError& error) const;
};

std::uint64_t Collectives::Impl::exchange(std::string_view kind, std::string_view name, std::string_view payload,
                                          std::optional<milliseconds> timeout_arg) {
  check_name(name);
  const std::uint64_t s = ++seq;
  if (context.world_size == 1) return s;
  const milliseconds timeout = timeout_arg.value_or(options.timeout);
  const auto deadline = Clock::now() + timeout;
  const int world = context.world_size;
  const std::string header = worker::collective_header(kind, name);
  const std::string my_key = arrival_key(s, context.rank);
  try {
    // Arrival and the progress record in one round trip.
    std::vector<std::string> keys{my_key};
    std::vector<std::string> values{worker::format_arrival(header, payload)};
    if (options.record_progress) {
      keys.push_back(collective_record_key(context.rank));
      values.push_back(format_collective_record({std::string(kind), s, true, std::string(name)}));
    }
    store->multi_set(keys, values);
    const std::int64_t arrived = store->add(key(s, "count"), 1);
    if (arrived > world)
      throw WorkerError(header + " (#" + std::to_string(s) + "): " + std::to_string(arrived) +
                        " arrivals for WORLD_SIZE=" + std::to_string(world) +
                        ": two processes use the same RANK, or the store holds keys of an earlier run");
    std::vector<std::string> written{my_key};
    if (arrived == world) {
      std::vector<std::string> all_keys;
      for (int r = 0; r < world; ++r) all_keys.push_back(arrival_key(s, r));
      std::vector<std::string> headers;
      for (const std::string& value : store->multi_get(all_keys))
        headers.push_back(worker::parse_arrival(value).header);
      auto mismatch = worker::describe_mismatch(headers);
      store->set(key(s, "done"), mismatch ? std::string(k_done_mismatch) + *mismatch : std::string(k_done_ok));
      written.push_back(key(s, "count"));
      written.push_back(key(s, "done"));
    } else {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (!store->wait({key(s, "done")}, std::max(left, milliseconds(0)))) {
        std::vector<int> missing = missing_ranks(s);
        throw CollectiveTimeout(worker::timeout_message(kind, name, s, timeout, missing, world), missing);
      }
    }
    const std::string done = store->get(key(s, "done"));
    if (done != k_done_ok) {
      std::string detail = done.rfind(k_done_mismatch, 0) == 0 ? done.substr(k_done_mismatch.size()) : done;
      throw CollectiveMismatch("collective #" + std::to_string(s) + " does not match across ranks: " + detail +
                               " (every rank must call the same collectives in the same order)");
    }
    delete_stale();
    stale_keys = std::move(written);
  } catch (const rendezvous::StoreTimeout& error) {
    std::vector<int> missing;
    try {
      missing = missing_ranks(s);
    } catch (const rendezvous::StoreError&) {
    }
    throw CollectiveTimeout(worker::timeout_message(kind, name, s, timeout, missing, world) + " (" + error.what() + ")",
                            missing);
  } catch (const rendezvous::StoreError& error) {
    store_failed(kind, name, s, error);
  }
  return s;
}

std::vector<int> Collectives::Impl::missing_ranks(std::uint64_t s) {
  std::vector<int> missing;
  for (int r = 0; r < context.world_size; ++r)
    if (!store->check({arrival_key(s, r)})) missing.push_back(r);
  return missing;
}

void Collectives::Impl::record(std::string_view kind, std::uint64_t s, bool entered, std::string_view name) {
  if (!options.record_progress || context.world_size == 1) return;
  store->set(collective_record_key(context.rank),
             format_collective_record({std::string(kind), s, entered, std::string(name)}));
}

void Collectives::Impl::delete_stale() {
  for (const std::string& stale : stale_keys) store->delete_key(stale);
  stale_keys.clear();
}

void Collectives::Impl::store_failed(std::string_view kind, std::string_view name, std::uint64_t s,
                                     const rendezvous::StoreError& error) const {
  throw WorkerError(worker::collective_header(kind, name) + " (#" + std::to_string(s) + ") failed: store at " +
                    context.master_addr + ":" + std::to_string(context.master_port) + ": " + error.what());
}

Collectives::Collectives(const WorkerContext& context, CollectiveOptions options) : m_impl(std::make_unique<Impl>()) {
  m_impl->context = context;
  m_impl->options = std::move(options);
  if (context.world_size == 1) return;
  if (!context.has_store())
    throw WorkerError("WORLD_SIZE=" + std::to_string(context.world_size) +
                      " needs the store, but MASTER_ADDR/MASTER_PORT are not set");
  rendezvous::ClientOptions client_options;
  client_options.connect_timeout = m_impl->options.connect_timeout;
  client_options.timeout = m_impl->options.timeout;
  try {
    m_impl->store.emplace(context.master_addr, context.master_port, client_options);
  } catch (const rendezvous::StoreError& error) {
    throw WorkerError("cannot reach the store at MASTER_ADDR=" + context.master_addr +
                      " MASTER_PORT=" + std::to_string(context.master_port) + ": " + error.what());
  }
}

Collectives::Collectives(const WorkerContext& context, rendezvous::StoreClient store, CollectiveOptions options)
    : m_impl(std::make_unique<Impl>()) {
  m_impl->context = context;
  m_impl->options = std::move(options);
  m_impl->store.emplace(std::move(store));
}

Collectives::~Collectives() = default;
Collectives::Collectives(Collectives&&) noexcept = default;
Collectives& Collectives::operator=(Collectives&&) noexcept = default;

void Collectives::barrier(std::string_view name, std::optional<milliseconds> timeout) {
  const std::uint64_t s = m_impl->exchange("barrier", name, {}, timeout);
  try {
    m_impl->record("barrier", s, false, name);
  } catch (const rendezvous::StoreError& error) {
    m_impl->store_failed("barrier", name, s, error);
  }
}

std::vector<std::string> Collectives::all_gather(std::string_view name, std::string_view payload,
                                                 std::optional<milliseconds> timeout) {
  const std::uint64_t s = m_impl->exchange("all_gather", name, payload, timeout);
  if (m_impl->context.world_size == 1) return {std::string(payload)};
  try {
    std::vector<std::string> keys;
    for (int r = 0; r < m_impl->context.world_size; ++r) keys.push_back(m_impl->arrival_key(s, r));
    std::vector<std::string> out;
    for (const std::string& value : m_impl->store->multi_get(keys)) out.push_back(worker::parse_arrival(value).payload);
    m_impl->record("all_gather", s, false, name);
    return out;
  } catch (const rendezvous::StoreError& error) {
    m_impl->store_failed("all_gather", name, s, error);
  }
}

std::string Collectives::broadcast(std::string_view name, std::string_view payload, int root,
                                   std::optional<milliseconds> timeout) {
  if (root < 0 || root >= m_impl->context.world_size)
    throw std::invalid_argument("broadcast '" + std::string(name) + "': root=" + std::to_string(root) +
                                " is not a rank of WORLD_SIZE=" + std::to_string(m_impl->context.world_size));
  // Only the root's payload travels; the others send an empty one. The root is part of the
  // header so that ranks disagreeing on the root get a mismatch, not someone else's data.
  const bool is_root = root == m_impl->context.rank;
  const std::string kind = "broadcast";
  const std::string full_name = std::string(name) + " from rank " + std::to_string(root);
  const std::uint64_t s = m_impl->exchange(kind, full_name, is_root ? payload : std::string_view(), timeout);
  if (m_impl->context.world_size == 1 || is_root) {
    if (m_impl->context.world_size > 1) {
      try {
        m_impl->record(kind, s, false, full_name);
      } catch (const rendezvous::StoreError& error) {
        m_impl->store_failed(kind, name, s, error);
      }
    }
    return std::string(payload);
  }
  try {
    std::string value = worker::parse_arrival(m_impl->store->get(m_impl->arrival_key(s, root))).payload;
    m_impl->record(kind, s, false, full_name);
    return value;
  } catch (const rendezvous::StoreError& error) {
    m_impl->store_failed(kind, name, s, error);
  }
}

std::uint64_t Collectives::sequence() const { return m_impl->seq; }
const WorkerContext& Collectives::context() const { return m_impl->context; }
rendezvous::StoreClient* Collectives::store() { return m_impl->store ? &*m_impl->store : nullptr; }

}  // namespace rankrun
