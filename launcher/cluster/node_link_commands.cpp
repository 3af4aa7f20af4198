// NodeLink's commands thread: what the Job asks of the other nodes (a stop notice, progress, the
// restart barrier, the final result), queued and delivered in order, each retried until it is.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <variant>

#include "launcher/cluster/node_link.hpp"

namespace rankrun::launcher::cluster {

void NodeLink::enqueue(std::function<void(LinkStore&)> command, bool before_rendezvous) {
  {
    const std::lock_guard lock(m_mutex);
    m_commands.push_back(Command{std::move(command), before_rendezvous});
  }
  m_wake.notify_all();
}

void NodeLink::commander_main() {
  std::unique_ptr<LinkStore> client;
  for (;;) {
    std::function<void(LinkStore&)> command;
    {
      std::unique_lock lock(m_mutex);
      m_wake.wait(lock, [this] {
        return m_stopping || (!m_commands.empty() && (m_rendezvous_done || m_commands.front().before_rendezvous));
      });
      if (m_stopping) break;
      command = std::move(m_commands.front().run);
      m_commands.pop_front();
    }
    deliver(command, client);
  }
  set_interruptible(Side::Commands, nullptr);
}

// A command that matters (a stop notice, "done", "ready", a result) is not dropped on a short
// fault: it is tried again on a fresh connection, a pause apart, until --node-timeout has passed
// since its first try. By then the watcher, which cannot reach the same endpoint either, has
// called it lost. Each connect lasts no longer than a reply may: stop() cannot interrupt one
// in progress.
bool NodeLink::run_queued(LinkStore& client) {
  for (;;) {
    std::function<void(LinkStore&)> command;
    {
      const std::lock_guard lock(m_mutex);
      if (m_stopping) return false;
      if (m_commands.empty()) return true;
      command = m_commands.front().run;
    }
    command(client);  // a failure leaves it queued: the barrier is tried again, then it
    const std::lock_guard lock(m_mutex);
    if (!m_commands.empty()) m_commands.pop_front();
  }
}

void NodeLink::deliver(const std::function<void(LinkStore&)>& command, std::unique_ptr<LinkStore>& client) {
  // --node-timeout counts from the first failure: a command may wait long (the barrier) and
  // still deserves its retries.
  std::optional<Clock::time_point> give_up;
  milliseconds pause = k_retry_first_pause;
  for (int tries = 1;; ++tries) {
    try {
      command(reconnect(Side::Commands, client, give_up.value_or(Clock::now() + m_settings.node_timeout)));
      if (tries > 2) spdlog::info("reached {} again after {} tries", where(), tries);
      return;
    } catch (const rendezvous::StoreError& e) {
      drop(Side::Commands, client);
      if (stopping()) return;
      if (!give_up) give_up = Clock::now() + m_settings.node_timeout;
      if (Clock::now() + pause >= *give_up) {
        spdlog::error(
            "could not reach {} for {} s (--node-timeout), {} tries: {}; a message of this node's was not "
            "delivered",
            where(), m_settings.node_timeout.count() / 1000.0, tries, reason(e));
        return;
      }
      if (tries == 2) spdlog::warn("could not reach {}: {}; trying again until --node-timeout", where(), reason(e));
    }
    std::unique_lock lock(m_mutex);
    if (m_wake.wait_for(lock, pause, [this] { return m_stopping; })) return;
    pause = std::min(pause * 2, k_retry_max_pause);
  }
}

void NodeLink::publish_stop(int attempt, StopNotice notice) {
  enqueue([attempt, notice = std::move(notice)](LinkStore& c) { cluster::publish_stop(c, attempt, notice); });
}

void NodeLink::share_progress(int attempt, std::string progress, int nodes,
                              std::function<void(std::vector<NodeProgress>)> every_node) {
  {
    const std::lock_guard lock(m_mutex);
    const bool waiting = m_progress.has_value();
    m_progress = SharedProgress{attempt, std::move(progress), nodes, std::move(every_node)};
    if (waiting) return;
  }
  enqueue([this](LinkStore& c) {
    std::optional<SharedProgress> p;
    {
      const std::lock_guard lock(m_mutex);
      p = std::exchange(m_progress, std::nullopt);
    }
    if (!p) return;  // sent already (a command tried again)
    c.set(progress_key(p->attempt, place().first), p->text);
    if (!p->every_node) return;
    // The nodes that have said anything in this attempt (a node that has not looked yet has no key).
    std::vector<std::string> keys;
    for (int node = 0; node < p->nodes; ++node) keys.push_back(progress_key(p->attempt, node));
    std::vector<std::string> present;
    if (c.check(keys)) {
      present = keys;
    } else {
      for (const auto& key : keys) {
        if (c.check({key})) present.push_back(key);
      }
    }
    std::vector<NodeProgress> heard;
    if (!present.empty()) {
      for (const auto& text : c.multi_get(present)) {
        auto decoded = decode_progress(text);
        if (decoded && decoded->attempt == p->attempt) heard.push_back(std::move(*decoded));
      }
    }
    post([every_node = std::move(p->every_node), heard = std::move(heard)]() mutable { every_node(std::move(heard)); });
  });
}

void NodeLink::attempt_done(int attempt) {
  enqueue([this, attempt](LinkStore& c) { cluster::attempt_done(c, attempt, place().first); });
}

void NodeLink::ready_for(int attempt, std::function<void(std::string)> go) {
  enqueue([this, attempt, go = std::move(go)](LinkStore& c) {
    const auto& s = m_settings;
    const auto [node_rank, nnodes] = place();
    const bool coordinator = s.opens_attempts && s.opens_attempts(node_rank);
    // The commands that come meanwhile (the notice of a node lost at the barrier, this node's
    // stop on a signal) are sent between the barrier's slices; once the attempt's stop notice
    // is out, the barrier ends and the notice decides.
    auto ready = cluster::ready_for(c, attempt, node_rank, nnodes, coordinator, s.rdzv_timeout,
                                    [this](LinkStore& on) { return run_queued(on); });
    if (auto* opened = std::get_if<std::string>(&ready)) {
      post([go, opened = std::move(*opened)] { go(opened); });
    } else if (auto* failure = std::get_if<RendezvousFailure>(&ready)) {
      fail(std::move(*failure));
    } else {
      spdlog::debug("the barrier before attempt {} ended: the attempt was stopped", attempt);
    }
  });
}

void NodeLink::open_attempt(int attempt, std::string value) {
  enqueue([attempt, value = std::move(value)](LinkStore& c) { cluster::open_attempt(c, attempt, value); });
}

// `done` is posted however the command ends (run, failed, or dropped at stop()): the node must
// be able to exit without the store host. It hears whether the command ran.
void NodeLink::post_when_done(std::function<void(LinkStore&)>& command, std::function<void(bool delivered)> done) {
  struct Guard {
    NodeLink* link = nullptr;
    std::function<void(bool)> done;
    bool delivered = false;
    ~Guard() {
      if (done) link->post([done = std::move(done), delivered = delivered] { done(delivered); });
    }
  };
  auto guard = std::make_shared<Guard>();
  guard->link = this;
  guard->done = std::move(done);
  command = [guard, run = std::move(command)](LinkStore& c) {
    run(c);
    guard->delivered = true;
  };
}

void NodeLink::publish_final(const NodeFinal& final_result, std::function<void(bool delivered)> done) {
  std::function<void(LinkStore&)> command = [this, final_result](LinkStore& c) {
    cluster::publish_final(c, place().first, final_result);
  };
  post_when_done(command, std::move(done));
  enqueue(std::move(command));
}

void NodeLink::abort_rendezvous(const std::string& message, std::function<void()> done) {
  std::function<void(LinkStore&)> command = [message](LinkStore& c) { cluster::abort_rendezvous(c, message); };
  post_when_done(command, [done = std::move(done)](bool) { done(); });
  enqueue(std::move(command), true);
}

}  // namespace rankrun::launcher::cluster
