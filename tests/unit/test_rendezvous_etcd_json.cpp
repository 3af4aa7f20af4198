// rendezvous/etcd_json: bounded JSON parsing (valid, malformed, truncated, too deep, too
// large), base64 (etcd_base64, over OpenSSL), and etcd's messages: requests checked by
// reparsing them, replies parsed from JSON copied from a real etcd 3.4 gateway.

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "rendezvous/etcd_base64.hpp"
#include "rendezvous/etcd_json.hpp"
#include "rendezvous/tls_connection.hpp"

using namespace rankrun::rendezvous;

namespace {

constexpr std::size_t k_big = 1 << 20;

JsonValue parse_ok(std::string_view text) {
  auto v = parse_json(text, k_big);
  REQUIRE_MESSAGE(v.has_value(), text);
  return std::move(*v);
}

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string b64(std::string_view s) { return base64_encode(s); }

}  // namespace

TEST_CASE("etcd json: scalars, arrays and objects; int64s exact, as numbers and as strings") {
  CHECK(parse_ok("null").is_null());
  CHECK(parse_ok(" true ") == true);
  CHECK(parse_ok("false") == false);
  const auto n = parse_ok("-12.5e+3");
  CHECK(n.is_number_float());
  CHECK(n.get<double>() == -12500.0);
  CHECK_FALSE(json_int(n).has_value());
  CHECK_FALSE(json_int(parse_ok("1.0")).has_value());
  CHECK_FALSE(json_int(parse_ok("1e3")).has_value());
  // int64s beyond a double's precision survive, as numbers and as etcd's strings.
  CHECK(json_int(parse_ok("9223372036854775807")) == INT64_MAX);
  CHECK(json_int(parse_ok("-9223372036854775808")) == INT64_MIN);
  CHECK(json_int(parse_ok("\"-9223372036854775808\"")) == INT64_MIN);
  CHECK(json_int(parse_ok("\"9223372036854775807\"")) == INT64_MAX);
  CHECK_FALSE(json_int(parse_ok("9223372036854775808")).has_value());
  CHECK_FALSE(json_int(parse_ok("-9223372036854775809")).has_value());
  CHECK_FALSE(json_int(parse_ok("\"9223372036854775808\"")).has_value());
  CHECK_FALSE(json_int(parse_ok("\"12a\"")).has_value());
  CHECK_FALSE(json_int(parse_ok("\"\"")).has_value());
  CHECK_FALSE(json_int(parse_ok("\"+1\"")).has_value());
  CHECK_FALSE(json_int(parse_ok("\"-\"")).has_value());
  CHECK_FALSE(json_int(parse_ok("[1]")).has_value());
  CHECK_FALSE(json_int(parse_ok("true")).has_value());

  const auto o = parse_ok(R"({"a": [1, "x", {"b": null}], "c": {}, "a": 2, "d": []})");
  REQUIRE(o.is_object());
  CHECK(o.size() == 3);
  CHECK(json_int(*json_member(o, "a")) == 2);  // the last of a repeated name, as Go
  const auto first_a = parse_ok(R"({"a": [1, "x", {"b": null}]})");
  CHECK(json_member(first_a, "a")->size() == 3);
  CHECK(json_member(json_member(first_a, "a")->at(2), "b")->is_null());
  CHECK(json_member(o, "c")->empty());
  CHECK(json_member(o, "d")->empty());
  CHECK(json_member(o, "zz") == nullptr);
  CHECK(json_member(*json_member(o, "a"), "x") == nullptr);  // not an object
  CHECK(json_member(parse_ok("[\"a\"]"), "a") == nullptr);
}

TEST_CASE("etcd json: string escapes, \\u and surrogate pairs") {
  CHECK(parse_ok(R"("a\"b\\c\/d\b\f\n\r\t")") == "a\"b\\c/d\b\f\n\r\t");
  CHECK(parse_ok(R"("\u0041\u00e9\u20AC")") == "A\xC3\xA9\xE2\x82\xAC");
  CHECK(parse_ok(R"("\u0000")") == std::string(1, '\0'));
  CHECK(parse_ok(R"("\ud83d\ude00")") == "\xF0\x9F\x98\x80");
  CHECK(parse_ok("\"caf\xC3\xA9\"") == "caf\xC3\xA9");  // raw UTF-8 passes through
  for (const char* bad : {R"("\ud83d")", R"("\ude00")", R"("\ud83d\u0041")", R"("\ud83dx")", R"("\u12")", R"("\u12g4")",
                          R"("\x")", "\"a\nb\"", "\"tab\there\"", "\"open", "\"\xFF\"", "\"\xC3\""}) {
    CHECK_MESSAGE(!parse_json(bad, k_big), bad);
  }
}

