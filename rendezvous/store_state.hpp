#pragma once
// Pure store semantics: the key/value map, queues and waiters, with torch's exact behaviour
// (torchrun.md §5.4, §5.7). No I/O: apply() says what to send and to whom, the server sends it.
//
// Choices where torch's two servers disagree (the libuv one is the default from 2.4):
// - GET / MULTI_GET of a missing key reply an empty value (libuv), rather than dropping the
//   connection (legacy). torch clients always WAIT before GET, so they never see the difference.
// - COMPARE_SET wakes waiters when it stores a value (libuv; legacy never wakes). It does not
//   wake when nothing was stored (libuv does, sending STOP_WAITING for a key that is absent).
// - CHECK and WAIT treat a non-empty queue as present (libuv).
// - Each WAIT is its own waiter with its own countdown, so a client that pipelines two WAITs on
//   one connection gets two STOP_WAITING bytes (torch would overwrite the first countdown). The
//   same holds for a BARRIER pipelined after a WAIT (torch's connection would never hear back
//   from the barrier).
// - LIST_KEYS lists the keys in byte order (torch: its hash map's order), and is bounded
//   (Limits::max_keys keys, Limits::max_reply_bytes bytes): past that the requester is closed.
//
// BARRIER as both torch servers do it: the counter at the key (decimal text, like ADD's) goes up
// by one; once it reaches the world size the requester gets STOP_WAITING and every waiter on
// the key is woken, else the requester waits on the key like a WAIT of it. An arrival below the
// world size wakes nobody, though it stores the counter. The counter stays: a key reused for a
// second barrier of the same size passes at once; an arrival that is cancelled (CANCEL_WAIT) or
// whose connection closes is still counted.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rendezvous/messages.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {

using ConnectionId = std::uint64_t;

/// What one request causes. Reused across requests: call clear() (apply() appends).
struct Effects {
  /// Bytes for the requesting connection, in request order.
  std::string reply;
  /// Connections that get one STOP_WAITING byte each, in wake-up order, *after* `reply` (torch
  /// answers ADD before waking its waiters). May include the requester.
  std::vector<ConnectionId> woken;
  /// The request cannot be served (ADD on a non-numeric value...): close the requester.
  bool close = false;
  std::string error;

  void clear() {
    reply.clear();
    woken.clear();
    close = false;
    error.clear();
  }
};

/// The bytes every key space of one server may hold together (keys, values, queued items, and
/// k_entry_overhead per entry for the maps' own memory). Shared by the key spaces that count
/// against it; it must outlive them.
struct MemoryBudget {
  std::uint64_t limit = 0;  // 0: unbounded
  std::uint64_t used = 0;
};

/// What one stored entry costs beyond its key and value (a hash node, a std::string each).
inline constexpr std::uint64_t k_entry_overhead = 96;

class StoreState {
 public:
  /// `budget`: the server's quota this key space counts against; null: none.
  explicit StoreState(Limits limits = {}, MemoryBudget* budget = nullptr);
  ~StoreState();
  StoreState(const StoreState&) = delete;
  StoreState& operator=(const StoreState&) = delete;

  /// Applies `request` from `connection`, appending what it causes to `out`.
  void apply(ConnectionId connection, const Request& request, Effects& out);

  /// The connection is gone: its waits are dropped, nothing is woken.
  void disconnect(ConnectionId connection);

  /// A fresh key space: keys, queues and waits all dropped.
  void clear();

  std::size_t num_keys() const { return m_values.size(); }
  /// The bytes this key space holds, as its budget counts them.
  std::uint64_t bytes() const { return m_bytes; }
  /// The stored value of `key`, if any (a view valid until the next apply()/clear()).
  std::optional<std::string_view> value(std::string_view key) const;
  /// WAITs registered and not yet answered or cancelled.
  std::size_t pending_waits() const { return m_waiters.size(); }

 private:
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  template <typename T>
  using StringMap = std::unordered_map<std::string, T, StringHash, std::equal_to<>>;

  using WaiterId = std::uint64_t;
  struct Waiter {
    ConnectionId connection;
    std::size_t remaining;
    /// Keys this waiter is registered on, for removal on cancel/disconnect.
    std::vector<std::string> keys;
  };

  bool present(std::string_view key) const;
  // Registers one waiter of `connection` on `keys` (none present), counting down once per entry.
  void add_waiter(ConnectionId connection, const std::vector<std::string_view>& keys);
  void list_keys(Effects& out) const;
  // ADD's and BARRIER's arithmetic: the number stored at `key` (0 when absent) plus `delta`,
  // wrapping on overflow; nullopt, with the connection closed, when the value is no number.
  std::optional<std::int64_t> counter_plus(const std::string& key, std::int64_t delta, std::string_view op,
                                           Effects& out) const;
  void store(const std::string& key, std::string value, Effects& out);
  // The most `request` could add to the bytes held; refuses it (closing the requester) when
  // that would pass the budget. true: go on.
  bool fits(const Request& request, Effects& out) const;
  std::uint64_t entry_bytes(std::string_view key) const;
  void account(std::int64_t delta);
  void wake_all(std::string_view key, Effects& out);
  void wake_one(std::string_view key, Effects& out);
  // Counts one registration of `id` down; true when it was the last and the waiter fired.
  bool count_down(WaiterId id, Effects& out);
  void cancel_waits(ConnectionId connection);
  void forget_waiter(WaiterId id);

  Limits m_limits;
  MemoryBudget* m_budget = nullptr;
  std::uint64_t m_bytes = 0;
  StringMap<std::string> m_values;
  StringMap<std::deque<std::string>> m_queues;
  /// key -> waiters registered on it, in arrival order (one entry per occurrence in a WAIT).
  StringMap<std::vector<WaiterId>> m_waiting;
  std::unordered_map<WaiterId, Waiter> m_waiters;
  std::unordered_map<ConnectionId, std::vector<WaiterId>> m_waiters_of;
  WaiterId m_next_waiter = 1;
};

/// torch parses ADD's stored value with std::stoll: leading blanks, an optional sign, at least
/// one digit, trailing bytes ignored, overflow rejected. nullopt where stoll would throw.
std::optional<std::int64_t> parse_stored_integer(std::string_view text);

}  // namespace rankrun::rendezvous
