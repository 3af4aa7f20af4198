#include "worker_runtime/error_json.hpp"

namespace rankrun::worker {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is not one
// (overlong forms, surrogates and code points above U+10FFFF count as invalid).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length;
  std::uint32_t code;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    code = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    code = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0u) != 0x80u) return 0;
    code = (code << 6) | (byte(i + k) & 0x3fu);
  }
  if (length == 3 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) return 0;
  if (length == 4 && (code < 0x10000 || code > 0x10ffff)) return 0;
  return length;
}

}  // namespace

std::string json_escape(std::string_view text) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, length));
        i += length;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out += k_hex[c >> 4];
          out += k_hex[c & 0xf];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out;
}

std::string format_error_json(const ErrorRecord& record) {
  std::string out = "{\"message\": {\"message\": \"";
  out += json_escape(record.message);
  out += "\", \"extraInfo\": {\"py_callstack\": \"";
  out += json_escape(record.callstack);
  out += "\", \"timestamp\": \"";
  out += std::to_string(record.timestamp_s);
  out += "\"}}}\n";
  return out;
}

std::string failure_message(std::string_view type, std::string_view what) {
  std::string out(type);
  if (!what.empty()) {
    out += ": ";
    out += what;
  }
  return out;
}

}  // namespace rankrun::worker