TEST_CASE("etcd json: malformed input is rejected, never thrown or crashed on") {
  for (const char* bad : {"",
                          " ",
                          "{",
                          "}",
                          "[",
                          "[1,]",
                          "[,1]",
                          "{\"a\"}",
                          "{\"a\":}",
                          "{\"a\" 1}",
                          "{a:1}",
                          "{\"a\":1,}",
                          "{\"a\":1 \"b\":2}",
                          "[1 2]",
                          "tru",
                          "nul",
                          "True",
                          "01",
                          "-",
                          "1.",
                          ".5",
                          "1e",
                          "1e+",
                          "+1",
                          "0x10",
                          "NaN",
                          "\"a\" \"b\"",
                          "{} {}",
                          "[1]]",
                          "'a'",
                          "\x01"}) {
    CHECK_MESSAGE(!parse_json(bad, k_big), bad);
  }
  // Every truncation of a real reply is malformed as a whole and "need more" as a prefix.
  const std::string reply = R"({"result":{"header":{"revision":"6"},"events":[{"kv":{"key":"dw==","value":"MQ=="}}]}})";
  for (std::size_t i = 0; i < reply.size(); ++i) {
    CHECK(!parse_json(reply.substr(0, i), k_big));
    CHECK(parse_json_prefix(reply.substr(0, i), k_big).status == JsonScan::NeedMore);
  }
}

TEST_CASE("etcd json: depth and size limits") {
  CHECK(parse_json(nested(k_json_max_depth), k_big).has_value());
  CHECK_FALSE(parse_json(nested(k_json_max_depth + 1), k_big).has_value());
  CHECK_FALSE(parse_json(nested(100000), 1 << 20).has_value());  // no stack overflow
  std::string deep_objects;
  for (std::size_t i = 0; i < k_json_max_depth + 1; ++i) deep_objects += "{\"a\":";
  deep_objects += "1" + std::string(k_json_max_depth + 1, '}');
  CHECK_FALSE(parse_json(deep_objects, k_big).has_value());
  // The same bounds on a stream's values, before any parsing.
  CHECK(parse_json_prefix(nested(k_json_max_depth), k_big).status == JsonScan::Complete);
  CHECK(parse_json_prefix(nested(k_json_max_depth + 1), k_big).status == JsonScan::Malformed);
  CHECK(parse_json_prefix(std::string(k_json_max_depth + 1, '['), k_big).status == JsonScan::Malformed);
  CHECK(parse_json_prefix(nested(100000), 1 << 20).status == JsonScan::Malformed);

  const std::string text = R"({"k":"0123456789"})";
  CHECK(parse_json(text, text.size()).has_value());
  CHECK_FALSE(parse_json(text, text.size() - 1).has_value());
  CHECK(parse_json_prefix(text, text.size()).status == JsonScan::Complete);
  // A value that cannot fit the limit is malformed, not "need more".
  CHECK(parse_json_prefix(text.substr(0, 10), 10).status == JsonScan::Malformed);
  CHECK(parse_json_prefix(text.substr(0, 10), 11).status == JsonScan::NeedMore);
  CHECK(parse_json_prefix(std::string(64, ' '), 16).status == JsonScan::Malformed);
}

