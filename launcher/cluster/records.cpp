#include "launcher/cluster/records.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include "base/parse_number.hpp"
#include "launcher/types/json.hpp"
#include "worker_runtime/collective_protocol.hpp"

namespace rankrun::launcher::cluster {
namespace {

// Records are JSON objects that begin with what they are and the version of the format:
// {"record":"node","version":2,...}. Unknown members are ignored (a newer rankrun of the same
// version may add some); another version is refused, and foreign_record() says why.
constexpr int k_record_version = 2;

constexpr std::size_t k_max_line = 1024;        // one stderr line or row in a record
constexpr std::size_t k_max_lines = 20;         // stderr lines in a notice, rows are not cut
constexpr std::size_t k_max_error_text = 8192;  // error message and traceback, each

std::string shortened(std::string_view v, std::size_t max) {
  if (v.size() <= max) return std::string(v);
  return std::string(v.substr(0, max)) + "...";
}

std::string write(std::string_view type, const Json& members) {
  Json record = {{"record", type}, {"version", k_record_version}};
  for (const auto& [key, value] : members.items()) record[key] = value;
  return json_text(record);
}

// The record's JSON when `text` is one of `type` in this version; nullopt otherwise.
std::optional<Json> read(std::string_view text, std::string_view type) {
  if (text.size() > k_max_record) return std::nullopt;
  auto record = Json::parse(text, nullptr, false);
  if (!record.is_object()) return std::nullopt;
  const auto kind = record.find("record");
  const auto version = record.find("version");
  if (kind == record.end() || *kind != type || version == record.end() || *version != k_record_version) {
    return std::nullopt;
  }
  return record;
}

// Reads members into named slots; `ok` turns false when one has the wrong type or range.
struct Reader {
  const Json& record;
  bool ok = true;
  std::string text(const char* key) {
    const auto it = record.find(key);
    if (it == record.end()) return {};
    if (!it->is_string()) ok = false;
    return it->is_string() ? it->get<std::string>() : std::string();
  }
  bool has(const char* key) const { return record.contains(key); }
  int number(const char* key, int fallback = 0) {
    const auto it = record.find(key);
    if (it == record.end()) return fallback;
    if (!it->is_number_integer() || *it < std::numeric_limits<int>::min() || *it > std::numeric_limits<int>::max()) {
      ok = false;
      return fallback;
    }
    return it->get<int>();
  }
  bool flag(const char* key, bool fallback = false) {
    const auto it = record.find(key);
    if (it == record.end()) return fallback;
    if (!it->is_boolean()) ok = false;
    return it->is_boolean() ? it->get<bool>() : fallback;
  }
  std::vector<std::string> all(const char* key) {
    std::vector<std::string> out;
    const auto it = record.find(key);
    if (it == record.end()) return out;
    if (!it->is_array()) ok = false;
    for (const auto& v : *it) {
      if (v.is_string())
        out.push_back(v.get<std::string>());
      else
        ok = false;
    }
    return out;
  }
};

const char* kind_name(StopKind k) {
  switch (k) {
    case StopKind::Failure: return "failure";
    case StopKind::Signal: return "signal";
    case StopKind::Hang: return "hang";
    case StopKind::NodeLost: return "node-lost";
    case StopKind::Success: return "success";
    case StopKind::Membership: return "membership";
    case StopKind::Internal: return "internal";
  }
  return "failure";
}

std::optional<StopKind> kind_of(std::string_view s) {
  for (auto k : {StopKind::Failure, StopKind::Signal, StopKind::Hang, StopKind::NodeLost, StopKind::Success,
                 StopKind::Membership, StopKind::Internal}) {
    if (s == kind_name(k)) return k;
  }
  return std::nullopt;
}

std::string node_text(int node_rank, const std::string& host) {
  return host.empty() ? fmt::format("node {}", node_rank) : fmt::format("node {} ({})", node_rank, host);
}

}  // namespace

std::string node_key(int node_rank) { return "node/" + std::to_string(node_rank); }
std::string lease_key(int node_rank) { return "lease/" + std::to_string(node_rank); }
std::string stop_key(int attempt) { return "stop/" + std::to_string(attempt); }
std::string final_key(int node_rank) { return "final/" + std::to_string(node_rank); }
std::string ready_key(int attempt, int node_rank) {
  return "attempt/" + std::to_string(attempt) + "/ready/" + std::to_string(node_rank);
}
std::string open_key(int attempt) { return "attempt/" + std::to_string(attempt) + "/open"; }
std::string done_key(int attempt, int node_rank) {
  return "attempt/" + std::to_string(attempt) + "/done/" + std::to_string(node_rank);
}

int attempt_id(int round, int attempt_in_round) {
  return round < 0 ? attempt_in_round : round * k_max_attempts_per_round + attempt_in_round;
}

std::string join_key(std::string_view instance) { return "join/" + std::string(instance); }
std::string assign_key(std::string_view instance) { return "assign/" + std::string(instance); }
std::string spare_key(std::string_view instance) { return "spare/" + std::string(instance); }
std::string round_map_key(int round, int page) {
  return "round/" + std::to_string(round) + "/map/" + std::to_string(page);
}
std::string lease_prefix(int round) { return round < 0 ? "lease/" : "round/" + std::to_string(round) + "/lease/"; }

std::optional<std::string> instance_in_join_key(std::string_view key) {
  constexpr std::string_view prefix = "join/";
  if (key.substr(0, prefix.size()) != prefix || key.size() == prefix.size() || key.size() > 200) return std::nullopt;
  return std::string(key.substr(prefix.size()));
}

std::optional<std::pair<int, int>> done_in_key(std::string_view key) {
  constexpr std::string_view prefix = "attempt/";
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  key.remove_prefix(prefix.size());
  const auto slash = key.find("/done/");
  if (slash == std::string_view::npos) return std::nullopt;
  const auto attempt = parse_number<int>(key.substr(0, slash));
  const auto node = parse_number<int>(key.substr(slash + 6));
  if (!attempt || !node || *attempt < 0 || *node < 0) return std::nullopt;
  return std::pair{*attempt, *node};
}

std::optional<int> node_in_key(std::string_view key, std::string_view prefix) {
  if (key.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto v = parse_number<int>(key.substr(prefix.size()));
  if (!v || *v < 0) return std::nullopt;
  return v;
}

std::string encode(const NodeRecord& r) {
  return write("node", {{"node_rank", r.node_rank},
                        {"host", r.host},
                        {"nproc", r.nproc},
                        {"run_id", r.run_id},
                        {"instance", r.instance}});
}

std::optional<NodeRecord> decode_node(std::string_view text) {
  const auto record = read(text, "node");
  if (!record) return std::nullopt;
  Reader in{*record};
  NodeRecord r;
  r.node_rank = in.number("node_rank", -2);
  r.host = in.text("host");
  r.nproc = in.number("nproc", 0);
  r.run_id = in.text("run_id");
  r.instance = in.text("instance");
  // -1: an elastic node that had no rank yet (join/<instance>).
  if (!in.ok || r.node_rank < -1 || r.nproc <= 0 || r.host.empty()) return std::nullopt;
  return r;
}

std::vector<std::string> encode_pages(const RoundRecord& r) {
  std::vector<std::string> pages;
  Json page;
  std::size_t size = 0;
  const auto flush = [&] {
    pages.push_back(write("round", page));
    page = nullptr;
    size = 0;
  };
  for (std::size_t i = 0; i < r.members.size(); ++i) {
    const auto& m = r.members[i];
    Json node = {m.nproc, m.host};
    const auto node_size = json_text(node).size() + 1;
    if (!page.is_null() && size + node_size > k_max_record / 2) flush();
    if (page.is_null()) {
      page = {{"round", r.round}, {"first", i}, {"run_id", m.run_id}, {"nodes", Json::array()}};
      size = json_text(page).size() + 32;
    }
    size += node_size;
    page["nodes"].push_back(std::move(node));
  }
  if (!page.is_null()) flush();
  return pages;
}

std::optional<RoundRecord> decode_pages(const std::vector<std::string>& pages, int round, int count) {
  RoundRecord r;
  r.round = round;
  for (const auto& text : pages) {
    const auto record = read(text, "round");
    if (!record) return std::nullopt;
    Reader in{*record};
    const auto run_id = in.text("run_id");
    if (in.number("round", -1) != round || in.number("first", -1) != static_cast<int>(r.members.size()) || !in.ok) {
      return std::nullopt;
    }
    const auto nodes = record->find("nodes");
    if (nodes == record->end() || !nodes->is_array()) return std::nullopt;
    for (const auto& node : *nodes) {
      if (!node.is_array() || node.size() != 2 || !node[0].is_number_integer() || !node[1].is_string() ||
          node[0] <= 0 || node[0] > std::numeric_limits<int>::max() || node[1].get_ref<const std::string&>().empty()) {
        return std::nullopt;
      }
      NodeRecord m;
      m.node_rank = static_cast<int>(r.members.size());
      m.host = node[1].get<std::string>();
      m.nproc = node[0].get<int>();
      m.run_id = run_id;
      r.members.push_back(std::move(m));
      if (static_cast<int>(r.members.size()) > count) return std::nullopt;
    }
  }
  if (count <= 0 || static_cast<int>(r.members.size()) != count) return std::nullopt;
  return r;
}

std::string encode(const Assignment& a) {
  return write("assign", {{"round", a.round}, {"node_rank", a.node_rank}, {"nodes", a.nodes}, {"pages", a.pages}});
}

std::optional<Assignment> decode_assignment(std::string_view text) {
  const auto record = read(text, "assign");
  if (!record) return std::nullopt;
  Reader in{*record};
  Assignment a{in.number("round", -1), in.number("node_rank", -1), in.number("nodes", -1), in.number("pages", -1)};
  if (!in.ok || a.round < 0 || a.node_rank < 0 || a.node_rank >= a.nodes || a.pages <= 0 || a.pages > a.nodes) {
    return std::nullopt;
  }
  return a;
}

bool natural_less(std::string_view a, std::string_view b) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      auto ei = i, ej = j;
      while (ei < a.size() && digit(a[ei])) ++ei;
      while (ej < b.size() && digit(b[ej])) ++ej;
      // Compare the runs as numbers without converting: skip leading zeros, then length, then text.
      auto si = i, sj = j;
      while (si + 1 < ei && a[si] == '0') ++si;
      while (sj + 1 < ej && b[sj] == '0') ++sj;
      if (ei - si != ej - sj) return ei - si < ej - sj;
      if (const auto c = a.substr(si, ei - si).compare(b.substr(sj, ej - sj)); c != 0) return c < 0;
      if (ei - i != ej - j) return ei - i < ej - j;  // "02" after "2": fewer leading zeros first
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

const NodeSpan* NodeMap::node_of_rank(int rank) const {
  for (const auto& n : nodes) {
    if (rank >= n.first_rank && rank < n.first_rank + n.nproc) return &n;
  }
  return nullptr;
}

NodeMap plan_nodes(std::vector<NodeRecord> records, int nnodes) {
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.node_rank < b.node_rank; });
  NodeMap map;
  for (int i = 0; i < nnodes; ++i) {
    const bool have =
        static_cast<std::size_t>(i) < records.size() && records[static_cast<std::size_t>(i)].node_rank == i;
    if (!have) throw std::invalid_argument(fmt::format("no node announced node rank {} of {}", i, nnodes));
  }
  if (records.size() != static_cast<std::size_t>(nnodes)) {
    throw std::invalid_argument(fmt::format("{} nodes announced themselves for --nnodes={}", records.size(), nnodes));
  }
  for (const auto& r : records) {
    if (r.run_id != records.front().run_id) {
      throw std::invalid_argument(
          fmt::format("node {} ({}) runs --rdzv-id={} but node 0 ({}) runs --rdzv-id={}; give every node "
                      "the same id",
                      r.node_rank, r.host, r.run_id, records.front().host, records.front().run_id));
    }
    map.nodes.push_back(NodeSpan{r.node_rank, r.host, r.nproc, map.world_size});
    map.world_size += r.nproc;
  }
  return map;
}

