#include "launcher/report/error_file.hpp"

#include <map>
#include <memory>
#include <variant>
#include <vector>

namespace rankrun::launcher {
namespace {

// A small JSON reader: enough for error files, bounded in depth.
struct Json;
using JsonObject = std::map<std::string, Json, std::less<>>;
struct Json {
  // Numbers, booleans and null are kept as their text; arrays are skipped to a marker.
  std::variant<std::string, std::shared_ptr<JsonObject>, std::monostate> value;
  bool is_string = false;
};

class Reader {
 public:
  explicit Reader(std::string_view text) : m_s(text) {}

  std::optional<Json> document() {
    auto v = value(0);
    skip_ws();
    if (!v || m_i != m_s.size()) return std::nullopt;
    return v;
  }

 private:
  static constexpr int k_max_depth = 64;

  void skip_ws() {
    while (m_i < m_s.size() && (m_s[m_i] == ' ' || m_s[m_i] == '\n' || m_s[m_i] == '\r' || m_s[m_i] == '\t')) ++m_i;
  }
  bool eat(char c) {
    skip_ws();
    if (m_i < m_s.size() && m_s[m_i] == c) {
      ++m_i;
      return true;
    }
    return false;
  }

  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool hex4(unsigned& out) {
    if (m_i + 4 > m_s.size()) return false;
    out = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = m_s[m_i++];
      out <<= 4;
      if (c >= '0' && c <= '9') out |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') out |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') out |= static_cast<unsigned>(c - 'A' + 10);
      else return false;
    }
    return true;
  }

  std::optional<std::string> string() {
    if (!eat('"')) return std::nullopt;
    std::string out;
    while (m_i < m_s.size()) {
      const char c = m_s[m_i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (m_i >= m_s.size()) return std::nullopt;
      const char e = m_s[m_i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = 0;
          if (!hex4(cp)) return std::nullopt;
          if (cp >= 0xD800 && cp < 0xDC00 && m_i + 6 <= m_s.size() && m_s[m_i] == '\\' && m_s[m_i + 1] == 'u') {
            m_i += 2;
            unsigned lo = 0;
            if (!hex4(lo)) return std::nullopt;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default: return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<Json> value(int depth) {
    if (depth > k_max_depth) return std::nullopt;
    skip_ws();
    if (m_i >= m_s.size()) return std::nullopt;
    const char c = m_s[m_i];
    if (c == '"') {
      auto s = string();
      if (!s) return std::nullopt;
      Json j;
      j.value = std::move(*s);
      j.is_string = true;
      return j;
    }
    if (c == '{') {
      ++m_i;
      auto obj = std::make_shared<JsonObject>();
      if (eat('}')) return Json{obj, false};
      do {
        auto key = string();
        if (!key || !eat(':')) return std::nullopt;
        auto v = value(depth + 1);
        if (!v) return std::nullopt;
        (*obj)[*key] = std::move(*v);
      } while (eat(','));
      if (!eat('}')) return std::nullopt;
      return Json{obj, false};
    }
    if (c == '[') {
      ++m_i;
      if (!eat(']')) {
        do {
          if (!value(depth + 1)) return std::nullopt;
        } while (eat(','));
        if (!eat(']')) return std::nullopt;
      }
      return Json{std::monostate{}, false};
    }
    // number, true, false, null: keep the literal text
    const auto start = m_i;
    while (m_i < m_s.size() && std::string_view("+-.0123456789eEtruefalsn").find(m_s[m_i]) != std::string_view::npos) ++m_i;
    if (m_i == start) return std::nullopt;
    return Json{std::string(m_s.substr(start, m_i - start)), false};
  }

  std::string_view m_s;
  std::size_t m_i = 0;
};

const Json* member(const Json& j, std::string_view key) {
  const auto* obj = std::get_if<std::shared_ptr<JsonObject>>(&j.value);
  if (!obj) return nullptr;
  const auto it = (*obj)->find(key);
  return it == (*obj)->end() ? nullptr : &it->second;
}

std::string text_of(const Json* j) {
  if (!j) return {};
  const auto* s = std::get_if<std::string>(&j->value);
  return s ? *s : std::string{};
}

}  // namespace

std::optional<ErrorRecord> parse_error_file(std::string_view text) {
  const auto doc = Reader(text).document();
  if (!doc) return std::nullopt;
  const Json* message = member(*doc, "message");
  if (!message) return std::nullopt;
  ErrorRecord record;
  if (message->is_string) {
    record.message = text_of(message);
    record.timestamp = text_of(member(*doc, "timestamp"));
    return record;
  }
  if (!std::holds_alternative<std::shared_ptr<JsonObject>>(message->value)) return std::nullopt;
  record.message = text_of(member(*message, "message"));
  if (const Json* extra = member(*message, "extraInfo")) {
    record.traceback = text_of(member(*extra, "py_callstack"));
    record.timestamp = text_of(member(*extra, "timestamp"));
  }
  return record;
}

}  // namespace rankrun::launcher