TEST_CASE("etcd json: a stream of concatenated values is taken one at a time") {
  std::string stream = "{\"a\":1}\n{\"b\":[true]}\n  {\"c\"";
  auto first = parse_json_prefix(stream, k_big);
  REQUIRE(first.status == JsonScan::Complete);
  CHECK(json_int(first.value.at("a")) == 1);
  CHECK(first.used == 8);  // the newline after it too
  stream.erase(0, first.used);
  auto second = parse_json_prefix(stream, k_big);
  REQUIRE(second.status == JsonScan::Complete);
  CHECK(second.value.at("b").at(0) == true);
  stream.erase(0, second.used);
  CHECK(parse_json_prefix(stream, k_big).status == JsonScan::NeedMore);
  CHECK(parse_json_prefix("{\"a\":1}}", k_big).status == JsonScan::Complete);
  CHECK(parse_json_prefix("}{", k_big).status == JsonScan::Malformed);
  // A number at the end might continue; inside a container it cannot.
  CHECK(parse_json_prefix("12", k_big).status == JsonScan::NeedMore);
  CHECK(parse_json_prefix("12 ", k_big).status == JsonScan::Complete);
  CHECK(parse_json_prefix("", k_big).status == JsonScan::NeedMore);
  // Closers that do not match, or a value whose structure closes but is not JSON, are
  // malformed at once, not waited on.
  CHECK(parse_json_prefix("[1}", k_big).status == JsonScan::Malformed);
  CHECK(parse_json_prefix("{\"a\" 1}{", k_big).status == JsonScan::Malformed);
  CHECK(parse_json_prefix("\"a\\\"b\" 1", k_big).status == JsonScan::Complete);
  CHECK(parse_json_prefix("\"a\\\"b\" 1", k_big).value == "a\"b");
  CHECK(parse_json_prefix("true", k_big).status == JsonScan::NeedMore);
  CHECK(parse_json_prefix("true,", k_big).status == JsonScan::Complete);
  CHECK(parse_json_prefix("[\"]\"]", k_big).value.at(0) == "]");
}

TEST_CASE("etcd json: base64 round trips and rejects what is not canonical") {
  CHECK(base64_encode("") == "");
  CHECK(base64_encode("f") == "Zg==");
  CHECK(base64_encode("fo") == "Zm8=");
  CHECK(base64_encode("foo") == "Zm9v");
  CHECK(base64_encode("foobar") == "Zm9vYmFy");
  CHECK(base64_encode("\xFB\xFF") == "+/8=");
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (std::size_t n = 0; n <= all.size(); n += 7) {
    const auto s = all.substr(all.size() - n);
    CHECK(base64_decode(base64_encode(s)) == s);
  }
  CHECK(base64_decode("") == "");
  CHECK(base64_decode("Zm9vYmFy") == "foobar");
  // OpenSSL's decoder alone takes most of these: blanks at the ends, '=' anywhere, non-zero
  // bits under the padding.
  for (const char* bad : {"Zg",       "Zg=",     "Zm9",    "Z===", "====",         "Zg==Zg==", "Zh==",     "Zm9=",
                          "Zm9v!A==", "Zm 9v",   "Zm9v\n", "Zm-_", "=Zm9",         " Zm9v",    "Zm9v    ", "\nZm9v",
                          "Zm9v==",   "Zm9vYg=", "Zm=v",   "Z=9v", "Zm9vYmFy====", "Zg==\r\n"}) {
    CHECK_MESSAGE(!base64_decode(bad), bad);
  }
  CHECK_FALSE(base64_decode(std::string_view("Zm9v\0AAA", 8)));
  // Longer than the block OpenSSL is given at once (3 MiB): no padding inside.
  std::string big(std::size_t{3} << 20 | 4, '\0');
  std::mt19937 rng(7);
  for (auto& c : big) c = static_cast<char>(rng());
  const auto text = base64_encode(big);
  CHECK(text.size() == (big.size() + 2) / 3 * 4);
  CHECK(text.find('=') == text.size() - 2);
  CHECK(base64_decode(text) == big);
}

