#include "rendezvous/etcd_json.hpp"

#include <array>
#include <charconv>
#include <limits>

namespace rankrun::rendezvous {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Recursive descent over a bounded view. Every failure says whether the input merely ran out
// (`truncated`: a stream reader waits for more) or is wrong.
class Parser {
 public:
  explicit Parser(std::string_view text) : m_text(text) {}

  std::size_t pos = 0;
  bool truncated = false;

  void skip_blanks() {
    while (pos < m_text.size() && is_blank(m_text[pos])) ++pos;
  }
  bool at_end() const { return pos >= m_text.size(); }

  bool value(JsonValue& out, std::size_t depth) {
    skip_blanks();
    if (at_end()) return ran_out();
    switch (m_text[pos]) {
      case '{': return depth < k_json_max_depth && object(out, depth + 1);
      case '[': return depth < k_json_max_depth && array(out, depth + 1);
      case '"':
        out.kind = JsonValue::Kind::String;
        return string(out.text);
      case 't':
        out.kind = JsonValue::Kind::Bool;
        out.boolean = true;
        return literal("true");
      case 'f':
        out.kind = JsonValue::Kind::Bool;
        return literal("false");
      case 'n':
        out.kind = JsonValue::Kind::Null;
        return literal("null");
      default:
        out.kind = JsonValue::Kind::Number;
        return number(out.text);
    }
  }

 private:
  std::string_view m_text;

  bool ran_out() {
    truncated = true;
    return false;
  }

  bool object(JsonValue& out, std::size_t depth) {
    out.kind = JsonValue::Kind::Object;
    ++pos;
    skip_blanks();
    if (at_end()) return ran_out();
    if (m_text[pos] == '}') {
      ++pos;
      return true;
    }
    for (;;) {
      skip_blanks();
      if (at_end()) return ran_out();
      if (m_text[pos] != '"') return false;
      std::string name;
      if (!string(name)) return false;
      skip_blanks();
      if (at_end()) return ran_out();
      if (m_text[pos] != ':') return false;
      ++pos;
      JsonValue member;
      if (!value(member, depth)) return false;
      out.members.push_back(JsonMember{std::move(name), std::move(member)});
      skip_blanks();
      if (at_end()) return ran_out();
      const char c = m_text[pos++];
      if (c == '}') return true;
      if (c != ',') return false;
    }
  }

  bool array(JsonValue& out, std::size_t depth) {
    out.kind = JsonValue::Kind::Array;
    ++pos;
    skip_blanks();
    if (at_end()) return ran_out();
    if (m_text[pos] == ']') {
      ++pos;
      return true;
    }
    for (;;) {
      JsonValue item;
      if (!value(item, depth)) return false;
      out.items.push_back(std::move(item));
      skip_blanks();
      if (at_end()) return ran_out();
      const char c = m_text[pos++];
      if (c == ']') return true;
      if (c != ',') return false;
    }
  }

  bool literal(std::string_view word) {
    for (char c : word) {
      if (at_end()) return ran_out();
      if (m_text[pos] != c) return false;
      ++pos;
    }
    return true;
  }

