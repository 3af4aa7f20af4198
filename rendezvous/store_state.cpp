#include "rendezvous/store_state.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <limits>

namespace rankrun::rendezvous {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

std::string quoted_prefix(std::string_view s) {
  constexpr std::size_t k_max = 64;
  return "'" + printable(s, k_max) + "'";
}

}  // namespace

std::optional<std::int64_t> parse_stored_integer(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && is_blank(text[i])) ++i;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  // Accumulate as a negative number so that INT64_MIN parses, as it does with stoll.
  std::int64_t value = 0;
  std::size_t digits = 0;
  constexpr std::int64_t k_min = std::numeric_limits<std::int64_t>::min();
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    const int d = text[i] - '0';
    if (value < (k_min + d) / 10) return std::nullopt;
    value = value * 10 - d;
  }
  if (digits == 0) return std::nullopt;
  if (!negative) {
    if (value == k_min) return std::nullopt;
    value = -value;
  }
  return value;
}

StoreState::StoreState(Limits limits, MemoryBudget* budget) : m_limits(limits), m_budget(budget) {}

StoreState::~StoreState() { account(-static_cast<std::int64_t>(m_bytes)); }

void StoreState::account(std::int64_t delta) {
  m_bytes = static_cast<std::uint64_t>(static_cast<std::int64_t>(m_bytes) + delta);
  if (m_budget) m_budget->used = static_cast<std::uint64_t>(static_cast<std::int64_t>(m_budget->used) + delta);
}

std::uint64_t StoreState::entry_bytes(std::string_view key) const {
  const auto it = m_values.find(key);
  return it == m_values.end() ? 0 : key.size() + it->second.size() + k_entry_overhead;
}

bool StoreState::fits(const Request& request, Effects& out) const {
  if (!m_budget || m_budget->limit == 0) return true;
  const auto& keys = request.keys;
  const auto& values = request.values;
  std::uint64_t grows = 0;
  const auto entry = [&](const std::string& key, std::size_t value_size) {
    const std::uint64_t now = key.size() + value_size + k_entry_overhead;
    const std::uint64_t before = entry_bytes(key);
    if (now > before) grows += now - before;
  };
  switch (request.op) {
    case Op::Set: entry(keys[0], values[0].size()); break;
    case Op::CompareSet: entry(keys[0], values[1].size()); break;
    case Op::MultiSet:
      for (std::size_t i = 0; i < keys.size(); ++i) entry(keys[i], values[i].size());
      break;
    case Op::Append:
      grows = values[0].size() + (m_values.count(keys[0]) ? 0 : keys[0].size() + k_entry_overhead);
      break;
    case Op::QueuePush: grows = keys[0].size() + values[0].size() + k_entry_overhead; break;
    case Op::Add:
    case Op::Barrier: entry(keys[0], 20); break;  // a decimal int64
    default: return true;
  }
  if (grows == 0 || m_budget->used + grows <= m_budget->limit) return true;
  out.close = true;
  out.error = "the store's memory is full: it holds " + std::to_string(m_budget->used) + " of its " +
              std::to_string(m_budget->limit) + " bytes (--store-memory) and this " + std::string(op_name(request.op)) +
              " would add " + std::to_string(grows);
  return false;
}

std::optional<std::string_view> StoreState::value(std::string_view key) const {
  auto it = m_values.find(key);
  if (it == m_values.end()) return std::nullopt;
  return std::string_view(it->second);
}

bool StoreState::present(std::string_view key) const {
  if (m_values.find(key) != m_values.end()) return true;
  auto q = m_queues.find(key);
  return q != m_queues.end() && !q->second.empty();
}

void StoreState::store(const std::string& key, std::string value, Effects& out) {
  auto [it, inserted] = m_values.try_emplace(key);
  const std::uint64_t before = inserted ? 0 : key.size() + it->second.size() + k_entry_overhead;
  account(static_cast<std::int64_t>(key.size() + value.size() + k_entry_overhead) - static_cast<std::int64_t>(before));
  it->second = std::move(value);
  wake_all(key, out);
}