TEST_CASE("etcd json: requests are the JSON the gateway takes") {
  auto put = parse_ok(etcd::put_request("foo", "bar"));
  CHECK(put.at("key").get<std::string>() == "Zm9v");
  CHECK(put.at("value").get<std::string>() == "YmFy");
  CHECK(put.contains("lease") == false);
  CHECK(parse_ok(etcd::put_request("k", "", 7587)).at("lease").get<std::string>() == "7587");
  CHECK(parse_ok(etcd::put_request("k", "")).at("value").get<std::string>() == "");

  auto range = parse_ok(etcd::range_request("a/", etcd::prefix_end("a/"), true));
  CHECK(range.at("key").get<std::string>() == b64("a/"));
  CHECK(range.at("range_end").get<std::string>() == b64("a0"));
  CHECK(range.at("keys_only").get<bool>());
  CHECK(parse_ok(etcd::range_request("k")).contains("range_end") == false);
  CHECK(etcd::prefix_end("a\xFF") == "b");
  CHECK(etcd::prefix_end("\xFF\xFF") == std::string(1, '\0'));
  CHECK(etcd::prefix_end("") == std::string(1, '\0'));

  CHECK(parse_ok(etcd::delete_request("k")).at("key").get<std::string>() == b64("k"));

  auto txn = parse_ok(etcd::txn_range_request({"a", "b"}, true));
  REQUIRE(txn.at("success").size() == 2);
  CHECK(txn.at("success")[1].at("request_range").at("key").get<std::string>() == b64("b"));
  CHECK(txn.contains("compare") == false);

  auto grant = parse_ok(etcd::lease_grant_request(5));
  CHECK(json_int(grant.at("TTL")) == 5);
  CHECK(json_int(parse_ok(etcd::lease_request(2324035569494056463)).at("ID")) == 2324035569494056463);

  auto watch = parse_ok(etcd::watch_create_request("w", 6, etcd::WatchFilter::PutsOnly));
  REQUIRE(watch.contains("create_request"));
  const JsonValue& create = watch.at("create_request");
  CHECK(create.at("key").get<std::string>() == b64("w"));
  CHECK(json_int(create.at("start_revision")) == 6);
  CHECK(create.at("filters").at(0).get<std::string>() == "NODELETE");
  CHECK(parse_ok(etcd::watch_create_request("w", 0, etcd::WatchFilter::DeletesOnly))
            .at("create_request")
            .at("filters")
            .at(0)
            .get<std::string>() == "NOPUT");
  CHECK(parse_ok(etcd::watch_create_request("w", 0)).at("create_request").contains("filters") == false);
  CHECK(parse_ok(etcd::watch_create_request("w", 0)).at("create_request").contains("range_end") == false);
  auto prefix = parse_ok(etcd::watch_create_request("job/", 3, etcd::WatchFilter::All, etcd::prefix_end("job/")));
  CHECK(prefix.at("create_request").at("range_end").get<std::string>() == b64("job0"));
}

TEST_CASE("etcd json: compare-set and swap txns compare what torch's semantics need") {
  // expected non-empty: one VALUE compare; a missing key fails it.
  auto cas = parse_ok(etcd::compare_set_request("k", "old", "new"));
  const auto& cmp = cas.at("compare").at(0);
  CHECK(cmp.at("target").get<std::string>() == "VALUE");
  CHECK(cmp.at("value").get<std::string>() == b64("old"));
  CHECK(cmp.at("result").get<std::string>() == "EQUAL");
  CHECK(cas.at("success").at(0).at("request_put").at("value").get<std::string>() == b64("new"));
  CHECK(cas.at("failure").at(0).contains("request_range"));

  // expected empty: CREATE == 0, else a nested txn on VALUE == "".
  auto create = parse_ok(etcd::compare_set_request("k", "", "new"));
  CHECK(create.at("compare").at(0).at("target").get<std::string>() == "CREATE");
  CHECK(json_int(create.at("compare").at(0).at("create_revision")) == 0);
  REQUIRE(create.at("failure").at(0).contains("request_txn"));
  const JsonValue& inner = create.at("failure").at(0).at("request_txn");
  CHECK(inner.at("compare").at(0).at("target").get<std::string>() == "VALUE");
  CHECK(inner.at("compare").at(0).at("value").get<std::string>() == "");

  auto swap = parse_ok(etcd::swap_request("k", 42, "v"));
  CHECK(swap.at("compare").at(0).at("target").get<std::string>() == "MOD");
  CHECK(json_int(swap.at("compare").at(0).at("mod_revision")) == 42);
  CHECK(swap.at("success").at(0).at("request_put").contains("lease") == false);
  // An election's create: put only when the key does not exist, attached to the lease.
  auto leased = parse_ok(etcd::swap_request("coordinator", 0, "me", 7587878));
  CHECK(json_int(leased.at("compare").at(0).at("mod_revision")) == 0);
  CHECK(json_int(leased.at("success").at(0).at("request_put").at("lease")) == 7587878);
}

