#pragma once
// The metrics endpoint's HTTP, as Beast's types: a request's head parsed by Beast, what it gets
// (pure: which path, which status, which body), and the response as bytes. status_server.cpp
// reads the head from its socket and writes the response; this decides.

#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>
#include <optional>
#include <string>

#include "launcher/observe/job_status.hpp"

namespace rankrun::launcher::observe {

/// A request as Beast's parser reads it: its head only (a body is never read).
using HttpRequest = boost::beast::http::request<boost::beast::http::empty_body>;
using HttpParser = boost::beast::http::request_parser<boost::beast::http::empty_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

/// Sets the parser's bounds: a head (request line and fields) within k_max_http_request; a body,
/// which is never read, declared within it too. A head the parser took that is longer than
/// k_max_http_request as a whole is over the bound as well (the reader checks its length).
void bound_http_parser(HttpParser& parser);

/// What a request gets: GET (or HEAD: the same head, no body) of /metrics the exposition format,
/// of "/" a page naming it, of anything else 404; another method 405; not HTTP/1.x 400. Every
/// response is HTTP/1.1 and closes the connection.
HttpResponse answer_http(const HttpRequest& request, const JobStatus& status);

/// What a head that Beast's parser refused with `error` gets: 400 when it is not HTTP, nullopt
/// (the connection closed unanswered) when it is over the bounds or ended before its blank line,
/// or when `error` is not the parser's (the connection failed).
std::optional<HttpResponse> answer_http_error(boost::system::error_code error);

/// The response as it is sent.
std::string http_text(const HttpResponse& response);

}  // namespace rankrun::launcher::observe
