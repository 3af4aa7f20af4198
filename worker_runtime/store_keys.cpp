#include "rankrun/store_keys.hpp"

#include "base/parse_number.hpp"

namespace rankrun {
namespace {

// Splits off the text before the first space; nullopt when there is no space.
std::optional<std::string_view> take_token(std::string_view& text) {
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::string_view token = text.substr(0, space);
  text.remove_prefix(space + 1);
  return token;
}

}  // namespace

std::string heartbeat_key(int rank) { return std::string(k_heartbeat_prefix) + std::to_string(rank); }

std::string collective_record_key(int rank) { return std::string(k_collective_prefix) + std::to_string(rank); }

std::optional<int> rank_in_key(std::string_view key, std::string_view prefix) {
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto rank = parse_number<int>(key.substr(prefix.size()));
  if (!rank || *rank < 0) return std::nullopt;
  return rank;
}

std::string collective_key_base(std::string_view group, std::uint64_t seq) {
  std::string out = "rankrun/worker/";
  out += group;
  out += '/';
  out += std::to_string(seq);
  out += '/';
  return out;
}

std::string format_heartbeat(const HeartbeatValue& value) {
  std::string out = std::to_string(value.unix_ms) + " " + std::to_string(value.step);
  if (value.calls) out += " calls=" + std::to_string(*value.calls);
  if (value.batches) {
    out += " batches=" + std::to_string(value.batches->epoch) + ":" + std::to_string(value.batches->read) + "/" +
           std::to_string(value.batches->planned);
  }
  if (value.section) {
    out +=
        " section=" + std::to_string(value.section->since_ms) + ":" + std::to_string(value.section->timeout_ms) + ":";
    // One line, bounded: the name is the rest of the value.
    for (char c : value.section->name.substr(0, k_max_section_name)) out += (c == '\n' || c == '\r') ? ' ' : c;
  }
  return out;
}

namespace {

// Splits `text` at the first `separator`; nullopt when there is none.
std::optional<std::string_view> take_until(std::string_view& text, char separator) {
  const std::size_t at = text.find(separator);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view head = text.substr(0, at);
  text.remove_prefix(at + 1);
  return head;
}

std::optional<BatchCount> parse_batches(std::string_view text) {
  const auto epoch = take_until(text, ':');
  const auto read = take_until(text, '/');
  if (!epoch || !read) return std::nullopt;
  const auto e = parse_number<std::uint64_t>(*epoch);
  const auto r = parse_number<std::uint64_t>(*read);
  const auto p = parse_number<std::uint64_t>(text);
  if (!e || !r || !p) return std::nullopt;
  return BatchCount{*e, *r, *p};
}

std::optional<SectionValue> parse_section(std::string_view text) {
  const auto since = take_until(text, ':');
  const auto timeout = take_until(text, ':');
  if (!since || !timeout) return std::nullopt;
  const auto s = parse_number<std::int64_t>(*since);
  const auto t = parse_number<std::int64_t>(*timeout);
  if (!s || !t || *t < 0 || text.size() > k_max_section_name) return std::nullopt;
  return SectionValue{*s, *t, std::string(text)};
}

}  // namespace

std::optional<HeartbeatValue> parse_heartbeat(std::string_view text) {
  auto ms = take_token(text);
  if (!ms) return std::nullopt;
  auto unix_ms = parse_number<std::int64_t>(*ms);
  if (!unix_ms) return std::nullopt;
  HeartbeatValue value{*unix_ms, -1, std::nullopt, std::nullopt, std::nullopt};
  auto step_token = take_token(text);
  auto step = parse_number<std::int64_t>(step_token ? *step_token : text);
  if (!step) return std::nullopt;
  value.step = *step;
  if (!step_token) return value;
  constexpr std::string_view k_calls = "calls=";
  constexpr std::string_view k_batches = "batches=";
  constexpr std::string_view k_section = "section=";
  if (text.substr(0, k_calls.size()) == k_calls) {
    auto token = take_token(text);
    const std::string_view field = token ? *token : text;
    value.calls = parse_number<std::uint64_t>(field.substr(k_calls.size()));
    if (!value.calls) return std::nullopt;
    if (!token) return value;
  }
  if (text.substr(0, k_batches.size()) == k_batches) {
    auto token = take_token(text);
    const std::string_view field = token ? *token : text;
    value.batches = parse_batches(field.substr(k_batches.size()));
    if (!value.batches) return std::nullopt;
    if (!token) return value;
  }
  if (text.substr(0, k_section.size()) != k_section) return std::nullopt;
  value.section = parse_section(text.substr(k_section.size()));
  if (!value.section) return std::nullopt;
  return value;
}

std::string format_collective_record(const CollectiveRecord& record) {
  return record.kind + " #" + std::to_string(record.seq) + (record.entered ? " enter " : " exit ") + record.name;
}

std::optional<CollectiveRecord> parse_collective_record(std::string_view text) {
  CollectiveRecord record;
  auto kind = take_token(text);
  auto seq = take_token(text);
  auto phase = take_token(text);
  if (!kind || !seq || !phase || kind->empty() || seq->size() < 2 || (*seq)[0] != '#') return std::nullopt;
  auto number = parse_number<std::uint64_t>(seq->substr(1));
  if (!number) return std::nullopt;
  if (*phase == "enter")
    record.entered = true;
  else if (*phase == "exit")
    record.entered = false;
  else
    return std::nullopt;
  record.kind = std::string(*kind);
  record.seq = *number;
  record.name = std::string(text);
  return record;
}

}  // namespace rankrun