// Replies below are copied from etcd 3.4.23's gateway (cluster and member ids shortened).

TEST_CASE("etcd json: range replies, with and without kvs, empty value left out") {
  auto r = etcd::parse_range_response(parse_ok(
      R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"2","raft_term":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"})"));
  REQUIRE(r);
  CHECK(r->revision == 2);
  REQUIRE(r->kvs.size() == 1);
  CHECK(r->kvs[0].key == "foo");
  CHECK(r->kvs[0].value == "bar");
  CHECK(r->kvs[0].mod_revision == 2);
  CHECK(r->kvs[0].create_revision == 2);
  CHECK(r->kvs[0].version == 1);

  auto missing =
      etcd::parse_range_response(parse_ok(R"({"header":{"cluster_id":"1","revision":"2","raft_term":"2"}})"));
  REQUIRE(missing);
  CHECK(missing->kvs.empty());
  CHECK(missing->revision == 2);

  auto empty_value = etcd::parse_range_response(parse_ok(
      R"({"header":{"revision":"3"},"kvs":[{"key":"ZQ==","create_revision":"3","mod_revision":"3","version":"1"}],"count":"1"})"));
  REQUIRE(empty_value);
  CHECK(empty_value->kvs.at(0).value == "");

  // Numbers instead of strings are taken too; wrong types and bad base64 are not.
  CHECK(etcd::parse_range_response(parse_ok(R"({"header":{"revision":7}})"))->revision == 7);
  CHECK_FALSE(etcd::parse_range_response(parse_ok(R"({"header":{"revision":"x"}})")));
  CHECK_FALSE(etcd::parse_range_response(parse_ok(R"({"kvs":[{"key":"!!"}]})")));
  CHECK_FALSE(etcd::parse_range_response(parse_ok(R"({"kvs":{}})")));
  CHECK_FALSE(etcd::parse_range_response(parse_ok(R"({"kvs":[{"key":"Zm9v","mod_revision":true}]})")));
  CHECK_FALSE(etcd::parse_range_response(parse_ok("[]")));
}