  bool digits() {
    if (at_end()) return ran_out();
    if (!is_digit(m_text[pos])) return false;
    while (pos < m_text.size() && is_digit(m_text[pos])) ++pos;
    return true;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, kept as text.
  bool number(std::string& out) {
    const std::size_t start = pos;
    if (m_text[pos] == '-') ++pos;
    if (at_end()) return ran_out();
    if (m_text[pos] == '0') {
      ++pos;
    } else if (!digits()) {
      return false;
    }
    if (pos < m_text.size() && m_text[pos] == '.') {
      ++pos;
      if (!digits()) return false;
    }
    if (pos < m_text.size() && (m_text[pos] == 'e' || m_text[pos] == 'E')) {
      ++pos;
      if (pos < m_text.size() && (m_text[pos] == '+' || m_text[pos] == '-')) ++pos;
      if (!digits()) return false;
    }
    out.assign(m_text.substr(start, pos - start));
    return true;
  }

  // Four hex digits after "\u".
  bool hex4(std::uint32_t& out) {
    out = 0;
    for (int i = 0; i < 4; ++i) {
      if (at_end()) return ran_out();
      const int d = hex_digit(m_text[pos++]);
      if (d < 0) return false;
      out = (out << 4) | static_cast<std::uint32_t>(d);
    }
    return true;
  }

  bool string(std::string& out) {
    ++pos;  // the opening quote
    for (;;) {
      // Copy runs of ordinary bytes at once: base64 values are long runs.
      const std::size_t run = pos;
      while (pos < m_text.size() && m_text[pos] != '"' && m_text[pos] != '\\' &&
             static_cast<unsigned char>(m_text[pos]) >= 0x20) {
        ++pos;
      }
      out.append(m_text.substr(run, pos - run));
      if (at_end()) return ran_out();
      const char c = m_text[pos++];
      if (c == '"') return true;
      if (c != '\\') return false;  // a raw control character
      if (at_end()) return ran_out();
      switch (m_text[pos++]) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a low surrogate alone
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            // A high surrogate must be followed by "\u" and a low one.
            if (!literal("\\u")) return false;
            std::uint32_t low = 0;
            if (!hex4(low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
  }
};

// Decimal integer text: optional '-', then digits only.
std::optional<std::int64_t> parse_int_text(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const std::size_t first = text[0] == '-' ? 1 : 0;
  if (first == text.size()) return std::nullopt;
  for (std::size_t i = first; i < text.size(); ++i) {
    if (!is_digit(text[i])) return std::nullopt;
  }
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

constexpr std::string_view k_base64_alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

const JsonValue* JsonValue::find(std::string_view name) const {
  if (kind != Kind::Object) return nullptr;
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    if (it->name == name) return &it->value;
  }
  return nullptr;
}

std::optional<std::int64_t> JsonValue::as_int() const {
  if (kind != Kind::Number && kind != Kind::String) return std::nullopt;
  return parse_int_text(text);
}

std::optional<JsonValue> parse_json(std::string_view text, std::size_t max_size) {
  if (text.size() > max_size) return std::nullopt;
  Parser p(text);
  JsonValue v;
  if (!p.value(v, 0)) return std::nullopt;
  p.skip_blanks();
  if (!p.at_end()) return std::nullopt;
  return v;
}

JsonPrefix parse_json_prefix(std::string_view text, std::size_t max_size) {
  JsonPrefix out;
  // Bytes past max_size cannot belong to an acceptable value: running out inside the window
  // then means "too large", not "need more".
  const std::string_view window = text.substr(0, max_size);
  const bool more_may_come = text.size() < max_size;
  Parser p(window);
  if (!p.value(out.value, 0)) {
    out.status = p.truncated && more_may_come ? JsonScan::NeedMore : JsonScan::Malformed;
    out.value = {};
    return out;
  }
  // A number that reaches the end might go on in the next bytes.
  if (out.value.kind == JsonValue::Kind::Number && p.at_end()) {
    out.status = more_may_come ? JsonScan::NeedMore : JsonScan::Malformed;
    out.value = {};
    return out;
  }
  p.skip_blanks();
  out.status = JsonScan::Complete;
  out.used = p.pos;
  return out;
}

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char k_hex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out.push_back(k_hex[u >> 4]);
          out.push_back(k_hex[u & 0xF]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t n = (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16) |
                            (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8) |
                            static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(k_base64_alphabet[(n >> 18) & 63]);
    out.push_back(k_base64_alphabet[(n >> 12) & 63]);
    out.push_back(k_base64_alphabet[(n >> 6) & 63]);
    out.push_back(k_base64_alphabet[n & 63]);
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out.push_back(k_base64_alphabet[(n >> 18) & 63]);
    out.push_back(k_base64_alphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? k_base64_alphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    // Padding only at the very end: "xx==" or "xxx=".
    const std::size_t pad = !last ? 0 : text[i + 3] != '=' ? 0 : text[i + 2] == '=' ? 2 : 1;
    std::uint32_t n = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      if (j >= 4 - pad) {
        n <<= 6;
        continue;
      }
      const int d = base64_digit(text[i + j]);
      if (d < 0) return std::nullopt;
      n = (n << 6) | static_cast<std::uint32_t>(d);
    }
    // Canonical only: the bits that padding drops must be zero.
    if ((pad == 1 && (n & 0xFF) != 0) || (pad == 2 && (n & 0xFFFF) != 0)) return std::nullopt;
    out.push_back(static_cast<char>((n >> 16) & 0xFF));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
  }
  return out;
}

namespace etcd {
namespace {

// Writers. Keys and values are bytes: always base64, so nothing in them needs escaping.
void bytes_field(std::string& out, std::string_view name, std::string_view bytes) {
  out += '"';
  out += name;
  out += "\":\"";
  out += base64_encode(bytes);
  out += '"';
}

// int64s as strings, the way etcd writes them (the gateway reads both).
void int_field(std::string& out, std::string_view name, std::int64_t value) {
  out += '"';
  out += name;
  out += "\":\"";
  out += std::to_string(value);
  out += '"';
}

std::string range_op(std::string_view key) {
  std::string out = "{\"request_range\":{";
  bytes_field(out, "key", key);
  out += "}}";
  return out;
}

std::string put_op(std::string_view key, std::string_view value, std::int64_t lease = 0) {
  std::string out = "{\"request_put\":{";
  bytes_field(out, "key", key);
  out += ',';
  bytes_field(out, "value", value);
  if (lease != 0) {
    out += ',';
    int_field(out, "lease", lease);
  }
  out += "}}";
  return out;
}

// One element of a txn's "compare" list; `operand` is the field and value written after the key.
std::string compare(std::string_view target, std::string_view key, std::string_view operand) {
  std::string out = "{\"target\":\"";
  out += target;
  out += "\",";
  bytes_field(out, "key", key);
  out += ',';
  out += operand;
  out += ",\"result\":\"EQUAL\"}";
  return out;
}

std::string value_operand(std::string_view value) {
  std::string out;
  bytes_field(out, "value", value);
  return out;
}

std::string revision_operand(std::string_view field, std::int64_t revision) {
  std::string out;
  int_field(out, field, revision);
  return out;
}

std::string txn_body(std::string_view compare_json, std::string_view success, std::string_view failure) {
  std::string out = "{\"compare\":[";
  out += compare_json;
  out += "],\"success\":[";
  out += success;
  out += "],\"failure\":[";
  out += failure;
  out += "]}";
  return out;
}

// Readers. A field etcd left out is its default; a field of the wrong type is malformed.
bool read_int(const JsonValue& object, std::string_view name, std::int64_t& out) {
  const JsonValue* v = object.find(name);
  if (v == nullptr) return true;
  const auto n = v->as_int();
  if (!n) return false;
  out = *n;
  return true;
}

bool read_bool(const JsonValue& object, std::string_view name, bool& out) {
  const JsonValue* v = object.find(name);
  if (v == nullptr) return true;
  if (v->kind != JsonValue::Kind::Bool) return false;
  out = v->boolean;
  return true;
}

bool read_text(const JsonValue& object, std::string_view name, std::string& out) {
  const JsonValue* v = object.find(name);
  if (v == nullptr) return true;
  if (v->kind != JsonValue::Kind::String) return false;
  out = v->text;
  return true;
}

bool read_bytes(const JsonValue& object, std::string_view name, std::string& out) {
  const JsonValue* v = object.find(name);
  if (v == nullptr) return true;
  if (v->kind != JsonValue::Kind::String) return false;
  auto decoded = base64_decode(v->text);
  if (!decoded) return false;
  out = std::move(*decoded);
  return true;
}

bool read_revision(const JsonValue& reply, std::int64_t& out) {
  const JsonValue* header = reply.find("header");
  if (header == nullptr) return true;
  return header->kind == JsonValue::Kind::Object && read_int(*header, "revision", out);
}

std::optional<KeyValue> parse_kv(const JsonValue& v) {
  if (v.kind != JsonValue::Kind::Object) return std::nullopt;
  KeyValue kv;
  if (!read_bytes(v, "key", kv.key) || !read_bytes(v, "value", kv.value) ||
      !read_int(v, "create_revision", kv.create_revision) || !read_int(v, "mod_revision", kv.mod_revision) ||
      !read_int(v, "version", kv.version) || !read_int(v, "lease", kv.lease)) {
    return std::nullopt;
  }
  return kv;
}

bool read_kvs(const JsonValue& reply, std::vector<KeyValue>& out) {
  const JsonValue* kvs = reply.find("kvs");
  if (kvs == nullptr) return true;
  if (kvs->kind != JsonValue::Kind::Array) return false;
  for (const auto& item : kvs->items) {
    auto kv = parse_kv(item);
    if (!kv) return false;
    out.push_back(std::move(*kv));
  }
  return true;
}

std::optional<TxnResult> parse_txn(const JsonValue& reply) {
  if (reply.kind != JsonValue::Kind::Object) return std::nullopt;
  TxnResult txn;
  if (!read_revision(reply, txn.revision) || !read_bool(reply, "succeeded", txn.succeeded)) return std::nullopt;
  const JsonValue* responses = reply.find("responses");
  if (responses == nullptr) return txn;
  if (responses->kind != JsonValue::Kind::Array) return std::nullopt;
  for (const auto& item : responses->items) {
    if (item.kind != JsonValue::Kind::Object) return std::nullopt;
    TxnOp op;
    if (const JsonValue* r = item.find("response_range")) {
      op.kind = TxnOp::Kind::Range;
      if (r->kind != JsonValue::Kind::Object || !read_kvs(*r, op.kvs)) return std::nullopt;
    } else if (const JsonValue* p = item.find("response_put")) {
      op.kind = TxnOp::Kind::Put;
      if (p->kind != JsonValue::Kind::Object) return std::nullopt;
    } else if (const JsonValue* d = item.find("response_delete_range")) {
      op.kind = TxnOp::Kind::DeleteRange;
      if (d->kind != JsonValue::Kind::Object || !read_int(*d, "deleted", op.deleted)) return std::nullopt;
    } else if (const JsonValue* t = item.find("response_txn")) {
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
  std::string out = "{";
  bytes_field(out, "key", key);
  out += ',';
  bytes_field(out, "value", value);
  if (lease != 0) {
    out += ',';
    int_field(out, "lease", lease);
  }
  out += '}';
  return out;
}

std::string range_request(std::string_view key, std::string_view range_end, bool keys_only) {
  std::string out = "{";
  bytes_field(out, "key", key);
  if (!range_end.empty()) {
    out += ',';
    bytes_field(out, "range_end", range_end);
  }
  if (keys_only) out += ",\"keys_only\":true";
  out += '}';
  return out;
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

std::string delete_request(std::string_view key) {
  std::string out = "{";
  bytes_field(out, "key", key);
  out += '}';
  return out;
}

std::string txn_range_request(const std::vector<std::string>& keys, bool keys_only) {
  std::string out = "{\"success\":[";
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += ',';
    out += "{\"request_range\":";
    out += range_request(keys[i], {}, keys_only);
    out += '}';
  }
  out += "]}";
  return out;
}

std::string txn_put_request(const std::vector<std::pair<std::string, std::string>>& kvs) {
  std::string out = "{\"success\":[";
  for (std::size_t i = 0; i < kvs.size(); ++i) {
    if (i > 0) out += ',';
    out += put_op(kvs[i].first, kvs[i].second);
  }
  out += "]}";
  return out;
}

std::string compare_set_request(std::string_view key, std::string_view expected, std::string_view desired) {
  if (!expected.empty()) {
    // A value compare fails on a missing key, so "missing" lands in the failure branch with an
    // empty range.
    return txn_body(compare("VALUE", key, value_operand(expected)), put_op(key, desired), range_op(key));
  }
  // Expected empty matches a missing key and an empty value alike; compares are AND-ed, so the
  // second one is a nested txn in the failure branch.
  std::string inner = "{\"request_txn\":";
  inner += txn_body(compare("VALUE", key, value_operand("")), put_op(key, desired), range_op(key));
  inner += '}';
  return txn_body(compare("CREATE", key, revision_operand("create_revision", 0)), put_op(key, desired), inner);
}

std::string swap_request(std::string_view key, std::int64_t mod_revision, std::string_view value, std::int64_t lease) {
  // etcd compares a missing key as mod_revision 0.
  return txn_body(compare("MOD", key, revision_operand("mod_revision", mod_revision)), put_op(key, value, lease),
                  range_op(key));
}

std::string lease_grant_request(std::int64_t ttl_seconds) {
  std::string out = "{";
  int_field(out, "TTL", ttl_seconds);
  out += '}';
  return out;
}

std::string lease_request(std::int64_t id) {
  std::string out = "{";
  int_field(out, "ID", id);
  out += '}';
  return out;
}

std::string watch_create_request(std::string_view key, std::int64_t start_revision, WatchFilter filter,
                                 std::string_view range_end) {
  std::string out = "{\"create_request\":{";
  bytes_field(out, "key", key);
  if (!range_end.empty()) {
    out += ',';
    bytes_field(out, "range_end", range_end);
  }
  if (start_revision != 0) {
    out += ',';
    int_field(out, "start_revision", start_revision);
  }
  // etcd's filters name what to drop.
  if (filter == WatchFilter::PutsOnly) out += ",\"filters\":[\"NODELETE\"]";
  if (filter == WatchFilter::DeletesOnly) out += ",\"filters\":[\"NOPUT\"]";
  out += "}}";
  return out;
}

std::optional<Error> parse_error(const JsonValue& reply) {
  const JsonValue* error = reply.find("error");
  if (error == nullptr) return std::nullopt;
  Error out;
  if (error->kind == JsonValue::Kind::String) {
    out.message = error->text;
    if (const JsonValue* m = reply.find("message"); m != nullptr && m->kind == JsonValue::Kind::String) {
      out.message = m->text;
    }
    if (const JsonValue* c = reply.find("code")) out.code = c->as_int().value_or(0);
    return out;
  }
  if (error->kind == JsonValue::Kind::Object) {
    if (const JsonValue* m = error->find("message"); m != nullptr && m->kind == JsonValue::Kind::String) {
      out.message = m->text;
    }
    if (const JsonValue* c = error->find("grpc_code")) out.code = c->as_int().value_or(0);
    return out;
  }
  // Some other "error": still an error, without detail.
  out.message = "unrecognised error";
  return out;
}

const JsonValue* stream_result(const JsonValue& message) {
  const JsonValue* result = message.find("result");
  return result != nullptr && result->kind == JsonValue::Kind::Object ? result : nullptr;
}

std::optional<RangeResult> parse_range_response(const JsonValue& reply) {
  if (reply.kind != JsonValue::Kind::Object) return std::nullopt;
  RangeResult out;
  if (!read_revision(reply, out.revision) || !read_kvs(reply, out.kvs)) return std::nullopt;
  return out;
}

std::optional<std::int64_t> parse_delete_response(const JsonValue& reply) {
  if (reply.kind != JsonValue::Kind::Object) return std::nullopt;
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

std::optional<LeaseResult> parse_lease_response(const JsonValue& reply) {
  if (reply.kind != JsonValue::Kind::Object) return std::nullopt;
  LeaseResult out;
  if (!read_int(reply, "ID", out.id) || !read_int(reply, "TTL", out.ttl) || !read_text(reply, "error", out.error)) {
    return std::nullopt;
  }
  return out;
}

std::optional<WatchResult> parse_watch_response(const JsonValue& result) {
  if (result.kind != JsonValue::Kind::Object) return std::nullopt;
  WatchResult out;
  if (!read_revision(result, out.revision) || !read_int(result, "watch_id", out.watch_id) ||
      !read_bool(result, "created", out.created) || !read_bool(result, "canceled", out.canceled) ||
      !read_int(result, "compact_revision", out.compact_revision) ||
      !read_text(result, "cancel_reason", out.cancel_reason)) {
    return std::nullopt;
  }
  const JsonValue* events = result.find("events");
  if (events == nullptr) return out;
  if (events->kind != JsonValue::Kind::Array) return std::nullopt;
  for (const auto& item : events->items) {
    if (item.kind != JsonValue::Kind::Object) return std::nullopt;
    WatchEvent event;
    // PUT is the enum's default, so etcd leaves it out; accept the number form too.
    if (const JsonValue* type = item.find("type")) {
      if ((type->kind == JsonValue::Kind::String && type->text == "DELETE") || type->as_int() == 1) {
        event.type = WatchEvent::Type::Delete;
      } else if (!(type->kind == JsonValue::Kind::String && type->text == "PUT") && type->as_int() != 0) {
        return std::nullopt;
      }
    }
    const JsonValue* kv = item.find("kv");
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
