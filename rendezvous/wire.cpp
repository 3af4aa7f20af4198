#include "rendezvous/wire.hpp"

#include "base/parse_number.hpp"

#include <array>
#include <span>

namespace rankrun::rendezvous {
namespace {

// Index = wire type byte. Kept as tables so that adding a generation is one line each.
constexpr std::array k_ops_v1_13{Op::Set,  Op::CompareSet, Op::Get,      Op::Add,      Op::Check,
                                 Op::Wait, Op::GetNumKeys, Op::WatchKey, Op::DeleteKey};
constexpr std::array k_ops_v2_1{Op::Set,        Op::CompareSet, Op::Get,    Op::Add,      Op::Check,    Op::Wait,
                                Op::GetNumKeys, Op::DeleteKey,  Op::Append, Op::MultiGet, Op::MultiSet, Op::CancelWait};
constexpr std::array k_ops_v2_2{Op::Validate, Op::Set,      Op::CompareSet, Op::Get,       Op::Add,
                                Op::Check,    Op::Wait,     Op::GetNumKeys, Op::DeleteKey, Op::Append,
                                Op::MultiGet, Op::MultiSet, Op::CancelWait, Op::Ping,      Op::QueuePush,
                                Op::QueuePop, Op::QueueLen, Op::ListKeys,   Op::Barrier};

std::span<const Op> table_of(Generation generation) {
  switch (generation) {
    case Generation::V1_13: return k_ops_v1_13;
    case Generation::V2_1: return k_ops_v2_1;
    case Generation::V2_2: return k_ops_v2_2;
  }
  return {};
}

constexpr std::string_view k_validate_frame{"\x00\xCE\xF7\x85\x3C", 5};

enum class Step : std::uint8_t { Ok, NeedMore, Malformed };

// Walks one frame. With `fill` false it only measures and checks bounds (no allocation), so
// that re-parsing a partial frame after every read stays cheap; the filling pass runs once.
class Reader {
 public:
  Reader(std::string_view in, const Limits& limits, bool fill) : m_in(in), m_limits(limits), m_fill(fill) {}

  std::size_t position() const { return m_pos; }
  std::string& error() { return m_error; }

  Step u32(std::uint32_t& value) {
    if (m_in.size() - m_pos < 4) return Step::NeedMore;
    value = read_u32(m_in.substr(m_pos));
    m_pos += 4;
    return Step::Ok;
  }

  Step u64(std::uint64_t& value) {
    if (m_in.size() - m_pos < 8) return Step::NeedMore;
    value = static_cast<std::uint64_t>(read_i64(m_in.substr(m_pos)));
    m_pos += 8;
    return Step::Ok;
  }

  // A length-prefixed string; `what` names it in the error ("key", "value").
  Step bytes(std::uint64_t max, std::string_view what, std::string* out) {
    std::uint64_t length = 0;
    if (Step s = u64(length); s != Step::Ok) return s;
    if (length > max) {
      m_error = std::string(what) + " of " + std::to_string(length) + " bytes exceeds the limit of " +
                std::to_string(max) + " bytes";
      return Step::Malformed;
    }
    // Checked before waiting for the bytes: the frame must fit the whole-request bound too.
    if (m_pos + length > m_limits.max_request_bytes) {
      m_error = "request larger than the limit of " + std::to_string(m_limits.max_request_bytes) + " bytes";
      return Step::Malformed;
    }
    if (m_in.size() - m_pos < length) return Step::NeedMore;
    if (m_fill && out != nullptr) out->assign(m_in.substr(m_pos, static_cast<std::size_t>(length)));
    m_pos += static_cast<std::size_t>(length);
    return Step::Ok;
  }

  Step key(std::string* out) { return bytes(m_limits.max_key_bytes, "key", out); }
  Step value(std::string* out) { return bytes(m_limits.max_value_bytes, "value", out); }

  Step count(std::uint64_t& n) {
    if (Step s = u64(n); s != Step::Ok) return s;
    // MULTI_SET sends its count as i64; a negative one reads as a huge u64 and lands here too.
    if (n > m_limits.max_keys) {
      m_error =
          "key list of " + std::to_string(n) + " entries exceeds the limit of " + std::to_string(m_limits.max_keys);
      return Step::Malformed;
    }
    return Step::Ok;
  }

  bool filling() const { return m_fill; }