TEST_CASE("etcd json: txn replies: succeeded, failed (field left out), nested") {
  auto ok = etcd::parse_txn_response(parse_ok(
      R"({"header":{"cluster_id":"3","member_id":"3","revision":"4","raft_term":"2"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"4"}}}]})"));
  REQUIRE(ok);
  CHECK(ok->succeeded);
  CHECK(ok->revision == 4);
  REQUIRE(ok->responses.size() == 1);
  CHECK(ok->responses[0].kind == etcd::TxnOp::Kind::Put);
  CHECK(etcd::compare_set_result(*ok, "old", "new") == "new");

  auto failed = etcd::parse_txn_response(parse_ok(
      R"({"header":{"cluster_id":"3","member_id":"3","revision":"3","raft_term":"2"},"responses":[{"response_range":{"header":{"revision":"3"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}}]})"));
  REQUIRE(failed);
  CHECK_FALSE(failed->succeeded);
  CHECK(etcd::compare_set_result(*failed, "old", "new") == "bar");
  auto swap = etcd::swap_result(*failed);
  REQUIRE(swap);
  CHECK_FALSE(swap->succeeded);
  REQUIRE(swap->current);
  CHECK(swap->current->mod_revision == 2);

  // Missing key, expected not empty: the range is empty and torch answers `expected`.
  auto missing = etcd::parse_txn_response(
      parse_ok(R"({"header":{"revision":"10"},"responses":[{"response_range":{"header":{"revision":"10"}}}]})"));
  REQUIRE(missing);
  CHECK(etcd::compare_set_result(*missing, "old", "new") == "old");
  CHECK_FALSE(etcd::swap_result(*missing)->current);

  // expected empty, key present with an empty value: the nested txn wrote.
  auto nested_ok = etcd::parse_txn_response(parse_ok(
      R"({"header":{"cluster_id":"3","member_id":"3","revision":"13","raft_term":"2"},"responses":[{"response_txn":{"header":{},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"13"}}}]}}]})"));
  REQUIRE(nested_ok);
  REQUIRE(nested_ok->responses.at(0).kind == etcd::TxnOp::Kind::Txn);
  CHECK(etcd::compare_set_result(*nested_ok, "", "d") == "d");
  auto nested_failed = etcd::parse_txn_response(parse_ok(
      R"({"header":{"revision":"13"},"responses":[{"response_txn":{"header":{},"responses":[{"response_range":{"header":{"revision":"13"},"kvs":[{"key":"Zm9v","value":"YmFy"}],"count":"1"}}]}}]})"));
  REQUIRE(nested_failed);
  CHECK(etcd::compare_set_result(*nested_failed, "", "d") == "bar");

  // Several ranges, one missing.
  auto ranges = etcd::parse_txn_response(parse_ok(
      R"({"header":{"revision":"10"},"succeeded":true,"responses":[{"response_range":{"header":{"revision":"10"},"kvs":[{"key":"YQ==","create_revision":"10","mod_revision":"10","version":"1","value":"MQ=="}],"count":"1"}},{"response_range":{"header":{"revision":"10"}}},{"response_range":{"header":{"revision":"10"},"kvs":[{"key":"Yg==","create_revision":"9","mod_revision":"9","version":"1","value":"MQ=="}],"count":"1"}}]})"));
  REQUIRE(ranges);
  REQUIRE(ranges->responses.size() == 3);
  CHECK(ranges->responses[1].kvs.empty());
  CHECK(ranges->responses[2].kvs.at(0).key == "b");

  CHECK_FALSE(etcd::parse_txn_response(parse_ok(R"({"responses":[{"response_unknown":{}}]})")));
  CHECK_FALSE(etcd::parse_txn_response(parse_ok(R"({"succeeded":"yes"})")));
  CHECK_FALSE(etcd::parse_txn_response(parse_ok(R"({"responses":[{"response_txn":{"responses":7}}]})")));
  // A reply of some other shape gives no compare-set answer.
  etcd::TxnResult two;
  two.responses.resize(2);
  CHECK_FALSE(etcd::compare_set_result(two, "a", "b"));
  etcd::TxnResult bad_nested;
  bad_nested.responses.resize(1);
  bad_nested.responses[0].kind = etcd::TxnOp::Kind::Txn;
  CHECK_FALSE(etcd::compare_set_result(bad_nested, "a", "b"));
}

TEST_CASE("etcd json: deleterange, lease and error replies") {
  CHECK(etcd::parse_delete_response(parse_ok(R"({"header":{"revision":"7","raft_term":"2"},"deleted":"1"})")) == 1);
  CHECK(etcd::parse_delete_response(parse_ok(R"({"header":{"revision":"10","raft_term":"2"}})")) == 0);

  auto grant = etcd::parse_lease_response(parse_ok(
      R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"4","raft_term":"2"},"ID":"2324035569494056463","TTL":"5"})"));
  REQUIRE(grant);
  CHECK(grant->id == 2324035569494056463);
  CHECK(grant->ttl == 5);
  CHECK(grant->error.empty());

  // keepalive is a stream: each message wraps its reply in "result"; an unknown lease has no TTL.
  const auto alive = parse_ok(
      R"({"result":{"header":{"cluster_id":"3","member_id":"3","revision":"4","raft_term":"2"},"ID":"2324035569494056467","TTL":"3"}})");
  REQUIRE(etcd::stream_result(alive) != nullptr);
  CHECK(etcd::parse_lease_response(*etcd::stream_result(alive))->ttl == 3);
  const auto gone = parse_ok(R"({"result":{"header":{"revision":"4","raft_term":"2"},"ID":"12345"}})");
  CHECK(etcd::parse_lease_response(*etcd::stream_result(gone))->ttl == 0);
  CHECK(etcd::stream_result(parse_ok(R"({"result":1})")) == nullptr);
  CHECK(etcd::stream_result(parse_ok("{}")) == nullptr);

  auto error = etcd::parse_error(parse_ok(
      R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})"));
  REQUIRE(error);
  CHECK(error->code == 5);
  CHECK(error->message == "etcdserver: requested lease not found");
  auto b64_error = etcd::parse_error(parse_ok(
      R"({"error":"illegal base64 data at input byte 0","message":"illegal base64 data at input byte 0","code":3})"));
  CHECK(b64_error->code == 3);
  // A stream's error (grpc-gateway v1).
  auto stream_error = etcd::parse_error(parse_ok(
      R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})"));
  REQUIRE(stream_error);
  CHECK(stream_error->code == 14);
  CHECK(stream_error->message == "etcdserver: no leader");
  CHECK_FALSE(etcd::parse_error(parse_ok(R"({"header":{}})")));
}

