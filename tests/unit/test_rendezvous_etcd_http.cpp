// rendezvous/etcd_http: the bytes of a request to etcd as Beast writes them, and the words for
// a reply that is not a success. The replies' framing and bounds are tested against a fake
// server (tests/integration/test_etcd_client.cpp).

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/etcd_http.hpp"

using namespace rankrun::rendezvous;

TEST_CASE("etcd http: a request goes out as these bytes, with the token when there is one") {
  using etcd_http::post_request;
  CHECK(post_request("127.0.0.1:2379", "/v3/kv/put", R"({"key":"Zm9v"})", std::nullopt) ==
        "POST /v3/kv/put HTTP/1.1\r\nHost: 127.0.0.1:2379\r\nContent-Type: application/json\r\n"
        "Content-Length: 14\r\n\r\n{\"key\":\"Zm9v\"}");
  CHECK(post_request("[::1]:2379", "/v3/watch", "", std::string_view("tok.en")) ==
        "POST /v3/watch HTTP/1.1\r\nHost: [::1]:2379\r\nAuthorization: tok.en\r\nContent-Type: application/json\r\n"
        "Content-Length: 0\r\n\r\n");
  const std::string big(600000, 'x');
  const auto request = post_request("etcd:2379", "/v3/kv/txn", big, std::nullopt);
  CHECK(request.size() == request.find("\r\n\r\n") + 4 + big.size());
  CHECK(request.find("Content-Length: 600000\r\n") != std::string::npos);
}

TEST_CASE("etcd http: an error reply in words: etcd's message and codes, or the status and the body") {
  const auto json = parse_json(R"({"error":"key not found","message":"key not found","code":5})", 1024);
  CHECK(etcd_http::describe_error(404, json, "") == "key not found (HTTP 404, gRPC code 5)");
  const auto in_stream = parse_json(R"({"error":{"grpc_code":16,"message":"invalid auth token"}})", 1024);
  CHECK(etcd_http::describe_error(200, in_stream, "") == "invalid auth token (gRPC code 16)");
  CHECK(etcd_http::describe_error(502, std::nullopt, " Bad\x01Gateway\n") == "HTTP 502: Bad?Gateway");
}