std::string ranks_of(const NodeSpan& node) {
  if (node.nproc == 1) return fmt::format("rank {}", node.first_rank);
  return fmt::format("ranks {}-{}", node.first_rank, node.first_rank + node.nproc - 1);
}

std::string format_node_map(const NodeMap& map) {
  std::string out;
  for (const auto& n : map.nodes) out += fmt::format("node {} {}: {}\n", n.node_rank, n.host, ranks_of(n));
  return out;
}

std::vector<int> missing_nodes(const std::vector<int>& arrived, int nnodes) {
  const std::set<int> seen(arrived.begin(), arrived.end());
  std::vector<int> out;
  for (int i = 0; i < nnodes; ++i) {
    if (!seen.count(i)) out.push_back(i);
  }
  return out;
}

std::string format_waiting(const std::vector<int>& arrived, int nnodes, double seconds_left) {
  const std::set<int> seen(arrived.begin(), arrived.end());
  std::vector<int> present(seen.begin(), seen.end());
  const auto missing = missing_nodes(present, nnodes);
  std::string out = fmt::format("waiting for nodes: {} of {} arrived", present.size(), nnodes);
  if (!present.empty()) out += " (" + rankrun::worker::format_rank_list(present) + ")";
  if (!missing.empty()) {
    out +=
        fmt::format("; missing node{} {}", missing.size() == 1 ? "" : "s", rankrun::worker::format_rank_list(missing));
  }
  out += fmt::format("; {:.0f} s left", std::max(0.0, seconds_left));
  return out;
}

