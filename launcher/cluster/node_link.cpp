// NodeLink: its life (start, stop, rejoin), what both its threads share (connecting, posting to
// the Job's loop, the clients stop() interrupts). The watcher thread is in node_link_watcher.cpp,
// the commands' in node_link_commands.cpp.
#include "launcher/cluster/node_link.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <boost/asio/post.hpp>
#include <random>
#include <variant>
#include <utility>
#include <spdlog/spdlog.h>

namespace rankrun::launcher::cluster {
namespace {

// At exit (revoking the node's lease, where the store has them): one short try, the lease lapses
// anyway.
constexpr std::chrono::milliseconds k_revoke_try{200};

std::string make_instance() {
  std::random_device rd;
  return std::to_string(::getpid()) + "-" + std::to_string(rd()) + std::to_string(rd());
}

}  // namespace

NodeLink::NodeLink(boost::asio::io_context& io, LinkSettings settings, LinkHandlers handlers)
    : m_io(io),
      m_settings(std::move(settings)),
      m_handlers(std::move(handlers)),
      m_instance(make_instance()),
      m_alive(std::make_shared<bool>(true)),
      m_cancel(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      m_node_rank(m_settings.elastic ? -1 : m_settings.node_rank),
      m_nnodes(m_settings.nnodes) {}

std::pair<int, int> NodeLink::place() const {
  const std::lock_guard lock(m_mutex);
  return {m_node_rank, m_nnodes};
}

void NodeLink::rejoin() {
  {
    const std::lock_guard lock(m_mutex);
    m_rejoin = true;
  }
  m_wake.notify_all();
}

NodeLink::~NodeLink() { stop(); }

void NodeLink::start() {
  m_watcher = std::thread([this] { watcher_main(); });
  m_commander = std::thread([this] { commander_main(); });
}

void NodeLink::start_aborted(const std::string& message, std::function<void()> done) {
  abort_rendezvous(message, std::move(done));
  m_commander = std::thread([this] { commander_main(); });
}

void NodeLink::stop() {
  {
    const std::lock_guard lock(m_mutex);
    if (m_stopping && !m_watcher.joinable() && !m_commander.joinable()) return;
    m_stopping = true;
    // A connect in progress (a client not yet held) gives up too.
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(m_cancel.get(), &one, sizeof one);
    if (m_watcher_client) m_watcher_client->interrupt();
    if (m_commander_client) m_commander_client->interrupt();
  }
  *m_alive = false;
  m_wake.notify_all();
  const auto began = Clock::now();
  if (m_watcher.joinable()) m_watcher.join();
  if (m_commander.joinable()) m_commander.join();
  spdlog::debug("link to {} closed in {} ms", where(),
                std::chrono::duration_cast<milliseconds>(Clock::now() - began).count());
  // Where the store has leases: the node's keys (its join, its lease key) go now rather than
  // when the lease lapses; the coordinator sees a waiting node leave, or a member that sent its
  // result go.
  if (m_lease != 0) {
    const auto lease = std::exchange(m_lease, 0);
    try {
      connect(std::min(k_revoke_try, m_settings.node_timeout), false)->revoke(lease);
    } catch (const rendezvous::StoreError&) {
    }
  }
}

bool NodeLink::stopping() const {
  const std::lock_guard lock(m_mutex);
  return m_stopping;
}

void NodeLink::set_interruptible(Side side, LinkStore* client) {
  const std::lock_guard lock(m_mutex);
  (side == Side::Watcher ? m_watcher_client : m_commander_client) = client;
  if (client && m_stopping) client->interrupt();
}

LinkStore& NodeLink::reconnect(Side side, std::unique_ptr<LinkStore>& client, Clock::time_point give_up) {
  if (!client) {
    const auto left = std::chrono::duration_cast<milliseconds>(give_up - Clock::now());
    client = connect(reconnect_try(m_settings.node_timeout, left));
    set_interruptible(side, client.get());
  }
  return *client;
}

void NodeLink::drop(Side side, std::unique_ptr<LinkStore>& client) {
  set_interruptible(side, nullptr);
  client.reset();
}

void NodeLink::post(std::function<void()> fn) {
  boost::asio::post(m_io, [alive = m_alive, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

void NodeLink::fail(RendezvousFailure failure) {
  post([this, failure = std::move(failure)] { m_handlers.rendezvous_failed(failure.end, failure.message); });
}

std::unique_ptr<LinkStore> NodeLink::connect(milliseconds connect_timeout, bool cancellable) {
  LinkConnect how;
  how.connect_timeout = connect_timeout;
  // A reply that does not come within a third of the node timeout, its request unacknowledged,
  // means the link is gone; an endpoint that has the request is slow, and is waited for up to the
  // node timeout, saying so every third of it.
  how.reply_timeout = cluster::reply_timeout(m_settings.node_timeout);
  how.patience = m_settings.node_timeout;
  how.slow_reply = [where = where(), patience = m_settings.node_timeout](milliseconds waited) {
    spdlog::warn("waiting for {}: {:.0f} s without a reply; it is connected; giving up after {:.0f} s (--node-timeout)",
                 where, std::chrono::duration<double>(waited).count(), std::chrono::duration<double>(patience).count());
  };
  how.cancel_fd = cancellable ? m_cancel.get() : -1;
  return m_settings.channel.connect(how);
}

std::string NodeLink::reason(const rendezvous::StoreError& e) {
  // The messages that use this name the endpoint themselves.
  return e.detail();
}

bool NodeLink::denied(const rendezvous::StoreError& e) const {
  return m_settings.channel.denied && m_settings.channel.denied(e);
}

std::int64_t NodeLink::node_lease(LinkStore& client) {
  if (!client.has_leases()) return 0;
  const auto lease = renew_or_grant(client, m_lease, m_settings.node_timeout);
  const std::lock_guard lock(m_mutex);
  m_lease = lease;
  return lease;
}

}  // namespace rankrun::launcher::cluster
