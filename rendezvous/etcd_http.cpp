// One request to etcd and its reply: the request written by Beast (etcd_http.hpp), the reply
// read by Beast's parser within the bounds on what etcd sends, and the exchange on the client's
// request connection (EtcdClient::Impl, etcd_client_impl.hpp).

#include "rendezvous/etcd_http.hpp"

#include "base/text.hpp"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffer_traits.hpp>
#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/serializer.hpp>

#include "rendezvous/etcd_client_impl.hpp"

namespace rankrun::rendezvous {
namespace etcd_http {
namespace {

namespace http = boost::beast::http;

boost::beast::string_view beast_view(std::string_view text) { return {text.data(), text.size()}; }

// What Beast accepts and we do not.
void check_head(const Response& r) {
  const auto& head = r.parser.get();
  // We never send "Expect: 100-continue"; nothing else may come before the answer.
  if (head.result_int() < 200) throw IoError("unexpected HTTP status " + std::to_string(head.result_int()));
  std::size_t longest = head.reason().size() + 13;  // "HTTP/1.1 200 " and the reason
  for (const auto& field : head) longest = std::max(longest, field.name_string().size() + 2 + field.value().size());
  if (longest + 2 > k_max_line) throw IoError("line of the response over " + std::to_string(k_max_line) + " bytes");
  // Only "chunked" (what Go's server sends) is understood.
  if (const auto te = head.find(http::field::transfer_encoding); te != head.end() && !r.parser.chunked()) {
    throw IoError("unsupported Transfer-Encoding '" + printable({te->value().data(), te->value().size()}, 40) + "'");
  }
  // A body that runs to the end of the connection: Go's server never sends one to an HTTP/1.1
  // request.
  if (r.parser.need_eof()) throw IoError("response with neither Content-Length nor chunked encoding");
}

// Beast's error, in words that say where in the response it is; `rest` is where the parser
// stopped.
std::string describe(std::string_view rest, const Response& r, boost::beast::error_code ec) {
  if (!r.why.empty()) return r.why;
  const auto line = [&] { return printable(rest.substr(0, rest.find("\r\n")), 80); };
  if (ec == http::error::header_limit) return "response headers over " + std::to_string(k_max_head) + " bytes";
  if (ec == http::error::body_limit) {
    if (r.parser.chunked()) return "response body over " + std::to_string(k_max_body) + " bytes";
    return "response body of " + std::to_string(r.parser.content_length().value_or(0)) + " bytes";
  }
  if (ec == http::error::bad_version || ec == http::error::bad_status || ec == http::error::bad_reason) {
    return "malformed status line '" + line() + "' (" + ec.message() + ")";
  }
  if (ec == http::error::bad_content_length) return "malformed Content-Length (" + ec.message() + ")";
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension) {
    // Beast reads a chunk's closing CRLF with the next chunk's size line.
    if (rest.substr(0, 2) == "\r\n") {
      rest.remove_prefix(2);
    } else if (r.chunks > 0) {
      return "malformed chunk: no CRLF after its data";
    }
    return "malformed chunk size '" + line() + "' (" + ec.message() + ")";
  }
  return "malformed HTTP response (" + ec.message() + ")";
}

}  // namespace

std::string post_request(std::string_view host, std::string_view path, std::string_view body,
                         std::optional<std::string_view> token) {
  http::request<http::string_body> request{http::verb::post, beast_view(path), 11};
  request.set(http::field::host, beast_view(host));
  if (token) request.set(http::field::authorization, beast_view(*token));
  request.set(http::field::content_type, "application/json");
  request.body().assign(body.data(), body.size());
  request.prepare_payload();
  // Into one buffer, which goes out in one send.
  std::string out;
  out.reserve(256 + body.size());
  http::serializer<true, http::string_body> serializer(request);
  boost::beast::error_code ec;
  while (!ec && !serializer.is_done()) {
    serializer.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
      for (const auto buffer : boost::beast::buffers_range_ref(buffers)) {
        out.append(static_cast<const char*>(buffer.data()), buffer.size());
      }
      serializer.consume(boost::beast::buffer_bytes(buffers));
    });
  }
  // A string body cannot fail to serialize.
  if (ec) throw IoError("cannot write the request: " + ec.message());
  return out;
}

Response::Response()
    : m_count_chunk([this](std::uint64_t, boost::beast::string_view, boost::beast::error_code&) { ++chunks; }) {
  parser.header_limit(static_cast<std::uint32_t>(k_max_head));
  parser.body_limit(std::uint64_t{k_max_body});
  parser.on_chunk_header(m_count_chunk);  // kept by reference
}

