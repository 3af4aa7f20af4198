// EtcdClient: etcd's operations (a range, a txn, a read-modify-write), and the public calls
// made of them. Its connections, requests, authentication and watches are in the files that
// etcd_client_impl.hpp names.

#include "rendezvous/etcd_client.hpp"

#include <algorithm>

#include "base/text.hpp"
#include "rendezvous/etcd_client_impl.hpp"
#include "rendezvous/store_state.hpp"  // parse_stored_integer: add() reads numbers as the store does

namespace rankrun::rendezvous {
namespace {

using etcd_http::k_max_body;
using std::chrono::milliseconds;
using tcp::Clock;
using tcp::deadline_after;
using tcp::remaining_ms;

std::string quote_key(std::string_view key) { return "'" + printable(key, 64) + "'"; }

std::string describe_keys(const std::vector<std::string>& keys) {
  std::string text;
  for (std::size_t i = 0; i < keys.size() && i < 8; ++i) text += (i ? ", " : "") + quote_key(keys[i]);
  if (keys.size() > 8) text += ", ... (" + std::to_string(keys.size()) + " keys)";
  return text;
}

}  // namespace

etcd::RangeResult EtcdClient::Impl::range(const std::string& full_key, bool keys_only) {
  const auto json = call("/v3/kv/range", etcd::range_request(full_key, {}, keys_only));
  auto result = etcd::parse_range_response(json);
  if (!result || result->kvs.size() > 1) malformed("/v3/kv/range");
  return std::move(*result);
}

etcd::TxnResult EtcdClient::Impl::txn(const std::string& body) {
  const auto json = call("/v3/kv/txn", body);
  auto result = etcd::parse_txn_response(json);
  if (!result) malformed("/v3/kv/txn");
  return std::move(*result);
}

EtcdClient::Impl::Presence EtcdClient::Impl::read_keys(const std::vector<std::string>& full_keys, bool keys_only) {
  Presence out;
  for (std::size_t first = 0; first < full_keys.size(); first += etcd::k_max_txn_ops) {
    const auto last = std::min(full_keys.size(), first + etcd::k_max_txn_ops);
    const std::vector<std::string> chunk(full_keys.begin() + static_cast<std::ptrdiff_t>(first),
                                         full_keys.begin() + static_cast<std::ptrdiff_t>(last));
    const auto result = txn(etcd::txn_range_request(chunk, keys_only));
    if (!result.succeeded || result.responses.size() != chunk.size()) malformed("/v3/kv/txn");
    for (const auto& op : result.responses) {
      if (op.kind != etcd::TxnOp::Kind::Range || op.kvs.size() > 1) malformed("/v3/kv/txn");
      out.kvs.push_back(op.kvs.empty() ? std::nullopt : std::optional(op.kvs[0]));
      out.revisions.push_back(result.revision);
    }
  }
  return out;
}

void EtcdClient::Impl::read_modify_write(std::string_view key, std::string_view what,
                                         const std::function<std::string(const std::optional<std::string>&)>& next) {
  const auto full_key = full(key);
  const auto deadline = deadline_after(options.timeout);
  auto found = range(full_key, false);
  std::optional<etcd::KeyValue> current;
  if (!found.kvs.empty()) current = std::move(found.kvs[0]);
  for (;;) {
    const std::string value = next(current ? std::optional<std::string>(current->value) : std::nullopt);
    const auto result = txn(etcd::swap_request(full_key, current ? current->mod_revision : 0, value));
    auto swap = etcd::swap_result(result);
    if (!swap) malformed("/v3/kv/txn");
    if (swap->succeeded) return;
    current = std::move(swap->current);
    if (Clock::now() >= deadline) {
      error(StoreFailure::Failed, std::string(what) + " on key " + quote_key(key) +
                                      ": other writers kept changing it for " +
                                      std::to_string(options.timeout.count()) + " ms");
    }
  }
}

void EtcdClient::Impl::timed_out(milliseconds timeout, const std::vector<std::string>& keys) const {
  const auto what = "timed out after " + std::to_string(timeout.count()) + " ms waiting for " + describe_keys(keys);
  throw StoreTimeout("etcd at " + where() + ": " + what, what);
}

EtcdClient::EtcdClient(std::string host, std::uint16_t port, std::string prefix, EtcdOptions options)
    : m_impl(std::make_unique<Impl>(std::move(host), port, std::move(prefix), std::move(options))) {
  m_impl->open(m_impl->main, std::chrono::steady_clock::time_point::max());
  if (m_impl->security) m_impl->prove();
}

EtcdClient::~EtcdClient() = default;
EtcdClient::EtcdClient(EtcdClient&&) noexcept = default;
EtcdClient& EtcdClient::operator=(EtcdClient&&) noexcept = default;

void EtcdClient::set(std::string_view key, std::string_view value) { set(key, value, 0); }

void EtcdClient::set(std::string_view key, std::string_view value, std::int64_t lease) {
  m_impl->call("/v3/kv/put", etcd::put_request(m_impl->full(key), value, lease));
}

void EtcdClient::set_many(const std::vector<std::pair<std::string, std::string>>& kvs) {
  // etcd refuses requests over --max-request-bytes (1.5 MiB by default; base64 adds a third).
  constexpr std::size_t k_max_batch_bytes = std::size_t{512} << 10;
  std::vector<std::pair<std::string, std::string>> batch;
  std::size_t bytes = 0;
  const auto flush = [&] {
    if (batch.empty()) return;
    const auto result = m_impl->txn(etcd::txn_put_request(batch));
    if (!result.succeeded || result.responses.size() != batch.size()) m_impl->malformed("/v3/kv/txn");
    batch.clear();
    bytes = 0;
  };
  for (const auto& [key, value] : kvs) {
    const auto size = m_impl->full(key).size() + value.size();
    if (!batch.empty() && (batch.size() == etcd::k_max_txn_ops || bytes + size > k_max_batch_bytes)) flush();
    batch.emplace_back(m_impl->full(key), value);
    bytes += size;
  }
  flush();
}

std::optional<std::string> EtcdClient::try_get(std::string_view key) {
  auto found = m_impl->range(m_impl->full(key), false);
  if (found.kvs.empty()) return std::nullopt;
  return std::move(found.kvs[0].value);
}

std::string EtcdClient::get(std::string_view key) { return get(key, m_impl->options.timeout); }

std::string EtcdClient::get(std::string_view key, std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  for (;;) {
    if (auto value = try_get(key)) return std::move(*value);
    // Deleted again between the wait and the read: wait again, within the same deadline.
    if (!m_impl->wait({std::string(key)}, milliseconds(remaining_ms(deadline)))) {
      m_impl->timed_out(timeout, {std::string(key)});
    }
  }
}

std::string EtcdClient::compare_set(std::string_view key, std::string_view expected, std::string_view desired) {
  const auto result = m_impl->txn(etcd::compare_set_request(m_impl->full(key), expected, desired));
  auto stored = etcd::compare_set_result(result, expected, desired);
  if (!stored) m_impl->malformed("/v3/kv/txn");
  return std::move(*stored);
}

std::int64_t EtcdClient::add(std::string_view key, std::int64_t delta) {
  std::int64_t sum = 0;
  m_impl->read_modify_write(key, "add", [&](const std::optional<std::string>& current) {
    std::int64_t base = 0;
    if (current) {
      const auto parsed = parse_stored_integer(*current);
      if (!parsed) {
        m_impl->error(StoreFailure::Failed,
                      "add on key " + quote_key(key) + " whose value " + quote_key(*current) + " is not a number");
      }
      base = *parsed;
    }
    // Wraps on overflow, as the store's ADD does.
    sum = static_cast<std::int64_t>(static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(delta));
    return std::to_string(sum);
  });
  return sum;
}

void EtcdClient::append(std::string_view key, std::string_view value) {
  m_impl->read_modify_write(key, "append", [&](const std::optional<std::string>& current) {
    return current ? *current + std::string(value) : std::string(value);
  });
}

bool EtcdClient::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full_keys;
  for (const auto& key : keys) full_keys.push_back(m_impl->full(key));
  const auto presence = m_impl->read_keys(full_keys, true);
  return std::all_of(presence.kvs.begin(), presence.kvs.end(), [](const auto& kv) { return kv.has_value(); });
}