TEST_CASE("etcd json: authenticate: request, token, and etcd's refusals") {
  CHECK(etcd::authenticate_request("job", "p\"w\\1") == R"({"name":"job","password":"p\"w\\1"})");
  CHECK_FALSE(etcd::authenticate_request("job", std::string("\xFF\xFE", 2)).has_value());  // proto strings are UTF-8
  // Replies copied from etcd 3.4.23.
  CHECK(
      etcd::parse_authenticate_response(parse_ok(
          R"({"header":{"cluster_id":"6001611773266757492","member_id":"13049071153751544597","revision":"1","raft_term":"2"},"token":"SQOwLWYTIyVXwIno.14"})")) ==
      "SQOwLWYTIyVXwIno.14");
  CHECK_FALSE(etcd::parse_authenticate_response(parse_ok(R"({"header":{}})")));
  CHECK_FALSE(etcd::parse_authenticate_response(parse_ok(R"({"token":7})")));
  auto wrong = etcd::parse_error(parse_ok(
      R"({"error":"etcdserver: authentication failed, invalid user ID or password","message":"etcdserver: authentication failed, invalid user ID or password","code":3})"));
  REQUIRE(wrong);
  CHECK(wrong->code == 3);
  auto expired = etcd::parse_error(
      parse_ok(R"({"error":"etcdserver: invalid auth token","message":"etcdserver: invalid auth token","code":16})"));
  REQUIRE(expired);
  CHECK(expired->code == 16);
  // A watch refused for its token is a cancelled creation; its reason is gRPC's text.
  const auto refused = parse_ok(
      R"({"result":{"header":{"cluster_id":"6001611773266757492","member_id":"13049071153751544597","revision":"1","raft_term":"2"},"watch_id":"-1","created":true,"canceled":true,"cancel_reason":"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"}})");
  const auto watch = etcd::parse_watch_response(*etcd::stream_result(refused));
  REQUIRE(watch);
  CHECK(watch->canceled);
  CHECK(watch->compact_revision == 0);
  CHECK(watch->cancel_reason == "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token");
}

TEST_CASE("etcd json: watch stream messages: created, PUT (type left out), DELETE, compaction") {
  auto created = etcd::parse_watch_response(*etcd::stream_result(parse_ok(
      R"({"result":{"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"8","raft_term":"2"},"watch_id":"1","created":true}})")));
  REQUIRE(created);
  CHECK(created->created);
  CHECK(created->watch_id == 1);
  CHECK(created->revision == 8);
  CHECK(created->events.empty());

  auto put = etcd::parse_watch_response(*etcd::stream_result(parse_ok(
      R"({"result":{"header":{"cluster_id":"3","member_id":"3","revision":"6","raft_term":"2"},"events":[{"kv":{"key":"dw==","create_revision":"6","mod_revision":"6","version":"1","value":"MQ=="}}]}})")));
  REQUIRE(put);
  REQUIRE(put->events.size() == 1);
  CHECK(put->events[0].type == etcd::WatchEvent::Type::Put);
  CHECK(put->events[0].kv.key == "w");
  CHECK(put->events[0].kv.value == "1");
  CHECK(put->events[0].kv.mod_revision == 6);

  auto del = etcd::parse_watch_response(*etcd::stream_result(parse_ok(
      R"({"result":{"header":{"cluster_id":"3","member_id":"3","revision":"7","raft_term":"2"},"events":[{"type":"DELETE","kv":{"key":"dw==","mod_revision":"7"}}]}})")));
  REQUIRE(del);
  CHECK(del->events.at(0).type == etcd::WatchEvent::Type::Delete);
  CHECK(del->events.at(0).kv.value.empty());

  auto compacted = etcd::parse_watch_response(*etcd::stream_result(parse_ok(
      R"({"result":{"header":{"cluster_id":"3","member_id":"3","raft_term":"2"},"canceled":true,"compact_revision":"9"}})")));
  REQUIRE(compacted);
  CHECK(compacted->canceled);
  CHECK(compacted->compact_revision == 9);
  CHECK(compacted->revision == 0);

  CHECK(etcd::parse_watch_response(parse_ok(R"({"events":[{"type":1,"kv":{}}]})"))->events.at(0).type ==
        etcd::WatchEvent::Type::Delete);
  CHECK_FALSE(etcd::parse_watch_response(parse_ok(R"({"events":[{"type":"EXPIRE","kv":{}}]})")));
  CHECK_FALSE(etcd::parse_watch_response(parse_ok(R"({"events":[{"type":"PUT"}]})")));
  CHECK_FALSE(etcd::parse_watch_response(parse_ok(R"({"events":[7]})")));
  CHECK_FALSE(etcd::parse_watch_response(parse_ok(R"({"canceled":"true"})")));
}