std::vector<int> parse_roster(std::string_view text) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    if (const auto v = parse_number<int>(text.substr(start, end - start)); v && *v >= 0) out.push_back(*v);
    start = end + 1;
  }
  return out;
}

int StopNotice::exit_code() const {
  JobEnding e;
  switch (kind) {
    case StopKind::Failure:
      e.reason = StopReason::Failure;
      e.root = status;
      break;
    case StopKind::Signal:
      e.reason = StopReason::Signal;
      e.signal = signo;
      e.preempted = preempted;
      break;
    case StopKind::Hang: e.reason = StopReason::Hang; break;
    case StopKind::NodeLost: e.reason = StopReason::NodeLost; break;
    case StopKind::Success: e.reason = StopReason::None; break;
    case StopKind::Membership:
      e.reason = StopReason::Membership;
      break;  // only when no new round may follow (a signal came)
    case StopKind::Internal: e.reason = StopReason::Internal; break;
  }
  return launcher::exit_code(e);
}

std::string StopNotice::describe() const {
  switch (kind) {
    case StopKind::Failure:
      return fmt::format(
          "rank {} (local {}) on {} {}", rank, local_rank, node_text(node_rank, host),
          status.signaled ? "was killed by " + status.describe() : "exited with code " + std::to_string(status.value));
    case StopKind::Signal:
      return fmt::format("rankrun on {} received {}{}", node_text(node_rank, host), signal_name(signo),
                         preempted ? " after the preemption signal" : "");
    case StopKind::Hang: return fmt::format("a hang was detected on {}", node_text(node_rank, host));
    case StopKind::NodeLost:
      return fmt::format("{} was lost ({}): its lease lapsed", node_text(node_rank, host), ranks);
    case StopKind::Success: return "every rank on every node exited 0";
    case StopKind::Membership:
      return fmt::format("{}; restarting with {} node{}, round {}", why, next_nodes, next_nodes == 1 ? "" : "s",
                         next_round);
    case StopKind::Internal:
      return fmt::format("rankrun on {} could not go on: {}", node_text(node_rank, host), report);
  }
  return {};
}