bool StoreState::count_down(WaiterId id, Effects& out) {
  auto it = m_waiters.find(id);
  if (it == m_waiters.end()) return false;
  if (--it->second.remaining != 0) return false;
  out.woken.push_back(it->second.connection);
  auto& mine = m_waiters_of[it->second.connection];
  mine.erase(std::remove(mine.begin(), mine.end(), id), mine.end());
  if (mine.empty()) m_waiters_of.erase(it->second.connection);
  // Its other registrations were all consumed already (remaining reached 0), so only the
  // record itself has to go.
  m_waiters.erase(it);
  return true;
}

void StoreState::wake_all(std::string_view key, Effects& out) {
  auto it = m_waiting.find(key);
  if (it == m_waiting.end()) return;
  // Detach first: the list must not change under us, and every registration is consumed.
  std::vector<WaiterId> ids = std::move(it->second);
  m_waiting.erase(it);
  for (WaiterId id : ids) count_down(id, out);
}

void StoreState::wake_one(std::string_view key, Effects& out) {
  auto it = m_waiting.find(key);
  if (it == m_waiting.end()) return;
  auto& ids = it->second;
  const WaiterId id = ids.front();
  ids.erase(ids.begin());
  if (ids.empty()) m_waiting.erase(it);
  count_down(id, out);
}

void StoreState::forget_waiter(WaiterId id) {
  auto it = m_waiters.find(id);
  if (it == m_waiters.end()) return;
  for (const auto& key : it->second.keys) {
    auto w = m_waiting.find(key);
    if (w == m_waiting.end()) continue;
    auto& ids = w->second;
    ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    if (ids.empty()) m_waiting.erase(w);
  }
  m_waiters.erase(it);
}

void StoreState::cancel_waits(ConnectionId connection) {
  auto it = m_waiters_of.find(connection);
  if (it == m_waiters_of.end()) return;
  for (WaiterId id : it->second) forget_waiter(id);
  m_waiters_of.erase(it);
}

void StoreState::add_waiter(ConnectionId connection, const std::vector<std::string_view>& keys) {
  const WaiterId id = m_next_waiter++;
  Waiter waiter{connection, keys.size(), {}};
  waiter.keys.reserve(keys.size());
  for (const auto k : keys) {
    // Duplicates register twice and are both counted down by one SET (torch does the same).
    auto w = m_waiting.find(k);
    if (w == m_waiting.end()) w = m_waiting.try_emplace(std::string(k)).first;
    w->second.push_back(id);
    waiter.keys.emplace_back(k);
  }
  m_waiters.emplace(id, std::move(waiter));
  m_waiters_of[connection].push_back(id);
}

void StoreState::list_keys(Effects& out) const {
  // Past the bounds the requester is closed (torch's client then raises), rather than given a
  // list that is not the whole key space.
  if (m_values.size() > m_limits.max_keys) {
    out.close = true;
    out.error = "the key space holds " + std::to_string(m_values.size()) + " keys, more than one reply may list (" +
                std::to_string(m_limits.max_keys) + ")";
    return;
  }
  std::uint64_t bytes = 8;
  std::vector<std::string_view> keys;
  keys.reserve(m_values.size());
  for (const auto& [key, value] : m_values) {
    bytes += 8 + key.size();
    keys.emplace_back(key);
  }
  if (bytes > m_limits.max_reply_bytes) {
    out.close = true;
    out.error = "the key space's keys take " + std::to_string(bytes) + " bytes, more than one reply may carry (" +
                std::to_string(m_limits.max_reply_bytes) + ")";
    return;
  }
  std::sort(keys.begin(), keys.end());
  out.reply.reserve(out.reply.size() + static_cast<std::size_t>(bytes));
  append_i64(out.reply, static_cast<std::int64_t>(keys.size()));
  for (const auto key : keys) append_bytes(out.reply, key);
}

