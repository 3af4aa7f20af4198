#pragma once
// The etcd client's HTTP/1.1 (etcd_client.hpp's internals): a request as it goes on the wire, a
// reply read through Beast's parser with the bounds on what etcd may send, and what a reply
// that is not a success says went wrong. No sockets here: the client feeds the parser what its
// connection received (etcd_client_impl.hpp).

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "rendezvous/etcd_json.hpp"
#include "rendezvous/store_client.hpp"  // StoreFailure

namespace rankrun::rendezvous::etcd_http {

// Bounds on what etcd sends. Its replies to us stay far below them (etcd refuses requests over
// 1.5 MiB by default), so past them the stream is not what we think it is.
constexpr std::size_t k_max_body = std::size_t{4} << 20;
constexpr std::size_t k_max_head = std::size_t{64} << 10;
constexpr std::size_t k_max_line = std::size_t{8} << 10;

/// A transport failure inside a request (or a reply that is not HTTP as etcd speaks it); the
/// caller drops the connection and names the request.
struct IoError : std::runtime_error {
  explicit IoError(const std::string& what, StoreFailure failure = StoreFailure::Failed)
      : std::runtime_error(what), kind(failure) {}
  StoreFailure kind;
};

inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

/// A POST of the JSON `body` to `path` as it goes on the wire: Beast's request, written by its
/// serializer (the client's connections are not Asio streams), with the fields Host,
/// Authorization (when `token` is given), Content-Type and Content-Length, in that order.
std::string post_request(std::string_view host, std::string_view path, std::string_view body,
                         std::optional<std::string_view> token);

/// One response being read: Beast's parser, with k_max_head and k_max_body as its limits, the
/// bytes of the header it has taken so far, and the chunks it has seen.
struct Response {
  boost::beast::http::response_parser<boost::beast::http::string_body> parser;
  std::size_t head_bytes = 0;
  std::size_t chunks = 0;
  std::string why;  // an error found by a callback of ours, in our words

  Response();
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;

 private:
  std::function<void(std::uint64_t, boost::beast::string_view, boost::beast::error_code&)> m_count_chunk;
};

/// Gives the parser what `in` holds from `pos` on (advancing `pos` past what it took), one
/// step of it: the header, or a piece of the body or of a chunk; false when it needs more bytes
/// than that. Beast does the framing; bounded here are what its limits do not cover: the header
/// as a whole (its header_limit bounds what one put() sees) and each line of it. The header is
/// given whole lines only, so that a peer that is not an HTTP server fails at its first line,
/// not after a header that never ends. IoError when the reply is not what etcd sends.
bool step(const std::string& in, std::size_t& pos, Response& r);

/// A reply read whole.
struct Reply {
  int status = 0;
  std::string body;
};

/// What a reply other than 200 (or a 200 carrying an error) says went wrong.
std::string describe_error(int status, const std::optional<JsonValue>& json, std::string_view body);

}  // namespace rankrun::rendezvous::etcd_http
