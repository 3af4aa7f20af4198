#include "rankrun/heartbeat.hpp"
#include "stack_dump_handler.hpp"

#include <cstdlib>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "rankrun/store_keys.hpp"
#include "rendezvous/store_client.hpp"

namespace rankrun {
namespace {

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Heartbeat::Impl {
  WorkerContext context;
  HeartbeatOptions options;
  std::atomic<std::int64_t> step{-1};
  std::atomic<std::uint64_t> beats{0};
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::string last_error;
  std::thread thread;

  void run();
  void set_error(std::string message) {
    std::lock_guard<std::mutex> lock(mutex);
    last_error = std::move(message);
  }
};

void Heartbeat::Impl::run() {
  // The client lives on this thread only: StoreClient is not thread-safe, and the trainer's
  // own connection must not be shared.
  std::optional<rendezvous::StoreClient> store;
  const std::string key = heartbeat_key(context.rank);
  std::unique_lock<std::mutex> lock(mutex);
  // The first beat is sent even when the session is already ending: a rank that ran, however
  // briefly, leaves its heartbeat in the store (its peers and rankrun read it).
  for (bool first = true; first || !stopping; first = false) {
    lock.unlock();
    try {
      if (!store) {
        rendezvous::ClientOptions client_options;
        // Bounded by the interval so that the destructor never waits for a long connect.
        client_options.connect_timeout = options.interval;
        client_options.timeout = options.interval;
        store.emplace(context.master_addr, context.master_port, client_options);
      }
      store->set(key, format_heartbeat({unix_ms(), step.load(std::memory_order_relaxed)}));
      beats.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& error) {
      // Reconnect next time: the connection may be broken half-way through a request.
      store.reset();
      set_error(error.what());
    }
    lock.lock();
    wake.wait_for(lock, options.interval, [this] { return stopping; });
  }
}

Heartbeat::Heartbeat(const WorkerContext& context, HeartbeatOptions options) : m_impl(std::make_unique<Impl>()) {
  m_impl->context = context;
  // The launcher says how often it needs a beat to honour its --heartbeat-timeout; an interval
  // the trainer chose itself wins.
  if (options.interval == HeartbeatOptions{}.interval && context.heartbeat_interval_ms) {
    options.interval = std::chrono::milliseconds(*context.heartbeat_interval_ms);
  }
  m_impl->options = options;
  if (context.has_store())
    m_impl->thread = std::thread([impl = m_impl.get()] {
      worker::block_stack_dump_signal();  // stack requests are for the trainer's thread
      impl->run();
    });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(m_impl->mutex);
    m_impl->stopping = true;
  }
  m_impl->wake.notify_all();
  if (m_impl->thread.joinable()) m_impl->thread.join();
}

void Heartbeat::step(std::int64_t n) { m_impl->step.store(n, std::memory_order_relaxed); }
std::int64_t Heartbeat::current_step() const { return m_impl->step.load(std::memory_order_relaxed); }
std::uint64_t Heartbeat::beats() const { return m_impl->beats.load(std::memory_order_relaxed); }
bool Heartbeat::running() const { return m_impl->thread.joinable(); }

std::string Heartbeat::last_error() const {
  std::lock_guard<std::mutex> lock(m_impl->mutex);
  return m_impl->last_error;
}

}  // namespace rankrun
