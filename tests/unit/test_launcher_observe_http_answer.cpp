#include <doctest/doctest.h>

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>
#include <string>

#include "launcher/observe/http_answer.hpp"

using namespace rankrun::launcher::observe;
namespace http = boost::beast::http;

namespace {

JobStatus job() {
  JobStatus s;
  s.state = "running";
  s.entrypoint = "train.py";
  s.run_id = "j42";
  s.world_size = 1;
  return s;
}

HttpRequest request(http::verb method, const char* target, unsigned version = 11) {
  return HttpRequest{method, target, version};
}

// A head of exactly `size` bytes: the request line, one field padded to fit, the blank line.
std::string head_of(std::size_t size) {
  const std::string start = "GET /metrics HTTP/1.1\r\nX-Pad: ";
  return start + std::string(size - start.size() - 4, 'y') + "\r\n\r\n";
}

}  // namespace

TEST_CASE("HTTP: GET /metrics is the exposition format, every response closes its connection") {
  const auto s = job();
  const auto r = answer_http(request(http::verb::get, "/metrics"), s);
  CHECK(r.result() == http::status::ok);
  CHECK(r.version() == 11);
  CHECK(r[http::field::content_type] == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r.body() == prometheus_text(s));
  CHECK(r[http::field::content_length] == std::to_string(prometheus_text(s).size()));
  CHECK_FALSE(r.keep_alive());
  // the bytes as today's clients read them: status line, then these fields in this order
  CHECK(http_text(r) ==
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
            std::to_string(prometheus_text(s).size()) + "\r\nConnection: close\r\n\r\n" + prometheus_text(s));
  // a query is not part of the path; HTTP/1.0 is answered as 1.1
  CHECK(answer_http(request(http::verb::get, "/metrics?x=1", 10), s).result() == http::status::ok);
}

TEST_CASE("HTTP: / names /metrics, other paths 404, HEAD has GET's head and no body") {
  const auto s = job();
  const auto root = answer_http(request(http::verb::get, "/"), s);
  CHECK(root.result() == http::status::ok);
  CHECK(root[http::field::content_type] == "text/html; charset=utf-8");
  CHECK(root.body().find("<a href=\"/metrics\">/metrics</a>") != std::string::npos);
  CHECK(http_text(answer_http(request(http::verb::get, "/other"), s)) ==
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 24\r\n"
        "Connection: close\r\n\r\nrankrun serves /metrics\n");
  const auto head = answer_http(request(http::verb::head, "/metrics"), s);
  CHECK(head.result() == http::status::ok);
  CHECK(head.body().empty());
  CHECK(head[http::field::content_length] == std::to_string(prometheus_text(s).size()));
  CHECK(http_text(head).find("\r\n\r\n") + 4 == http_text(head).size());
  // HEAD of an unknown path is a 404 with its body, as before
  CHECK(answer_http(request(http::verb::head, "/x"), s).result() == http::status::not_found);
}

TEST_CASE("HTTP: methods but GET and HEAD are 405; HTTP/2 or later is 400") {
  const auto s = job();
  const auto post = answer_http(request(http::verb::post, "/metrics"), s);
  CHECK(post.result() == http::status::method_not_allowed);
  CHECK(post.body() == "only GET\n");
  CHECK(answer_http(request(http::verb::delete_, "/"), s).result() == http::status::method_not_allowed);
  CHECK(answer_http(request(http::verb::get, "/metrics", 20), s).result() == http::status::bad_request);
}

TEST_CASE("HTTP: a head the parser refuses is 400 when it is not HTTP, closed unanswered when too long or cut") {
  const auto bad = answer_http_error(http::error::bad_method);
  REQUIRE(bad);
  CHECK(bad->result() == http::status::bad_request);
  CHECK(bad->body() == "a request line 'GET /metrics HTTP/1.1' was expected\n");
  CHECK(answer_http_error(http::error::bad_version));
  CHECK(answer_http_error(http::error::bad_field));
  CHECK_FALSE(answer_http_error(http::error::header_limit));
  CHECK_FALSE(answer_http_error(http::error::body_limit));
  CHECK_FALSE(answer_http_error(http::error::buffer_overflow));
  CHECK_FALSE(answer_http_error(http::error::partial_message));
  CHECK_FALSE(answer_http_error(http::error::end_of_stream));
  CHECK_FALSE(answer_http_error(boost::asio::error::operation_aborted));  // timed out
  CHECK_FALSE(answer_http_error(boost::asio::error::eof));
}

TEST_CASE("HTTP: a head as bytes, through Beast's parser, within k_max_http_request") {
  const auto s = job();
  CHECK(answer_http_request(head_of(k_max_http_request), s).find("HTTP/1.1 200 OK\r\n") == 0);
  CHECK(answer_http_request(head_of(k_max_http_request + 1), s).empty());
  // past the bound in the fields alone (Beast's header_limit)
  CHECK(answer_http_request("GET / HTTP/1.1\r\nX: " + std::string(9000, 'y') + "\r\n\r\n", s).empty());
  CHECK(answer_http_request("GET /metrics HTTP/1.1\r\nHost: x\r\n", s).empty());  // no blank line: cut short
  CHECK(answer_http_request("hello there\r\n\r\n", s).find("HTTP/1.1 400 Bad Request\r\n") == 0);
  CHECK(answer_http_request("GET /metrics HTTP/2.0\r\n\r\n", s).find("HTTP/1.1 400 ") == 0);
  CHECK(answer_http_request("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", s).find("HTTP/1.1 400 ") == 0);
  CHECK(answer_http_request("get /metrics HTTP/1.1\r\n\r\n", s).find("HTTP/1.1 405 ") == 0);
  // a body is never read: one declared is no matter for the answer, one declared past the bound closes
  CHECK(answer_http_request("POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\n", s).find("HTTP/1.1 405 ") == 0);
  CHECK(answer_http_request("POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", s).empty());
}
