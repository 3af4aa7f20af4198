// EtcdClient's watches: a stream of etcd's events on a connection of its own, for as long as a
// wait lasts (no polling), and the calls built on it: wait(), wait_deleted(), watch_prefix().

#include <algorithm>
#include <boost/beast/http/error.hpp>
#include <set>

#include "rendezvous/etcd_client_impl.hpp"
#include "base/text.hpp"

namespace rankrun::rendezvous {
namespace {

using etcd_http::contains;
using etcd_http::IoError;
using etcd_http::k_max_body;
using etcd_http::Reply;
using std::chrono::milliseconds;
using tcp::deadline_after;
namespace http = boost::beast::http;

}  // namespace

EtcdClient::Impl::WatchEnd EtcdClient::Impl::watch_stream(const std::string& body, Clock::time_point deadline,
                                                          const OnEvent& on_event) {
  auto end = watch_stream_once(body, deadline, on_event);
  if (end != WatchEnd::AuthExpired) return end;
  renew_token();
  end = watch_stream_once(body, deadline, on_event);
  if (end == WatchEnd::AuthExpired) error(StoreFailure::Refused, "POST /v3/watch: etcd refused a fresh token");
  return end;
}

EtcdClient::Impl::WatchEnd EtcdClient::Impl::watch_stream_once(const std::string& body, Clock::time_point deadline,
                                                               const OnEvent& on_event) {
  struct Closer {
    Impl& impl;
    ~Closer() { impl.close(impl.watch); }
  } closer{*this};
  try {
    open(watch, deadline);
  } catch (const StoreError&) {
    // The wait's own deadline cut the connect short: that is a timeout, not a failure.
    if (interrupted || Clock::now() < deadline) throw;
    return WatchEnd::TimedOut;
  }
  try {
    const auto reply_deadline = std::min(deadline, deadline_after(options.timeout));
    send_post(watch, "/v3/watch", body, reply_deadline);
    Response r;
    auto& parser = r.parser;
    if (!read_until(watch, r, reply_deadline, [&] { return parser.is_header_done(); })) {
      if (Clock::now() >= deadline) return WatchEnd::TimedOut;
      throw IoError("no reply within " + std::to_string(options.timeout.count()) + " ms", StoreFailure::NoReply);
    }
    const int status = static_cast<int>(parser.get().result_int());
    if (status != 200 || !parser.chunked()) {
      std::string error_body;
      if (read_until(watch, r, reply_deadline, [&] { return parser.is_done(); })) error_body = parser.get().body();
      const auto json = parse_json(error_body, k_max_body);
      throw_if_denied("POST /v3/watch: ", Reply{status, error_body}, json);
      throw IoError(etcd_http::describe_error(status, json, error_body));
    }
    // The stream as a whole is unbounded; each message is bounded instead. Its chunks go to
    // `stream` as they arrive, and each chunk read in full is parsed at once.
    std::string stream;  // bytes of the stream not parsed yet
    bool chunk_read = false;
    auto on_chunk_body = [&](std::uint64_t remain, boost::beast::string_view bytes, boost::beast::error_code& ec) {
      if (stream.size() + remain > k_max_body) {
        r.why = "watch message over " + std::to_string(k_max_body) + " bytes";
        ec = http::error::body_limit;
        return std::size_t{0};
      }
      stream.append(bytes.data(), bytes.size());
      chunk_read = remain == bytes.size();
      return bytes.size();
    };
    parser.body_limit(boost::none);
    parser.on_chunk_body(on_chunk_body);  // kept by reference
    for (;;) {
      for (;;) {
        auto message = parse_json_prefix(stream, k_max_body);
        if (message.status == JsonScan::NeedMore) break;
        if (message.status == JsonScan::Malformed) {
          throw IoError("malformed message '" + printable(stream, 120) + "'");
        }
        stream.erase(0, message.used);
        if (etcd::parse_error(message.value)) {
          throw IoError(etcd_http::describe_error(status, std::optional(std::move(message.value)), {}));
        }
        const JsonValue* result = etcd::stream_result(message.value);
        auto response = result ? etcd::parse_watch_response(*result) : std::nullopt;
        if (!response) throw IoError("malformed message");
        if (response->canceled) {
          // The revision to start from was compacted away: read the keys again.
          if (response->compact_revision > 0) return WatchEnd::Compacted;
          if (authenticating() && watch_token_refused(response->cancel_reason)) return WatchEnd::AuthExpired;
          if (contains(response->cancel_reason, "PermissionDenied") || denial(response->cancel_reason)) {
            deny("POST /v3/watch: ", response->cancel_reason);
          }
          throw IoError("etcd cancelled the watch: " + printable(response->cancel_reason));
        }
        for (const auto& event : response->events) {
          if (on_event(event)) return WatchEnd::Seen;
        }
      }
      chunk_read = false;
      if (!read_until(watch, r, deadline, [&] { return chunk_read || parser.is_done(); })) return WatchEnd::TimedOut;
      if (parser.is_done()) throw IoError("etcd ended the watch stream");
    }
  } catch (const IoError& e) {
    error(e.kind, std::string("POST /v3/watch: ") + e.what());
  }
}

EtcdClient::Impl::WatchEnd EtcdClient::Impl::watch_keys(const std::map<std::string, std::int64_t>& targets,
                                                        etcd::WatchFilter filter, Clock::time_point deadline) {
  std::string body;
  std::set<std::string> waiting;
  for (const auto& [key, revision] : targets) {
    body += etcd::watch_create_request(key, revision + 1, filter);
    waiting.insert(key);
  }
  return watch_stream(body, deadline, [&](const etcd::WatchEvent& event) {
    const bool wanted = filter == etcd::WatchFilter::All ||
                        (filter == etcd::WatchFilter::PutsOnly) == (event.type == etcd::WatchEvent::Type::Put);
    if (wanted) waiting.erase(event.kv.key);
    return waiting.empty();
  });
}

bool EtcdClient::Impl::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& key : keys) full_keys.push_back(full(key));
  for (;;) {
    const auto presence = read_keys(full_keys, true);
    std::map<std::string, std::int64_t> missing;
    for (std::size_t i = 0; i < full_keys.size(); ++i) {
      if (!presence.kvs[i]) missing.emplace(full_keys[i], presence.revisions[i]);
    }
    if (missing.empty()) return true;
    if (Clock::now() >= deadline) return false;
    switch (watch_keys(missing, etcd::WatchFilter::PutsOnly, deadline)) {
      case WatchEnd::Seen: return true;
      case WatchEnd::TimedOut:
      case WatchEnd::AuthExpired: return false;  // not from watch_stream(), which renews the token
      case WatchEnd::Compacted: break;
    }
  }
}

