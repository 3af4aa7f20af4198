#include "rendezvous/etcd_json.hpp"

#include "base/parse_number.hpp"
#include "rendezvous/etcd_base64.hpp"

#include <limits>

namespace rankrun::rendezvous {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Where the first JSON value of `text` ends, by its structure alone (nlohmann's parser does
// not say how much it read): the offset just past it; 0 when `text` ends inside it (a number
// or a literal reaching the end might go on); nullopt when it cannot be a value (a closer that
// does not match, nesting beyond k_json_max_depth). The value itself is checked by parsing it.
std::optional<std::size_t> first_value_end(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size() && is_blank(text[pos])) ++pos;
  if (pos == text.size()) return 0;
  const char first = text[pos];
  if (first != '{' && first != '[' && first != '"') {
    // A scalar: up to the first byte that cannot be part of one (a closer here is none).
    const std::size_t start = pos;
    while (pos < text.size() && !is_blank(text[pos]) &&
           std::string_view(",:[]{}\"").find(text[pos]) == std::string_view::npos) {
      ++pos;
    }
    if (pos == start) return std::nullopt;
    return pos == text.size() ? 0 : pos;
  }
  std::string closers;  // what each open container needs, innermost last
  bool in_string = false;
  bool escaped = false;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        if (closers.empty()) return pos + 1;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (closers.size() >= k_json_max_depth) return std::nullopt;
      closers.push_back(c == '{' ? '}' : ']');
    } else if (c == '}' || c == ']') {
      if (closers.empty() || closers.back() != c) return std::nullopt;
      closers.pop_back();
      if (closers.empty()) return pos + 1;
    }
  }
  return 0;
}

}  // namespace

const JsonValue* json_member(const JsonValue& value, std::string_view name) {
  if (!value.is_object()) return nullptr;
  const auto it = value.find(std::string(name));
  return it == value.end() ? nullptr : &*it;
}

std::optional<std::int64_t> json_int(const JsonValue& value) {
  if (value.is_number_unsigned()) {
    const auto n = value.get<std::uint64_t>();
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(n);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_string()) return parse_number<std::int64_t>(value.get_ref<const std::string&>());
  return std::nullopt;
}

std::optional<JsonValue> parse_json(std::string_view text, std::size_t max_size) {
  if (text.size() > max_size) return std::nullopt;
  // nlohmann's parser keeps its own stack (no recursion), so deep input cannot overflow ours;
  // the callback refuses containers past the bound (depth counts the containers around one).
  bool too_deep = false;
  const auto bound = [&too_deep](int depth, JsonValue::parse_event_t event, JsonValue&) {
    if ((event == JsonValue::parse_event_t::object_start || event == JsonValue::parse_event_t::array_start) &&
        static_cast<std::size_t>(depth) >= k_json_max_depth) {
      too_deep = true;
    }
    return !too_deep;
  };
  try {
    JsonValue value = JsonValue::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/false);
    if (too_deep || value.is_discarded()) return std::nullopt;
    return value;
  } catch (const JsonValue::exception&) {
    return std::nullopt;
  }
}

JsonPrefix parse_json_prefix(std::string_view text, std::size_t max_size) {
  JsonPrefix out;
  // Bytes past max_size cannot belong to an acceptable value: running out inside the window
  // then means "too large", not "need more".
  const std::string_view window = text.substr(0, max_size);
  const bool more_may_come = text.size() < max_size;
  const auto end = first_value_end(window);
  if (!end) {
    out.status = JsonScan::Malformed;
    return out;
  }
  if (*end == 0) {
    out.status = more_may_come ? JsonScan::NeedMore : JsonScan::Malformed;
    return out;
  }
  auto value = parse_json(window.substr(0, *end), max_size);
  if (!value) {
    out.status = JsonScan::Malformed;
    return out;
  }
  std::size_t used = *end;
  while (used < window.size() && is_blank(window[used])) ++used;
  out.status = JsonScan::Complete;
  out.used = used;
  out.value = std::move(*value);
  return out;
}