std::string encode(const StopNotice& n) {
  Json f = {{"kind", kind_name(n.kind)}, {"node_rank", n.node_rank}, {"host", n.host}, {"restartable", n.restartable}};
  switch (n.kind) {
    case StopKind::Failure: {
      f["rank"] = n.rank;
      f["local_rank"] = n.local_rank;
      f["signaled"] = n.status.signaled;
      f["value"] = n.status.value;
      f["error_file"] = shortened(n.error_file, k_max_line);
      if (n.ms >= 0) {
        f["ms"] = n.ms;
        f["ms_exact"] = n.ms_exact;
      }
      if (n.error) {
        f["error_message"] = shortened(n.error->message, k_max_error_text);
        f["error_traceback"] = shortened(n.error->traceback, k_max_error_text);
        f["error_timestamp"] = shortened(n.error->timestamp, k_max_line);
      }
      Json& tail = f["stderr"] = Json::array();
      const auto first = n.stderr_tail.size() > k_max_lines ? n.stderr_tail.size() - k_max_lines : 0;
      for (auto i = first; i < n.stderr_tail.size(); ++i) tail.push_back(shortened(n.stderr_tail[i], k_max_line));
      break;
    }
    case StopKind::Signal:
      f["signo"] = n.signo;
      f["preempted"] = n.preempted;
      break;
    case StopKind::Hang:
    case StopKind::Internal: f["report"] = shortened(n.report, k_max_error_text); break;
    case StopKind::NodeLost: f["ranks"] = n.ranks; break;
    case StopKind::Success: break;
    case StopKind::Membership:
      f["why"] = shortened(n.why, k_max_line);
      f["next_round"] = n.next_round;
      f["next_nodes"] = n.next_nodes;
      break;
  }
  return write("stop", f);
}