TEST_CASE("etcd json: random damage to real replies is parsed or rejected, never crashed on") {
  const std::vector<std::string> replies = {
      R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"2","raft_term":"2"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"})",
      R"({"header":{"revision":"13"},"responses":[{"response_txn":{"header":{},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"13"}}}]}}]})",
      R"({"result":{"header":{"revision":"7","raft_term":"2"},"events":[{"type":"DELETE","kv":{"key":"dw==","mod_revision":"7"}}]}})",
      R"({"error":{"grpc_code":14,"http_code":503,"message":"transport is closing","http_status":"Service Unavailable"}})",
      R"({"s":"\ud83d\ude00\u00e9\n","n":[-1.5e3,0,true,false,null]})",
  };
  const std::string alphabet = "{}[]\":,\\u0123456789abcdefeE+-. \n\ttruefalsenull=";
  std::mt19937 rng(20240611);
  int overreach = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text = replies[rng() % replies.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0: text[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(at, 1 + rng() % 8); break;
        case 2: text.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: text.insert(at, text.substr(rng() % text.size(), rng() % 16)); break;
      }
    }
    // Every path through the etcd readers, whatever the parser made of it.
    if (auto v = parse_json(text, k_big)) {
      (void)etcd::parse_range_response(*v);
      (void)etcd::parse_delete_response(*v);
      (void)etcd::parse_error(*v);
      if (auto txn = etcd::parse_txn_response(*v)) {
        (void)etcd::compare_set_result(*txn, "a", "b");
        (void)etcd::swap_result(*txn);
      }
      (void)etcd::parse_lease_response(*v);
      if (const JsonValue* result = etcd::stream_result(*v)) (void)etcd::parse_watch_response(*result);
    }
    if (parse_json_prefix(text, 64).used > text.size()) ++overreach;
  }
  CHECK(overreach == 0);
}

TEST_CASE("tls ca bundle: the distribution's bundle is found where no cacert and no SSL_CERT_* says otherwise") {
  using rankrun::rendezvous::tls::system_ca_bundle;
  const auto only = [](std::string path) { return [path](const std::string& p) { return p == path; }; };
  CHECK(system_ca_bundle(false, only("/etc/ssl/certs/ca-certificates.crt")) == "/etc/ssl/certs/ca-certificates.crt");
  CHECK(system_ca_bundle(false, only("/etc/pki/tls/certs/ca-bundle.crt")) == "/etc/pki/tls/certs/ca-bundle.crt");
  CHECK(system_ca_bundle(false, only("/etc/ssl/ca-bundle.pem")) == "/etc/ssl/ca-bundle.pem");
  CHECK(system_ca_bundle(false, only("/etc/ssl/cert.pem")) == "/etc/ssl/cert.pem");
  CHECK(system_ca_bundle(false, [](const std::string&) { return true; }) == "/etc/ssl/certs/ca-certificates.crt");
  CHECK(system_ca_bundle(false, [](const std::string&) { return false; }).empty());
  // SSL_CERT_FILE or SSL_CERT_DIR set: OpenSSL's own choice, nothing added
  CHECK(system_ca_bundle(true, [](const std::string&) { return true; }).empty());
}
