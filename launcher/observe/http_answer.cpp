#include "launcher/observe/http_answer.hpp"

#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/serializer.hpp>
#include <string_view>

namespace rankrun::launcher::observe {

namespace http = boost::beast::http;

namespace {

HttpResponse reply(http::status code, const char* type, std::string body) {
  HttpResponse response{code, 11};
  response.set(http::field::content_type, type);
  response.body() = std::move(body);
  response.prepare_payload();
  response.keep_alive(false);
  return response;
}

HttpResponse bad_request() {
  return reply(http::status::bad_request, "text/plain; charset=utf-8",
               "a request line 'GET /metrics HTTP/1.1' was expected\n");
}

}  // namespace

void bound_http_parser(HttpParser& parser) {
  parser.header_limit(static_cast<std::uint32_t>(k_max_http_request));
  parser.body_limit(k_max_http_request);
}

HttpResponse answer_http(const HttpRequest& request, const JobStatus& status) {
  if (request.version() / 10 != 1) return bad_request();
  const auto method = request.method();
  if (method != http::verb::get && method != http::verb::head) {
    return reply(http::status::method_not_allowed, "text/plain; charset=utf-8", "only GET\n");
  }
  std::string_view target(request.target().data(), request.target().size());
  if (const auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
  HttpResponse response;
  if (target == "/metrics") {
    response = reply(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", prometheus_text(status));
  } else if (target == "/") {
    response = reply(http::status::ok, "text/html; charset=utf-8",
                     "<html><body><p>rankrun: <a href=\"/metrics\">/metrics</a></p></body></html>\n");
  } else {
    return reply(http::status::not_found, "text/plain; charset=utf-8", "rankrun serves /metrics\n");
  }
  if (method == http::verb::head) response.body().clear();  // GET's Content-Length, no body
  return response;
}

std::optional<HttpResponse> answer_http_error(boost::system::error_code error) {
  if (error.category() != http::make_error_code(http::error::bad_method).category()) return std::nullopt;
  if (error == http::error::header_limit || error == http::error::body_limit || error == http::error::buffer_overflow ||
      error == http::error::end_of_stream || error == http::error::partial_message || error == http::error::need_more) {
    return std::nullopt;
  }
  return bad_request();
}

std::string http_text(const HttpResponse& response) {
  http::serializer<false, http::string_body> serializer(response);
  std::string out;
  boost::system::error_code ec;
  while (!serializer.is_done() && !ec) {
    serializer.next(ec, [&](boost::system::error_code&, const auto& buffers) {
      const auto text = boost::beast::buffers_to_string(buffers);
      out += text;
      serializer.consume(text.size());
    });
  }
  return out;
}

}  // namespace rankrun::launcher::observe