void StoreState::disconnect(ConnectionId connection) { cancel_waits(connection); }

void StoreState::clear() {
  account(-static_cast<std::int64_t>(m_bytes));
  m_values.clear();
  m_queues.clear();
  m_waiting.clear();
  m_waiters.clear();
  m_waiters_of.clear();
}

std::optional<std::int64_t> StoreState::counter_plus(const std::string& key, std::int64_t delta, std::string_view op,
                                                     Effects& out) const {
  std::int64_t base = 0;
  if (const auto it = m_values.find(key); it != m_values.end()) {
    const auto parsed = parse_stored_integer(it->second);
    if (!parsed) {
      out.close = true;
      out.error = std::string(op) + " on key " + quoted_prefix(key) + " whose value " + quoted_prefix(it->second) +
                  " is not a number";
      return std::nullopt;
    }
    base = *parsed;
  }
  // Wraps on overflow instead of torch's undefined behaviour.
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(delta));
}

void StoreState::apply(ConnectionId connection, const Request& request, Effects& out) {
  const auto& keys = request.keys;
  const auto& values = request.values;
  if (!fits(request, out)) return;
  switch (request.op) {
    case Op::Validate: return;  // the codec already checked the magic
    case Op::Ping: append_u32(out.reply, static_cast<std::uint32_t>(request.number)); return;
    case Op::Set: store(keys[0], values[0], out); return;
    case Op::CompareSet: {
      const auto& expected = values[0];
      const auto& desired = values[1];
      auto it = m_values.find(keys[0]);
      if (it == m_values.end()) {
        if (expected.empty()) {
          store(keys[0], desired, out);
          append_bytes(out.reply, desired);
        } else {
          // torch's "lie": the caller reads back its own expected value, nothing is stored.
          append_bytes(out.reply, expected);
        }
        return;
      }
      if (it->second == expected) {
        account(static_cast<std::int64_t>(desired.size()) - static_cast<std::int64_t>(it->second.size()));
        it->second = desired;
        append_bytes(out.reply, desired);
        wake_all(keys[0], out);
      } else {
        append_bytes(out.reply, it->second);
      }
      return;
    }
    case Op::Get: {
      auto it = m_values.find(keys[0]);
      append_bytes(out.reply, it == m_values.end() ? std::string_view() : std::string_view(it->second));
      return;
    }
    case Op::Add: {
      const auto sum = counter_plus(keys[0], request.number, "ADD", out);
      if (!sum) return;
      append_i64(out.reply, *sum);
      // The reply is already queued, so waiters are woken after the adder hears back.
      store(keys[0], std::to_string(*sum), out);
      return;
    }
    case Op::Check: {
      const bool ready = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return present(k); });
      append_u8(out.reply, static_cast<std::uint8_t>(ready ? CheckResponse::Ready : CheckResponse::NotReady));
      return;
    }
    case Op::Wait: {
      std::size_t missing = 0;
      for (const auto& k : keys) missing += present(k) ? 0 : 1;
      if (missing == 0) {
        append_u8(out.reply, static_cast<std::uint8_t>(WaitResponse::StopWaiting));
        return;
      }
      std::vector<std::string_view> awaited;
      awaited.reserve(missing);
      for (const auto& k : keys) {
        if (!present(k)) awaited.emplace_back(k);
      }
      add_waiter(connection, awaited);
      return;
    }
    case Op::CancelWait:
      cancel_waits(connection);
      append_u8(out.reply, static_cast<std::uint8_t>(WaitResponse::WaitCanceled));
      return;
    case Op::GetNumKeys: append_i64(out.reply, static_cast<std::int64_t>(m_values.size())); return;
    case Op::WatchKey:
      // Registration is acknowledged; change notifications are not sent (no torch code path
      // used by torchrun or its agents consumes them).
      append_u8(out.reply, static_cast<std::uint8_t>(WatchResponse::KeyCallbackRegistered));
      return;
    case Op::DeleteKey: {
      const auto freed = entry_bytes(keys[0]);
      const auto erased = m_values.erase(keys[0]);
      account(-static_cast<std::int64_t>(freed));
      append_i64(out.reply, static_cast<std::int64_t>(erased));
      return;
    }
    case Op::Append: {
      auto it = m_values.find(keys[0]);
      if (it == m_values.end()) {
        store(keys[0], values[0], out);
        return;
      }
      if (it->second.size() + values[0].size() > m_limits.max_value_bytes) {
        out.close = true;
        out.error = "APPEND would grow key " + quoted_prefix(keys[0]) + " past the value limit of " +
                    std::to_string(m_limits.max_value_bytes) + " bytes";
        return;
      }
      account(static_cast<std::int64_t>(values[0].size()));
      it->second += values[0];
      wake_all(keys[0], out);
      return;
    }
    case Op::MultiGet: {
      // One key named many times must not make a reply of terabytes: past the bound the
      // requester is closed, as for LIST_KEYS.
      std::uint64_t bytes = 0;
      for (const auto& k : keys) {
        auto it = m_values.find(k);
        bytes += 8 + (it == m_values.end() ? 0 : it->second.size());
      }
      if (bytes > m_limits.max_reply_bytes) {
        out.close = true;
        out.error = "the " + std::to_string(keys.size()) + " values asked for take " + std::to_string(bytes) +
                    " bytes, more than one reply may carry (" + std::to_string(m_limits.max_reply_bytes) + ")";
        return;
      }
      out.reply.reserve(out.reply.size() + static_cast<std::size_t>(bytes));
      for (const auto& k : keys) {
        auto it = m_values.find(k);
        append_bytes(out.reply, it == m_values.end() ? std::string_view() : std::string_view(it->second));
      }
      return;
    }
    case Op::MultiSet:
      for (std::size_t i = 0; i < keys.size(); ++i) store(keys[i], values[i], out);
      return;
    case Op::QueuePush:
      m_queues[keys[0]].push_back(values[0]);
      account(static_cast<std::int64_t>(keys[0].size() + values[0].size() + k_entry_overhead));
      // One item can satisfy one blocked pop: wake only the longest waiter.
      wake_one(keys[0], out);
      return;
    case Op::QueuePop: {
      auto it = m_queues.find(keys[0]);
      const std::size_t length = it == m_queues.end() ? 0 : it->second.size();
      append_i64(out.reply, static_cast<std::int64_t>(length));
      if (length > 0) {
        append_bytes(out.reply, it->second.front());
        account(-static_cast<std::int64_t>(keys[0].size() + it->second.front().size() + k_entry_overhead));
        it->second.pop_front();
        if (it->second.empty()) m_queues.erase(it);
      }
      return;
    }
    case Op::QueueLen: {
      auto it = m_queues.find(keys[0]);
      append_i64(out.reply, static_cast<std::int64_t>(it == m_queues.end() ? 0 : it->second.size()));
      return;
    }
    case Op::ListKeys: list_keys(out); return;
    case Op::Barrier: {
      // torch: count = stoll(stored) + 1, or 1; stored as text; no wake-up below the world size.
      const auto count = counter_plus(keys[0], 1, "BARRIER", out);
      if (!count) return;
      {
        auto [slot, inserted] = m_values.try_emplace(keys[0]);
        const std::uint64_t before = inserted ? 0 : keys[0].size() + slot->second.size() + k_entry_overhead;
        slot->second = std::to_string(*count);
        account(static_cast<std::int64_t>(keys[0].size() + slot->second.size() + k_entry_overhead) -
                static_cast<std::int64_t>(before));
      }
      if (*count >= request.number) {
        append_u8(out.reply, static_cast<std::uint8_t>(WaitResponse::StopWaiting));
        wake_all(keys[0], out);
      } else {
        add_waiter(connection, {std::string_view(keys[0])});
      }
      return;
    }
  }
}

}  // namespace rankrun::rendezvous