std::vector<std::string> EtcdClient::multi_get(const std::vector<std::string>& keys) {
  const auto timeout = m_impl->options.timeout;
  const auto deadline = deadline_after(timeout);
  std::vector<std::string> full_keys;
  for (const auto& key : keys) full_keys.push_back(m_impl->full(key));
  for (;;) {
    auto presence = m_impl->read_keys(full_keys, false);
    if (std::all_of(presence.kvs.begin(), presence.kvs.end(), [](const auto& kv) { return kv.has_value(); })) {
      std::vector<std::string> values;
      values.reserve(keys.size());
      for (auto& kv : presence.kvs) values.push_back(std::move(kv->value));
      return values;
    }
    if (!m_impl->wait(keys, milliseconds(remaining_ms(deadline)))) m_impl->timed_out(timeout, keys);
  }
}

bool EtcdClient::delete_key(std::string_view key) {
  const auto json = m_impl->call("/v3/kv/deleterange", etcd::delete_request(m_impl->full(key)));
  const auto deleted = etcd::parse_delete_response(json);
  if (!deleted) m_impl->malformed("/v3/kv/deleterange");
  return *deleted > 0;
}

bool EtcdClient::create(std::string_view key, std::string_view value, std::int64_t lease) {
  const auto result = m_impl->txn(etcd::swap_request(m_impl->full(key), 0, value, lease));
  const auto swap = etcd::swap_result(result);
  if (!swap) m_impl->malformed("/v3/kv/txn");
  return swap->succeeded;
}