bool step(const std::string& in, std::size_t& pos, Response& r) {
  auto& parser = r.parser;
  if (parser.is_done()) return false;
  std::string_view bytes(in.data() + pos, in.size() - pos);
  const bool in_head = !parser.is_header_done();
  std::size_t partial = 0;  // a line of the header not ended yet, while the header is not
  if (in_head) {
    const auto end = bytes.rfind("\r\n");
    const std::size_t lines = end == std::string_view::npos ? 0 : end + 2;
    partial = bytes.size() - lines;
    bytes = bytes.substr(0, std::min(lines, k_max_head - r.head_bytes));
  }
  boost::beast::error_code ec = http::error::need_more;
  std::size_t used = 0;
  if (!bytes.empty()) used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  pos += used;
  if (in_head) r.head_bytes += used;
  if (ec == http::error::need_more) {
    // What the parser has looked at without taking: the header so far, or a chunk's size
    // line or the trailers (a body's bytes are taken as they come).
    const auto waiting = bytes.size() - used;
    if (!parser.is_header_done()) {
      if (partial > k_max_line) throw IoError("line of the response over " + std::to_string(k_max_line) + " bytes");
      if (r.head_bytes + waiting < k_max_head) return false;
      ec = http::error::header_limit;
    } else {
      if (waiting <= k_max_head) return false;
      throw IoError("chunk size line or trailers over " + std::to_string(k_max_head) + " bytes");
    }
  }
  if (ec) throw IoError(describe(std::string_view(in).substr(pos), r, ec));
  if (in_head && parser.is_header_done()) check_head(r);
  return used > 0;
}

std::string describe_error(int status, const std::optional<JsonValue>& json, std::string_view body) {
  if (json) {
    if (auto error = etcd::parse_error(*json)) {
      // A stream's error comes inside a 200 reply: its HTTP status says nothing.
      return error->message + " (" + (status != 200 ? "HTTP " + std::to_string(status) + ", " : std::string()) +
             "gRPC code " + std::to_string(error->code) + ")";
    }
  }
  return "HTTP " + std::to_string(status) + ": " + printable(trim_space(body));
}

}  // namespace etcd_http

using etcd_http::IoError;
using etcd_http::k_max_body;

void EtcdClient::Impl::send_post(Conn& c, std::string_view path, std::string_view body, Clock::time_point deadline,
                                 bool with_token) {
  std::optional<std::string_view> token;
  if (with_token && authenticating()) {
    {
      const std::lock_guard lock(security->mutex);
      sent_token = security->token;
    }
    token = sent_token;
  }
  const auto request = etcd_http::post_request(where(), path, body, token);
  c.used = true;
  send_all(c, request, deadline);
}

bool EtcdClient::Impl::read_until(Conn& c, Response& r, Clock::time_point deadline, const std::function<bool()>& done) {
  for (;;) {
    while (!done() && etcd_http::step(c.in, c.pos, r)) {
    }
    if (done()) return true;
    if (!fill(c, deadline)) return false;
  }
}

void EtcdClient::Impl::await_patiently(Response& r, Clock::time_point sent) {
  using std::chrono::duration_cast;
  const auto give_up = sent + std::max(options.patience, options.timeout);
  for (;;) {
    const auto waited = duration_cast<std::chrono::milliseconds>(Clock::now() - sent);
    if (Clock::now() >= give_up) {
      if (options.patience <= options.timeout) {
        throw IoError("no reply within " + std::to_string(options.timeout.count()) + " ms", StoreFailure::NoReply);
      }
      throw IoError("no reply within " + std::to_string(waited.count()) +
                        " ms, on a connection etcd's host kept acknowledging (etcd is stopped or overloaded)",
                    StoreFailure::NoReply);
    }
    // Something sent is not acknowledged: the link or the host may be down.
    if (!tcp::peer_has_everything(main.fd)) {
      throw IoError("no reply within " + std::to_string(waited.count()) + " ms", StoreFailure::NoReply);
    }
    if (options.on_slow_reply) options.on_slow_reply(waited);
    if (read_until(main, r, std::min(give_up, tcp::deadline_after(options.timeout)),
                   [&] { return r.parser.is_done(); }))
      return;
  }
}

etcd_http::Reply EtcdClient::Impl::exchange_once(std::string_view path, std::string_view body, bool with_token) {
  ensure_fresh();
  const auto sent = Clock::now();
  const auto deadline = tcp::deadline_after(options.timeout);
  try {
    send_post(main, path, body, deadline, with_token);
    Response r;
    if (!read_until(main, r, deadline, [&] { return r.parser.is_done(); })) await_patiently(r, sent);
    if (!r.parser.keep_alive()) close(main);
    return {static_cast<int>(r.parser.get().result_int()), std::move(r.parser.get().body())};
  } catch (const IoError& e) {
    fail(main, "POST " + std::string(path) + ": " + e.what(), e.kind);
  }
}

JsonValue EtcdClient::Impl::call(std::string_view path, std::string_view body) {
  const auto reply = exchange(path, body);
  auto json = parse_json(reply.body, k_max_body);
  if (reply.status != 200) refused(path, reply, json);
  if (!json || !json->is_object()) malformed(path, "'" + printable(reply.body, 120) + "'");
  if (json_member(*json, "error") != nullptr) refused(path, reply, json);
  return std::move(*json);
}

void EtcdClient::Impl::refused(std::string_view path, const Reply& reply, const std::optional<JsonValue>& json) const {
  const std::string request = "POST " + std::string(path) + ": ";
  throw_if_denied(request, reply, json);
  error(StoreFailure::Failed, request + etcd_http::describe_error(reply.status, json, reply.body));
}

void EtcdClient::Impl::malformed(std::string_view path, std::string_view detail) {
  fail(main, "POST " + std::string(path) + ": malformed reply: " + std::string(detail));
}

}  // namespace rankrun::rendezvous
