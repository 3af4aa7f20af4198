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
  return std::to_string(value.unix_ms) + " " + std::to_string(value.step);
}

std::optional<HeartbeatValue> parse_heartbeat(std::string_view text) {
  auto ms = take_token(text);
  if (!ms) return std::nullopt;
  auto unix_ms = parse_number<std::int64_t>(*ms);
  auto step = parse_number<std::int64_t>(text);
  if (!unix_ms || !step) return std::nullopt;
  return HeartbeatValue{*unix_ms, *step};
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
