#pragma once
// Pure JSON for etcd's v3 HTTP/JSON gateway (etcd_client.hpp): bounded parsing (nlohmann-json)
// and the few etcd messages the client sends and reads, their bytes in base64 (etcd_base64.hpp).
// No I/O here, so that every reply shape (copied from a real etcd) is tested without one.
//
// The gateway is grpc-gateway over etcd's gRPC API: fields use the proto names ("mod_revision"),
// bytes are base64, int64s are JSON strings ("revision":"12"), and fields holding their default
// (0, false, "", PUT) are left out altogether.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rankrun::rendezvous {

/// Nesting of arrays and objects beyond this is malformed (etcd's replies nest 6 deep).
constexpr std::size_t k_json_max_depth = 32;

/// One JSON value. A repeated name in an object keeps the last value, as Go does.
using JsonValue = nlohmann::json;

/// The member `name` of an object; nullptr when absent or when `value` is not an object.
const JsonValue* json_member(const JsonValue& value, std::string_view name);
/// An integer written as a JSON number or, as etcd writes int64s, as a string of one ("-12");
/// nullopt for anything else (fractions, exponents, "+1", out of int64's range).
std::optional<std::int64_t> json_int(const JsonValue& value);

/// The whole of `text` as one JSON value (blanks around it allowed). nullopt when malformed,
/// nested deeper than k_json_max_depth, or longer than `max_size` bytes. Never throws (but
/// std::bad_alloc).
std::optional<JsonValue> parse_json(std::string_view text, std::size_t max_size);

enum class JsonScan : std::uint8_t { Complete, NeedMore, Malformed };

struct JsonPrefix {
  JsonScan status = JsonScan::NeedMore;
  /// Bytes taken from the front of the input (the value and the blanks after it); 0 unless
  /// Complete.
  std::size_t used = 0;
  JsonValue value;
};

/// The first value of a stream of concatenated JSON values (etcd's watch and keep-alive
/// streams): NeedMore while `text` ends inside it, Malformed when it is not JSON, nests deeper
/// than k_json_max_depth or would take more than `max_size` bytes.
JsonPrefix parse_json_prefix(std::string_view text, std::size_t max_size);

namespace etcd {

/// The most operations etcd accepts in one txn (its --max-txn-ops default).
constexpr std::size_t k_max_txn_ops = 128;

/// One key as etcd reports it (mvccpb.KeyValue); fields etcd left out are 0 or empty.
struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;
};

/// A gateway error: {"error":"...","message":"...","code":5} (HTTP status other than 200), or
/// in a stream {"error":{"grpc_code":5,"message":"..."}}. `code` is the gRPC status code.
struct Error {
  std::int64_t code = 0;
  std::string message;
};

// --- requests: the JSON body of a POST to the path named -------------------------------------

/// /v3/kv/put; `lease` 0: none.
std::string put_request(std::string_view key, std::string_view value, std::int64_t lease = 0);
/// /v3/kv/range: `key` alone, or [key, range_end) (see prefix_end). keys_only leaves values out.
std::string range_request(std::string_view key, std::string_view range_end = {}, bool keys_only = false);
/// The range_end that makes a range cover every key starting with `prefix` ("\0", every key,
/// for an empty prefix or one of 0xff bytes only), as etcd's clientv3.GetPrefixRangeEnd.
std::string prefix_end(std::string_view prefix);
/// /v3/kv/deleterange of one key.
std::string delete_request(std::string_view key);
/// /v3/kv/txn reading each key (at most k_max_txn_ops) at one revision; the i-th response is
/// the i-th key's range.
std::string txn_range_request(const std::vector<std::string>& keys, bool keys_only);
/// /v3/kv/txn putting every pair (at most k_max_txn_ops) at one revision, in order.
std::string txn_put_request(const std::vector<std::pair<std::string, std::string>>& kvs);
/// /v3/kv/txn doing torch's compare-set in one step (see compare_set_result): expected empty:
/// put when the key does not exist, else (nested txn) when its value is empty, else read it;
/// otherwise put when the value equals `expected`, else read it.
std::string compare_set_request(std::string_view key, std::string_view expected, std::string_view desired);
/// /v3/kv/txn: put `value` when the key's mod_revision is `mod_revision` (0: the key does not
/// exist), else read the key. The step of a read-modify-write retry loop.
std::string swap_request(std::string_view key, std::int64_t mod_revision, std::string_view value,
                         std::int64_t lease = 0);