std::optional<StopNotice> decode_notice(std::string_view text) {
  const auto record = read(text, "stop");
  if (!record) return std::nullopt;
  Reader in{*record};
  StopNotice n;
  const auto kind = kind_of(in.text("kind"));
  if (!kind) return std::nullopt;
  n.kind = *kind;
  n.node_rank = in.number("node_rank", -1);
  n.host = in.text("host");
  n.restartable = in.flag("restartable");
  n.rank = in.number("rank", -1);
  n.local_rank = in.number("local_rank", -1);
  n.status = in.flag("signaled") ? ExitStatus::killed(in.number("value")) : ExitStatus::exited(in.number("value"));
  n.error_file = in.text("error_file");
  n.ms = in.has("ms") ? in.number("ms", -1) : -1;
  n.ms_exact = in.flag("ms_exact", true);
  if (in.has("error_message") || in.has("error_traceback")) {
    n.error = ErrorRecord{in.text("error_message"), in.text("error_traceback"), in.text("error_timestamp")};
  }
  n.stderr_tail = in.all("stderr");
  n.signo = in.number("signo");
  n.preempted = in.flag("preempted");
  n.ranks = in.text("ranks");
  n.why = in.text("why");
  n.report = in.text("report");
  n.next_round = in.number("next_round");
  n.next_nodes = in.number("next_nodes");
  if (!in.ok || n.node_rank < 0) return std::nullopt;
  if (n.kind == StopKind::Failure && (n.rank < 0 || n.local_rank < 0)) return std::nullopt;
  if (n.kind == StopKind::Signal && n.signo <= 0) return std::nullopt;
  return n;
}

std::string encode(const NodeFinal& f) {
  Json rows = Json::array();
  std::size_t size = 0;
  for (const auto& row : f.rows) {
    size += row.size();
    if (size > k_max_record / 2) {
      rows.push_back("...");
      break;
    }
    rows.push_back(shortened(row, k_max_line));
  }
  return write("final", {{"node_rank", f.node_rank}, {"host", f.host}, {"exit_code", f.exit_code}, {"rows", rows}});
}

std::optional<NodeFinal> decode_final(std::string_view text) {
  const auto record = read(text, "final");
  if (!record) return std::nullopt;
  Reader in{*record};
  NodeFinal f;
  f.node_rank = in.number("node_rank", -1);
  f.host = in.text("host");
  f.exit_code = in.number("exit_code");
  f.rows = in.all("rows");
  if (!in.ok || f.node_rank < 0) return std::nullopt;
  return f;
}

std::optional<std::string> foreign_record(std::string_view text) {
  constexpr std::string_view fix = "run the same rankrun version on every node";
  // Version 1 was "rankrun-<kind>/1" and key=value lines.
  if (text.rfind("rankrun-", 0) == 0) {
    const auto line = text.substr(0, std::min(text.find('\n'), std::size_t{40}));
    return fmt::format(
        "a node runs an older rankrun: its record is '{}' (version 1) and this rankrun reads version {}; {}", line,
        k_record_version, fix);
  }
  if (text.size() > k_max_record) return std::nullopt;
  const auto record = Json::parse(text, nullptr, false);
  if (!record.is_object() || !record.contains("record") || !record.contains("version")) return std::nullopt;
  const auto& version = record["version"];
  if (version == k_record_version) return std::nullopt;
  return fmt::format("a node runs another rankrun: its records are version {} and this rankrun reads version {}; {}",
                     json_text(version), k_record_version, fix);
}

std::string format_job_summary(const NodeMap& map, const std::vector<NodeFinal>& finals, const std::vector<int>& lost,
                               int exit_code) {
  std::string out = fmt::format("rankrun: job summary ({} nodes, {} ranks):\n", map.nodes.size(), map.world_size);
  for (const auto& node : map.nodes) {
    const auto f =
        std::find_if(finals.begin(), finals.end(), [&](const auto& x) { return x.node_rank == node.node_rank; });
    const bool was_lost = std::find(lost.begin(), lost.end(), node.node_rank) != lost.end();
    if (f != finals.end()) {
      out += fmt::format("  node {} {} ({}): exit {}\n", node.node_rank, node.host, ranks_of(node), f->exit_code);
      for (const auto& row : f->rows) out += "    " + row + '\n';
    } else {
      out += fmt::format("  node {} {} ({}): {}\n", node.node_rank, node.host, ranks_of(node),
                         was_lost ? "LOST (its lease lapsed; its ranks' results are unknown)" : "no report");
    }
  }
  out += fmt::format("rankrun: job exit code {}\n", exit_code);
  return out;
}

}  // namespace rankrun::launcher::cluster