std::vector<std::pair<std::string, std::string>> EtcdClient::list(std::string_view key_prefix, std::int64_t& revision) {
  const auto full_prefix = m_impl->full(key_prefix);
  const auto json = m_impl->call("/v3/kv/range", etcd::range_request(full_prefix, etcd::prefix_end(full_prefix)));
  auto result = etcd::parse_range_response(json);
  if (!result) m_impl->malformed("/v3/kv/range");
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& kv : result->kvs) {
    if (kv.key.compare(0, m_impl->prefix.size(), m_impl->prefix) != 0)
      m_impl->malformed("/v3/kv/range", "a key out of range");
    out.emplace_back(kv.key.substr(m_impl->prefix.size()), std::move(kv.value));
  }
  revision = result->revision;
  return out;
}

std::int64_t EtcdClient::grant_lease(std::chrono::seconds ttl) {
  const auto json = m_impl->call("/v3/lease/grant", etcd::lease_grant_request(ttl.count()));
  const auto lease = etcd::parse_lease_response(json);
  if (!lease) m_impl->malformed("/v3/lease/grant");
  if (!lease->error.empty()) m_impl->error(StoreFailure::Failed, "lease grant failed: " + lease->error);
  if (lease->id == 0) m_impl->malformed("/v3/lease/grant", "no lease id");
  return lease->id;
}

void EtcdClient::keep_alive(std::int64_t lease) {
  // A stream endpoint: the one refresh answers with one {"result":...} message, and the stream
  // ends because our request body (the client's half of the stream) has ended.
  const auto json = m_impl->call("/v3/lease/keepalive", etcd::lease_request(lease));
  const JsonValue* result = etcd::stream_result(json);
  const auto refreshed = result ? etcd::parse_lease_response(*result) : std::nullopt;
  if (!refreshed) m_impl->malformed("/v3/lease/keepalive");
  // etcd answers an unknown lease with TTL 0 (left out), not with an error.
  if (refreshed->ttl <= 0) {
    m_impl->error(StoreFailure::Failed, "lease " + std::to_string(lease) + " has lapsed or was revoked");
  }
}

void EtcdClient::revoke(std::int64_t lease) {
  const auto reply = m_impl->exchange("/v3/lease/revoke", etcd::lease_request(lease));
  if (reply.status == 200) return;
  const auto json = parse_json(reply.body, k_max_body);
  if (json) {
    // gRPC NOT_FOUND: the lease lapsed already, which is what revoking wanted.
    if (const auto error = etcd::parse_error(*json); error && error->code == 5) return;
  }
  m_impl->refused("/v3/lease/revoke", reply, json);
}

const std::string& EtcdClient::host() const { return m_impl->host; }
std::uint16_t EtcdClient::port() const { return m_impl->port; }
const std::string& EtcdClient::prefix() const { return m_impl->prefix; }

}  // namespace rankrun::rendezvous