 private:
  std::string_view m_in;
  std::size_t m_pos = 0;
  const Limits& m_limits;
  bool m_fill;
  std::string m_error;
};

#define RANKRUN_STEP(expr)                           \
  do {                                               \
    if (Step s_ = (expr); s_ != Step::Ok) return s_; \
  } while (false)

std::string* slot(std::vector<std::string>& v, std::size_t index, bool fill) {
  if (!fill) return nullptr;
  if (v.size() <= index) v.resize(index + 1);
  return &v[index];
}

Step read_body(Reader& r, Op op, Request& out) {
  const bool fill = r.filling();
  switch (op) {
    case Op::Validate: {
      std::uint32_t magic = 0;
      RANKRUN_STEP(r.u32(magic));
      if (magic != k_validation_magic) {
        r.error() = "VALIDATE with wrong magic " + std::to_string(magic);
        return Step::Malformed;
      }
      if (fill) {
        out.number = magic;
        out.keys.clear();
        out.values.clear();
      }
      return Step::Ok;
    }
    case Op::Ping: {
      std::uint32_t nonce = 0;
      RANKRUN_STEP(r.u32(nonce));
      if (fill) {
        out.number = nonce;
        out.keys.clear();
        out.values.clear();
      }
      return Step::Ok;
    }
    case Op::Set:
    case Op::Append:
    case Op::QueuePush:
      RANKRUN_STEP(r.key(slot(out.keys, 0, fill)));
      RANKRUN_STEP(r.value(slot(out.values, 0, fill)));
      if (fill) {
        out.keys.resize(1);
        out.values.resize(1);
      }
      return Step::Ok;
    case Op::CompareSet:
      RANKRUN_STEP(r.key(slot(out.keys, 0, fill)));
      RANKRUN_STEP(r.value(slot(out.values, 0, fill)));
      RANKRUN_STEP(r.value(slot(out.values, 1, fill)));
      if (fill) {
        out.keys.resize(1);
        out.values.resize(2);
      }
      return Step::Ok;
    case Op::Get:
    case Op::DeleteKey:
    case Op::WatchKey:
    case Op::QueuePop:
    case Op::QueueLen:
      RANKRUN_STEP(r.key(slot(out.keys, 0, fill)));
      if (fill) {
        out.keys.resize(1);
        out.values.clear();
      }
      return Step::Ok;
    case Op::Add:
    case Op::Barrier: {
      // ADD's delta, BARRIER's world size: an i64 after the key.
      RANKRUN_STEP(r.key(slot(out.keys, 0, fill)));
      std::uint64_t number = 0;
      RANKRUN_STEP(r.u64(number));
      if (fill) {
        out.keys.resize(1);
        out.values.clear();
        out.number = static_cast<std::int64_t>(number);
      }
      return Step::Ok;
    }
    case Op::Check:
    case Op::Wait:
    case Op::MultiGet: {
      std::uint64_t n = 0;
      RANKRUN_STEP(r.count(n));
      for (std::uint64_t i = 0; i < n; ++i) RANKRUN_STEP(r.key(slot(out.keys, static_cast<std::size_t>(i), fill)));
      if (fill) {
        out.keys.resize(static_cast<std::size_t>(n));
        out.values.clear();
      }
      return Step::Ok;
    }
    case Op::MultiSet: {
      std::uint64_t n = 0;
      RANKRUN_STEP(r.count(n));
      for (std::uint64_t i = 0; i < n; ++i) {
        RANKRUN_STEP(r.key(slot(out.keys, static_cast<std::size_t>(i), fill)));
        RANKRUN_STEP(r.value(slot(out.values, static_cast<std::size_t>(i), fill)));
      }
      if (fill) {
        out.keys.resize(static_cast<std::size_t>(n));
        out.values.resize(static_cast<std::size_t>(n));
      }
      return Step::Ok;
    }
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::ListKeys:
      if (fill) {
        out.keys.clear();
        out.values.clear();
      }
      return Step::Ok;
  }
  return Step::Malformed;
}

#undef RANKRUN_STEP

DecodeResult finish(Step step, Reader& r) {
  DecodeResult result;
  switch (step) {
    case Step::Ok:
      result.status = DecodeStatus::Complete;
      result.used = r.position();
      break;
    case Step::NeedMore: result.status = DecodeStatus::NeedMore; break;
    case Step::Malformed:
      result.status = DecodeStatus::Malformed;
      result.error = std::move(r.error());
      break;
  }
  return result;
}

void append_le(std::string& out, std::uint64_t value, int size) {
  for (int i = 0; i < size; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
}

}  // namespace

std::optional<ProtocolChoice> parse_protocol_choice(std::string_view text) {
  if (text == "auto") return ProtocolChoice::Auto;
  if (text == "1.13" || text == "2.0") return ProtocolChoice::V1_13;
  if (text == "2.1") return ProtocolChoice::V2_1;
  if (text.size() > 2 && text.substr(0, 2) == "2.") {
    const auto minor = parse_number<unsigned>(text.substr(2));
    if (minor && *minor >= 2) return ProtocolChoice::V2_2;
  }
  return std::nullopt;
}

std::string_view to_string(ProtocolChoice choice) {
  switch (choice) {
    case ProtocolChoice::Auto: return "auto";
    case ProtocolChoice::V1_13: return "1.13";
    case ProtocolChoice::V2_1: return "2.1";
    case ProtocolChoice::V2_2: return "2.2";
  }
  return "?";
}

std::string_view to_string(Generation generation) {
  switch (generation) {
    case Generation::V1_13: return "<=2.0";
    case Generation::V2_1: return "2.1";
    case Generation::V2_2: return "2.2+";
  }
  return "?";
}

Generation fallback_generation(ProtocolChoice choice) {
  switch (choice) {
    case ProtocolChoice::Auto:
    case ProtocolChoice::V1_13: return Generation::V1_13;
    case ProtocolChoice::V2_1: return Generation::V2_1;
    case ProtocolChoice::V2_2: return Generation::V2_2;
  }
  return Generation::V1_13;
}

std::optional<Generation> detect_generation(std::string_view first_bytes, ProtocolChoice choice) {
  if (first_bytes.empty()) return std::nullopt;
  const std::size_t n = std::min(first_bytes.size(), k_validate_frame.size());
  if (first_bytes.substr(0, n) != k_validate_frame.substr(0, n)) return fallback_generation(choice);
  if (n < k_validate_frame.size()) return std::nullopt;
  return Generation::V2_2;
}

std::optional<std::uint8_t> wire_type(Op op, Generation generation) {
  auto table = table_of(generation);
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (table[i] == op) return static_cast<std::uint8_t>(i);
  }
  return std::nullopt;
}

std::optional<Op> op_from_wire(std::uint8_t type, Generation generation) {
  auto table = table_of(generation);
  if (type >= table.size()) return std::nullopt;
  return table[type];
}

DecodeResult decode_request(std::string_view in, Generation generation, const Limits& limits, Request& out) {
  if (in.empty()) return {};
  const auto type = static_cast<std::uint8_t>(in[0]);
  const auto op = op_from_wire(type, generation);
  if (!op) {
    DecodeResult result;
    result.status = DecodeStatus::Malformed;
    result.error =
        "unknown request type " + std::to_string(type) + " for protocol " + std::string(to_string(generation));
    return result;
  }
  const auto body = in.substr(1);
  Reader scan(body, limits, false);
  if (Step step = read_body(scan, *op, out); step != Step::Ok) return finish(step, scan);
  Reader fill(body, limits, true);
  out.op = *op;
  DecodeResult result = finish(read_body(fill, *op, out), fill);
  result.used += 1;  // the type byte
  return result;
}

void append_u8(std::string& out, std::uint8_t value) { out.push_back(static_cast<char>(value)); }
void append_u32(std::string& out, std::uint32_t value) { append_le(out, value, 4); }
void append_i64(std::string& out, std::int64_t value) { append_le(out, static_cast<std::uint64_t>(value), 8); }

void append_bytes(std::string& out, std::string_view bytes) {
  append_le(out, bytes.size(), 8);
  out.append(bytes);
}

bool encode_request(const Request& request, Generation generation, std::string& out) {
  const auto type = wire_type(request.op, generation);
  if (!type) return false;
  const auto key = [&](std::size_t i) -> std::string_view {
    return i < request.keys.size() ? std::string_view(request.keys[i]) : std::string_view();
  };
  const auto value = [&](std::size_t i) -> std::string_view {
    return i < request.values.size() ? std::string_view(request.values[i]) : std::string_view();
  };
  append_u8(out, *type);
  switch (request.op) {
    case Op::Validate:
    case Op::Ping: append_u32(out, static_cast<std::uint32_t>(request.number)); break;
    case Op::Set:
    case Op::Append:
    case Op::QueuePush:
      append_bytes(out, key(0));
      append_bytes(out, value(0));
      break;
    case Op::CompareSet:
      append_bytes(out, key(0));
      append_bytes(out, value(0));
      append_bytes(out, value(1));
      break;
    case Op::Get:
    case Op::DeleteKey:
    case Op::WatchKey:
    case Op::QueuePop:
    case Op::QueueLen: append_bytes(out, key(0)); break;
    case Op::Add:
    case Op::Barrier:
      append_bytes(out, key(0));
      append_i64(out, request.number);
      break;
    case Op::Check:
    case Op::Wait:
    case Op::MultiGet:
      append_i64(out, static_cast<std::int64_t>(request.keys.size()));
      for (const auto& k : request.keys) append_bytes(out, k);
      break;
    case Op::MultiSet:
      append_i64(out, static_cast<std::int64_t>(request.keys.size()));
      for (std::size_t i = 0; i < request.keys.size(); ++i) {
        append_bytes(out, key(i));
        append_bytes(out, value(i));
      }
      break;
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::ListKeys: break;
  }
  return true;
}

std::uint32_t read_u32(std::string_view in) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(in[static_cast<std::size_t>(i)]);
  return v;
}

std::int64_t read_i64(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(in[static_cast<std::size_t>(i)]);
  return static_cast<std::int64_t>(v);
}

}  // namespace rankrun::rendezvous