/// /v3/lease/grant; etcd picks the id.
std::string lease_grant_request(std::int64_t ttl_seconds);
/// /v3/lease/keepalive and /v3/lease/revoke.
std::string lease_request(std::int64_t id);
/// /v3/auth/authenticate; nullopt when `name` or `password` is not UTF-8 (proto strings are).
std::optional<std::string> authenticate_request(std::string_view name, std::string_view password);

enum class WatchFilter : std::uint8_t { All, PutsOnly, DeletesOnly };
/// One create_request message of /v3/watch (several may follow each other in one body).
/// `range_end` (see prefix_end): every key in [key, range_end) instead of `key` alone.
std::string watch_create_request(std::string_view key, std::int64_t start_revision,
                                 WatchFilter filter = WatchFilter::All, std::string_view range_end = {});

// --- replies: nullopt when the shape is not etcd's ---------------------------------------------

/// The error a reply carries, if any.
std::optional<Error> parse_error(const JsonValue& reply);
/// The "result" of one message of a stream ({"result":{...}}); nullptr when there is none.
const JsonValue* stream_result(const JsonValue& message);

struct RangeResult {
  /// The header's revision: the store's revision the range was read at.
  std::int64_t revision = 0;
  std::vector<KeyValue> kvs;
};
std::optional<RangeResult> parse_range_response(const JsonValue& reply);

/// auth/authenticate's token (sent as the Authorization header of the requests after it).
std::optional<std::string> parse_authenticate_response(const JsonValue& reply);

/// deleterange's number of keys deleted.
std::optional<std::int64_t> parse_delete_response(const JsonValue& reply);

struct TxnOp;
struct TxnResult {
  std::int64_t revision = 0;
  bool succeeded = false;
  /// One per operation of the branch that ran.
  std::vector<TxnOp> responses;
};
struct TxnOp {
  enum class Kind : std::uint8_t { Range, Put, DeleteRange, Txn };
  Kind kind = Kind::Range;
  std::vector<KeyValue> kvs;   // Range
  std::int64_t deleted = 0;    // DeleteRange
  std::vector<TxnResult> txn;  // Txn: exactly one (a vector because the types nest)
};
std::optional<TxnResult> parse_txn_response(const JsonValue& reply);

/// The value stored after compare_set_request's txn: `desired` when it wrote, the key's value
/// when it did not, `expected` when the key does not exist (torch's answer; nothing written).
std::optional<std::string> compare_set_result(const TxnResult& txn, std::string_view expected,
                                              std::string_view desired);

struct SwapResult {
  bool succeeded = false;
  /// When it did not write: the key as it is now (nullopt: it does not exist).
  std::optional<KeyValue> current;
};
std::optional<SwapResult> swap_result(const TxnResult& txn);

/// lease/grant's reply, or the "result" of a lease/keepalive message. ttl 0 from keepalive:
/// the lease is gone. `error` is grant's own error field.
struct LeaseResult {
  std::int64_t id = 0;
  std::int64_t ttl = 0;
  std::string error;
};
std::optional<LeaseResult> parse_lease_response(const JsonValue& reply);

struct WatchEvent {
  enum class Type : std::uint8_t { Put, Delete };
  Type type = Type::Put;
  KeyValue kv;
};
/// The "result" of one /v3/watch message: a creation, events, or a cancellation (compaction:
/// compact_revision is the oldest revision still there).
struct WatchResult {
  std::int64_t revision = 0;
  std::int64_t watch_id = 0;
  bool created = false;
  bool canceled = false;
  std::int64_t compact_revision = 0;
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};
std::optional<WatchResult> parse_watch_response(const JsonValue& result);

}  // namespace etcd
}  // namespace rankrun::rendezvous
