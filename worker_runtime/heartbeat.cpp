#include "rankrun/heartbeat.hpp"
#include "stack_dump_handler.hpp"

#include <cstdlib>

#include <algorithm>
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
  std::atomic<bool> called{false};  // step() or beat() since the last write
  std::atomic<std::uint64_t> calls{0};
  // The data count, packed for cheap updates: epoch, read, planned (written together under
  // `mutex` only by batches(); read by the thread).
  std::atomic<std::uint64_t> batch_epoch{0}, batch_read{0}, batch_planned{0};
  std::atomic<bool> have_batches{false};
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool urgent = false;  // a section changed: write now
  std::optional<SectionValue> section;
  std::string last_error;
  std::thread thread;

  void run();
  HeartbeatValue value_now();
  void set_error(std::string message) {
    std::lock_guard<std::mutex> lock(mutex);
    last_error = std::move(message);
  }
};

HeartbeatValue Heartbeat::Impl::value_now() {
  // Called with `mutex` held.
  HeartbeatValue value{unix_ms(), step.load(std::memory_order_relaxed), std::nullopt, std::nullopt, section};
  if (options.on_calls_only) value.calls = calls.load(std::memory_order_relaxed);
  if (have_batches.load(std::memory_order_acquire)) {
    value.batches = BatchCount{batch_epoch.load(std::memory_order_relaxed), batch_read.load(std::memory_order_relaxed),
                               batch_planned.load(std::memory_order_relaxed)};
  }
  return value;
}

void Heartbeat::Impl::run() {
  // The client lives on this thread only: StoreClient is not thread-safe, and the trainer's
  // own connection must not be shared.
  std::optional<rendezvous::StoreClient> store;
  const std::string key = heartbeat_key(context.rank);
  std::unique_lock<std::mutex> lock(mutex);
  // The first beat is sent even when the session is already ending: a rank that ran, however
  // briefly, leaves its heartbeat in the store (its peers and rankrun read it).
  // On calls only, a beat is written after the trainer called (and once more at the end when it
  // called since the last one: the final step and batch count stay in the store).
  for (bool first = true;; first = false) {
    const bool last = stopping;
    const bool due = options.on_calls_only ? called.exchange(false) || urgent : first || !last || urgent;
    urgent = false;
    const HeartbeatValue value = value_now();
    lock.unlock();
    if (due) try {
        if (!store) {
          rendezvous::ClientOptions client_options;
          // Bounded by the interval so that the destructor never waits for a long connect.
          client_options.connect_timeout = options.interval;
          client_options.timeout = options.interval;
          store.emplace(context.master_addr, context.master_port, client_options);
        }
        store->set(key, format_heartbeat(value));
        beats.fetch_add(1, std::memory_order_relaxed);
      } catch (const std::exception& error) {
        // Reconnect next time: the connection may be broken half-way through a request.
        store.reset();
        set_error(error.what());
      }
    lock.lock();
    if (last) break;
    wake.wait_for(lock, options.interval, [this] { return stopping || urgent; });
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

void Heartbeat::step(std::int64_t n) {
  m_impl->step.store(n, std::memory_order_relaxed);
  m_impl->calls.fetch_add(1, std::memory_order_relaxed);
  m_impl->called.store(true, std::memory_order_relaxed);
}

void Heartbeat::beat() {
  m_impl->calls.fetch_add(1, std::memory_order_relaxed);
  m_impl->called.store(true, std::memory_order_relaxed);
}

void Heartbeat::enter_section(std::string name, std::chrono::milliseconds timeout) {
  if (name.size() > k_max_section_name) name.resize(k_max_section_name);
  {
    std::lock_guard<std::mutex> lock(m_impl->mutex);
    m_impl->section = SectionValue{unix_ms(), std::max<std::int64_t>(0, timeout.count()), std::move(name)};
    m_impl->urgent = true;
  }
  m_impl->wake.notify_all();
}

void Heartbeat::leave_section() {
  {
    std::lock_guard<std::mutex> lock(m_impl->mutex);
    if (!m_impl->section) return;
    m_impl->section.reset();
    m_impl->urgent = true;
  }
  m_impl->wake.notify_all();
}

void Heartbeat::batches(std::uint64_t epoch, std::uint64_t read, std::uint64_t planned) {
  m_impl->batch_epoch.store(epoch, std::memory_order_relaxed);
  m_impl->batch_read.store(read, std::memory_order_relaxed);
  m_impl->batch_planned.store(planned, std::memory_order_relaxed);
  m_impl->have_batches.store(true, std::memory_order_release);
  m_impl->calls.fetch_add(1, std::memory_order_relaxed);  // reading data is moving
  m_impl->called.store(true, std::memory_order_relaxed);
}
std::int64_t Heartbeat::current_step() const { return m_impl->step.load(std::memory_order_relaxed); }
std::uint64_t Heartbeat::beats() const { return m_impl->beats.load(std::memory_order_relaxed); }
bool Heartbeat::running() const { return m_impl->thread.joinable(); }

std::string Heartbeat::last_error() const {
  std::lock_guard<std::mutex> lock(m_impl->mutex);
  return m_impl->last_error;
}

}  // namespace rankrun