namespace etcd {
namespace {

// Writers. Keys and values are bytes: always base64. int64s as strings, the way etcd writes
// them (the gateway reads both).
std::string int_text(std::int64_t value) { return std::to_string(value); }

JsonValue put_body(std::string_view key, std::string_view value, std::int64_t lease = 0) {
  JsonValue out = JsonValue::object();
  out["key"] = base64_encode(key);
  out["value"] = base64_encode(value);
  if (lease != 0) out["lease"] = int_text(lease);
  return out;
}

JsonValue range_body(std::string_view key, std::string_view range_end = {}, bool keys_only = false) {
  JsonValue out = JsonValue::object();
  out["key"] = base64_encode(key);
  if (!range_end.empty()) out["range_end"] = base64_encode(range_end);
  if (keys_only) out["keys_only"] = true;
  return out;
}

JsonValue range_op(std::string_view key) { return JsonValue{{"request_range", range_body(key)}}; }

JsonValue put_op(std::string_view key, std::string_view value, std::int64_t lease = 0) {
  return JsonValue{{"request_put", put_body(key, value, lease)}};
}

// One element of a txn's "compare" list: `field` of `key` EQUAL `operand`.
JsonValue compare(std::string_view target, std::string_view key, std::string_view field, JsonValue operand) {
  JsonValue out = JsonValue::object();
  out["target"] = std::string(target);
  out["key"] = base64_encode(key);
  out[std::string(field)] = std::move(operand);
  out["result"] = "EQUAL";
  return out;
}

JsonValue txn_body(JsonValue compare_op, JsonValue success, JsonValue failure) {
  JsonValue out = JsonValue::object();
  out["compare"] = JsonValue::array({std::move(compare_op)});
  out["success"] = JsonValue::array({std::move(success)});
  out["failure"] = JsonValue::array({std::move(failure)});
  return out;
}

// The text of a request: compact, as etcd's own clients send it.
std::string text_of(const JsonValue& request) { return request.dump(); }

// Readers. A field etcd left out is its default; a field of the wrong type is malformed.
bool read_int(const JsonValue& object, std::string_view name, std::int64_t& out) {
  const JsonValue* v = json_member(object, name);
  if (v == nullptr) return true;
  const auto n = json_int(*v);
  if (!n) return false;
  out = *n;
  return true;
}

bool read_bool(const JsonValue& object, std::string_view name, bool& out) {
  const JsonValue* v = json_member(object, name);
  if (v == nullptr) return true;
  if (!v->is_boolean()) return false;
  out = v->get<bool>();
  return true;
}

bool read_text(const JsonValue& object, std::string_view name, std::string& out) {
  const JsonValue* v = json_member(object, name);
  if (v == nullptr) return true;
  if (!v->is_string()) return false;
  out = v->get_ref<const std::string&>();
  return true;
}

bool read_bytes(const JsonValue& object, std::string_view name, std::string& out) {
  const JsonValue* v = json_member(object, name);
  if (v == nullptr) return true;
  if (!v->is_string()) return false;
  auto decoded = base64_decode(v->get_ref<const std::string&>());
  if (!decoded) return false;
  out = std::move(*decoded);
  return true;
}

bool read_revision(const JsonValue& reply, std::int64_t& out) {
  const JsonValue* header = json_member(reply, "header");
  if (header == nullptr) return true;
  return header->is_object() && read_int(*header, "revision", out);
}

std::optional<KeyValue> parse_kv(const JsonValue& v) {
  if (!v.is_object()) return std::nullopt;
  KeyValue kv;
  if (!read_bytes(v, "key", kv.key) || !read_bytes(v, "value", kv.value) ||
      !read_int(v, "create_revision", kv.create_revision) || !read_int(v, "mod_revision", kv.mod_revision) ||
      !read_int(v, "version", kv.version) || !read_int(v, "lease", kv.lease)) {
    return std::nullopt;
  }
  return kv;
}

bool read_kvs(const JsonValue& reply, std::vector<KeyValue>& out) {
  const JsonValue* kvs = json_member(reply, "kvs");
  if (kvs == nullptr) return true;
  if (!kvs->is_array()) return false;
  for (const auto& item : *kvs) {
    auto kv = parse_kv(item);
    if (!kv) return false;
    out.push_back(std::move(*kv));
  }
  return true;
}

std::optional<TxnResult> parse_txn(const JsonValue& reply) {
  if (!reply.is_object()) return std::nullopt;
  TxnResult txn;
  if (!read_revision(reply, txn.revision) || !read_bool(reply, "succeeded", txn.succeeded)) return std::nullopt;
  const JsonValue* responses = json_member(reply, "responses");
  if (responses == nullptr) return txn;
  if (!responses->is_array()) return std::nullopt;
  for (const auto& item : *responses) {
    if (!item.is_object()) return std::nullopt;
    TxnOp op;
    if (const JsonValue* r = json_member(item, "response_range")) {
      op.kind = TxnOp::Kind::Range;
      if (!r->is_object() || !read_kvs(*r, op.kvs)) return std::nullopt;
    } else if (const JsonValue* p = json_member(item, "response_put")) {
      op.kind = TxnOp::Kind::Put;
      if (!p->is_object()) return std::nullopt;
    } else if (const JsonValue* d = json_member(item, "response_delete_range")) {
      op.kind = TxnOp::Kind::DeleteRange;
      if (!d->is_object() || !read_int(*d, "deleted", op.deleted)) return std::nullopt;
    } else if (const JsonValue* t = json_member(item, "response_txn")) {
      op.kind = TxnOp::Kind::Txn;
      auto inner = parse_txn(*t);  // depth is bounded by the parser's
      if (!inner) return std::nullopt;
      op.txn.push_back(std::move(*inner));
    } else {
      return std::nullopt;
    }
    txn.responses.push_back(std::move(op));
  }
  return txn;
}

}  // namespace

std::string put_request(std::string_view key, std::string_view value, std::int64_t lease) {
  return text_of(put_body(key, value, lease));
}

std::string range_request(std::string_view key, std::string_view range_end, bool keys_only) {
  return text_of(range_body(key, range_end, keys_only));
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = end.back();
    if (static_cast<unsigned char>(last) < 0xFF) {
      last = static_cast<char>(static_cast<unsigned char>(last) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string delete_request(std::string_view key) { return text_of(JsonValue{{"key", base64_encode(key)}}); }

std::string txn_range_request(const std::vector<std::string>& keys, bool keys_only) {
  JsonValue success = JsonValue::array();
  for (const auto& key : keys) success.push_back(JsonValue{{"request_range", range_body(key, {}, keys_only)}});
  return text_of(JsonValue{{"success", std::move(success)}});
}

std::string txn_put_request(const std::vector<std::pair<std::string, std::string>>& kvs) {
  JsonValue success = JsonValue::array();
  for (const auto& [key, value] : kvs) success.push_back(put_op(key, value));
  return text_of(JsonValue{{"success", std::move(success)}});
}

std::string compare_set_request(std::string_view key, std::string_view expected, std::string_view desired) {
  if (!expected.empty()) {
    // A value compare fails on a missing key, so "missing" lands in the failure branch with an
    // empty range.
    return text_of(
        txn_body(compare("VALUE", key, "value", base64_encode(expected)), put_op(key, desired), range_op(key)));
  }
  // Expected empty matches a missing key and an empty value alike; compares are AND-ed, so the
  // second one is a nested txn in the failure branch.
  JsonValue inner = txn_body(compare("VALUE", key, "value", ""), put_op(key, desired), range_op(key));
  return text_of(txn_body(compare("CREATE", key, "create_revision", int_text(0)), put_op(key, desired),
                          JsonValue{{"request_txn", std::move(inner)}}));
}

std::string swap_request(std::string_view key, std::int64_t mod_revision, std::string_view value, std::int64_t lease) {
  // etcd compares a missing key as mod_revision 0.
  return text_of(
      txn_body(compare("MOD", key, "mod_revision", int_text(mod_revision)), put_op(key, value, lease), range_op(key)));
}

std::string lease_grant_request(std::int64_t ttl_seconds) { return text_of(JsonValue{{"TTL", int_text(ttl_seconds)}}); }

std::string lease_request(std::int64_t id) { return text_of(JsonValue{{"ID", int_text(id)}}); }

std::optional<std::string> authenticate_request(std::string_view name, std::string_view password) {
  try {
    return JsonValue{{"name", std::string(name)}, {"password", std::string(password)}}.dump(
        -1, ' ', false, JsonValue::error_handler_t::strict);
  } catch (const JsonValue::exception&) {
    return std::nullopt;  // not UTF-8
  }
}

std::string watch_create_request(std::string_view key, std::int64_t start_revision, WatchFilter filter,
                                 std::string_view range_end) {
  JsonValue create = range_body(key, range_end);
  if (start_revision != 0) create["start_revision"] = int_text(start_revision);
  // etcd's filters name what to drop.
  if (filter == WatchFilter::PutsOnly) create["filters"] = JsonValue::array({"NODELETE"});
  if (filter == WatchFilter::DeletesOnly) create["filters"] = JsonValue::array({"NOPUT"});
  return text_of(JsonValue{{"create_request", std::move(create)}});
}

std::optional<Error> parse_error(const JsonValue& reply) {
  const JsonValue* error = json_member(reply, "error");
  if (error == nullptr) return std::nullopt;
  Error out;
  if (error->is_string()) {
    out.message = error->get_ref<const std::string&>();
    if (const JsonValue* m = json_member(reply, "message"); m != nullptr && m->is_string()) {
      out.message = m->get_ref<const std::string&>();
    }
    if (const JsonValue* c = json_member(reply, "code")) out.code = json_int(*c).value_or(0);
    return out;
  }
  if (error->is_object()) {
    if (const JsonValue* m = json_member(*error, "message"); m != nullptr && m->is_string()) {
      out.message = m->get_ref<const std::string&>();
    }
    if (const JsonValue* c = json_member(*error, "grpc_code")) out.code = json_int(*c).value_or(0);
    return out;
  }
  // Some other "error": still an error, without detail.
  out.message = "unrecognised error";
  return out;
}

const JsonValue* stream_result(const JsonValue& message) {
  const JsonValue* result = json_member(message, "result");
  return result != nullptr && result->is_object() ? result : nullptr;
}

std::optional<RangeResult> parse_range_response(const JsonValue& reply) {
  if (!reply.is_object()) return std::nullopt;
  RangeResult out;
  if (!read_revision(reply, out.revision) || !read_kvs(reply, out.kvs)) return std::nullopt;
  return out;
}

std::optional<std::int64_t> parse_delete_response(const JsonValue& reply) {
  if (!reply.is_object()) return std::nullopt;
  std::int64_t deleted = 0;
  if (!read_int(reply, "deleted", deleted)) return std::nullopt;
  return deleted;
}

std::optional<TxnResult> parse_txn_response(const JsonValue& reply) { return parse_txn(reply); }

std::optional<std::string> compare_set_result(const TxnResult& txn, std::string_view expected,
                                              std::string_view desired) {
  if (txn.succeeded) return std::string(desired);
  if (txn.responses.size() != 1) return std::nullopt;
  const TxnOp* op = &txn.responses[0];
  if (op->kind == TxnOp::Kind::Txn) {
    if (op->txn.size() != 1) return std::nullopt;
    const TxnResult& inner = op->txn[0];
    if (inner.succeeded) return std::string(desired);
    if (inner.responses.size() != 1) return std::nullopt;
    op = &inner.responses[0];
  }
  if (op->kind != TxnOp::Kind::Range || op->kvs.size() > 1) return std::nullopt;
  if (op->kvs.empty()) return std::string(expected);  // missing: torch's answer, nothing written
  return op->kvs[0].value;
}

std::optional<SwapResult> swap_result(const TxnResult& txn) {
  SwapResult out;
  out.succeeded = txn.succeeded;
  if (txn.succeeded) return out;
  if (txn.responses.size() != 1 || txn.responses[0].kind != TxnOp::Kind::Range || txn.responses[0].kvs.size() > 1) {
    return std::nullopt;
  }
  if (!txn.responses[0].kvs.empty()) out.current = txn.responses[0].kvs[0];
  return out;
}

std::optional<std::string> parse_authenticate_response(const JsonValue& reply) {
  if (!reply.is_object()) return std::nullopt;
  std::string token;
  if (!read_text(reply, "token", token) || token.empty()) return std::nullopt;
  return token;
}

std::optional<LeaseResult> parse_lease_response(const JsonValue& reply) {
  if (!reply.is_object()) return std::nullopt;
  LeaseResult out;
  if (!read_int(reply, "ID", out.id) || !read_int(reply, "TTL", out.ttl) || !read_text(reply, "error", out.error)) {
    return std::nullopt;
  }
  return out;
}

std::optional<WatchResult> parse_watch_response(const JsonValue& result) {
  if (!result.is_object()) return std::nullopt;
  WatchResult out;
  if (!read_revision(result, out.revision) || !read_int(result, "watch_id", out.watch_id) ||
      !read_bool(result, "created", out.created) || !read_bool(result, "canceled", out.canceled) ||
      !read_int(result, "compact_revision", out.compact_revision) ||
      !read_text(result, "cancel_reason", out.cancel_reason)) {
    return std::nullopt;
  }
  const JsonValue* events = json_member(result, "events");
  if (events == nullptr) return out;
  if (!events->is_array()) return std::nullopt;
  for (const auto& item : *events) {
    if (!item.is_object()) return std::nullopt;
    WatchEvent event;
    // PUT is the enum's default, so etcd leaves it out; accept the number form too.
    if (const JsonValue* type = json_member(item, "type")) {
      if ((type->is_string() && type->get_ref<const std::string&>() == "DELETE") || json_int(*type) == 1) {
        event.type = WatchEvent::Type::Delete;
      } else if (!(type->is_string() && type->get_ref<const std::string&>() == "PUT") && json_int(*type) != 0) {
        return std::nullopt;
      }
    }
    const JsonValue* kv = json_member(item, "kv");
    if (kv == nullptr) return std::nullopt;
    auto parsed = parse_kv(*kv);
    if (!parsed) return std::nullopt;
    event.kv = std::move(*parsed);
    out.events.push_back(std::move(event));
  }
  return out;
}

}  // namespace etcd
}  // namespace rankrun::rendezvous