bool EtcdClient::Impl::wait_deleted(std::string_view key, milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  const auto full_key = full(key);
  for (;;) {
    const auto found = range(full_key, true);
    if (found.kvs.empty()) return true;
    if (Clock::now() >= deadline) return false;
    switch (watch_keys({{full_key, found.revision}}, etcd::WatchFilter::DeletesOnly, deadline)) {
      case WatchEnd::Seen: return true;
      case WatchEnd::TimedOut:
      case WatchEnd::AuthExpired: return false;  // not from watch_stream(), which renews the token
      case WatchEnd::Compacted: break;
    }
  }
}

bool EtcdClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return m_impl->wait(keys, timeout);
}

bool EtcdClient::wait_deleted(std::string_view key, std::chrono::milliseconds timeout) {
  return m_impl->wait_deleted(key, timeout);
}

bool EtcdClient::watch_prefix(std::string_view key_prefix, std::int64_t& revision, std::chrono::milliseconds timeout,
                              const std::function<bool(const EtcdEvent&)>& on_event) {
  const auto full_prefix = m_impl->full(key_prefix);
  const auto body =
      etcd::watch_create_request(full_prefix, revision + 1, etcd::WatchFilter::All, etcd::prefix_end(full_prefix));
  const auto& prefix = m_impl->prefix;
  const auto end = m_impl->watch_stream(body, deadline_after(timeout), [&](const etcd::WatchEvent& e) {
    if (e.kv.key.compare(0, prefix.size(), prefix) != 0) return false;
    EtcdEvent event;
    event.deleted = e.type == etcd::WatchEvent::Type::Delete;
    event.key = e.kv.key.substr(prefix.size());
    if (!event.deleted) event.value = e.kv.value;
    event.revision = e.kv.mod_revision;
    revision = std::max(revision, event.revision);
    return !on_event(event);
  });
  if (end == Impl::WatchEnd::Compacted) {
    m_impl->error(StoreFailure::Failed,
                  "revision " + std::to_string(revision + 1) + " of the watched keys was compacted away");
  }
  return end == Impl::WatchEnd::Seen;
}

}  // namespace rankrun::rendezvous
