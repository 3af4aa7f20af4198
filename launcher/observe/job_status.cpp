#include "launcher/observe/job_status.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/http/error.hpp>
#include <cmath>
#include <ctime>

#include "launcher/observe/http_answer.hpp"

namespace rankrun::launcher::observe {

namespace {

std::string seconds_text(std::optional<double> s) {
  if (!s) return "-";
  const double v = std::max(0.0, *s);
  if (v < 10) return fmt::format("{:.1f}s", v);
  if (v < 3600) return fmt::format("{:.0f}s", v);
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(v / 3600), std::floor(std::fmod(v, 3600) / 60));
}

std::string bytes_text(std::optional<std::uint64_t> b) {
  if (!b) return "-";
  constexpr double k_mib = 1024.0 * 1024.0;
  const double mib = static_cast<double>(*b) / k_mib;
  if (mib >= 1024) return fmt::format("{:.1f}G", mib / 1024);
  return fmt::format("{:.0f}M", mib);
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]);
    i = j;
  }
  return out;
}

// Prometheus: a label value escaped (backslash, quote, newline).
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void add_hang_clocks(JobStatus& s) {
  s.stuck_seconds.reset();
  s.stragglers.clear();
  bool any_running = false, all_waiting = true, any_waiting = false;
  double least_still = 0;
  for (const auto& r : s.ranks) {
    if (!r.running) continue;
    const bool waiting = !r.in.empty();
    any_waiting = any_waiting || waiting;
    if (!waiting || !r.still_seconds) {
      all_waiting = false;
    } else {
      least_still = any_running ? std::min(least_still, *r.still_seconds) : *r.still_seconds;
    }
    any_running = true;
  }
  if (any_running && all_waiting) s.stuck_seconds = least_still;
  if (any_waiting) {
    for (const auto& r : s.ranks) {
      if (r.running && r.in.empty()) s.stragglers.push_back(r.rank);
    }
  }
}

std::string format_status(const JobStatus& s) {
  std::string out;
  out += fmt::format("rankrun: {}: {}, restarts {} of {}{}, up {}\n", s.entrypoint.empty() ? "job" : s.entrypoint,
                     s.state, s.attempt, s.max_restarts, s.round >= 0 ? fmt::format(", round {}", s.round) : "",
                     seconds_text(s.uptime_seconds));
  out += fmt::format("  world size {}, {} node{}", s.world_size, s.nnodes, s.nnodes == 1 ? "" : "s");
  if (!s.run_id.empty() && s.run_id != "none") out += ", run id " + s.run_id;
  if (!s.view.empty()) out += "; other nodes' ranks as " + s.view + " sees them";
  out += '\n';
  if (s.nnodes > 1) {
    for (const auto& n : s.nodes) {
      out += fmt::format("  node {:<3} {:<24} {}{}{}\n", n.node_rank, n.host, n.lost ? "LOST" : "up",
                         n.lease_age ? ", lease " + seconds_text(n.lease_age) + " ago" : "",
                         n.progress_age ? ", progress " + seconds_text(n.progress_age) + " ago" : "");
    }
  }
  out += fmt::format("  {:<5} {:<5} {:<4} {:<8} {:<18} {:<16} {:>7} {:>7} {:>6} {:>6}  {}\n", "rank", "local", "node",
                     "pid", "state", "in", "still", "cpu", "rss", "gpu", "at");
  for (const auto& r : s.ranks) {
    out += fmt::format("  {:<5} {:<5} {:<4} {:<8} {:<18} {:<16} {:>7} {:>7} {:>6} {:>6}  {}\n", r.rank, r.local_rank,
                       r.node_rank, r.pid > 0 ? std::to_string(r.pid) : "-", r.state, r.in.empty() ? "-" : r.in,
                       seconds_text(r.still_seconds), seconds_text(r.cpu_seconds), bytes_text(r.rss_bytes),
                       bytes_text(r.gpu_bytes), r.at.empty() ? "-" : r.at);
  }
  std::string steps;
  std::string sections;
  for (const auto& r : s.ranks) {
    if (r.step && *r.step >= 0) {
      steps += fmt::format("{}rank {} {}{}", steps.empty() ? "" : ", ", r.rank, *r.step,
                           r.steps_per_second ? fmt::format(" ({:.3g}/s)", *r.steps_per_second) : "");
    }
    if (!r.section.empty()) {
      sections += fmt::format("{}rank {} in '{}' for {} of {}", sections.empty() ? "" : ", ", r.rank, r.section,
                              seconds_text(r.section_seconds), seconds_text(r.section_timeout));
    }
  }
  if (!steps.empty()) out += "  steps: " + steps + "\n";
  if (!sections.empty()) out += "  sections: " + sections + "\n";
  std::string bound;
  for (const auto& r : s.ranks) {
    if (!r.cpus.empty()) bound += fmt::format("{}rank {} on {}", bound.empty() ? "" : ", ", r.rank, r.cpus);
  }
  if (!bound.empty()) out += "  CPUs (--numa-binding): " + bound + "\n";
  if (s.stuck_seconds) {
    out += fmt::format(
        "  hang clock: every running rank waits in collectives, none moving for {}{}\n", seconds_text(s.stuck_seconds),
        s.progress_timeout ? fmt::format(" of --progress-timeout={:.0f}s", *s.progress_timeout) : " (off)");
  } else {
    out += "  hang clock: not running (some running rank is outside the collectives, or moving)\n";
  }
  if (!s.stragglers.empty()) {
    out += fmt::format(
        "  straggler{}: rank{} {} outside the collectives while others wait{}\n", s.stragglers.size() == 1 ? "" : "s",
        s.stragglers.size() == 1 ? "" : "s", ranks_text(s.stragglers),
        s.straggler_timeout ? fmt::format(" (a hang after --straggler-timeout={:.0f}s)", *s.straggler_timeout) : "");
  }
  return out;
}

std::string status_json(const JobStatus& s) {
  Json out = {{"schema", s.schema},
              {"state", s.state},
              {"entrypoint", s.entrypoint},
              {"run_id", s.run_id},
              {"node_rank", s.node_rank},
              {"nnodes", s.nnodes},
              {"world_size", s.world_size},
              {"attempt", s.attempt},
              {"max_restarts", s.max_restarts},
              {"round", s.round},
              {"uptime_seconds", json_seconds(s.uptime_seconds)},
              {"attempt_seconds", json_seconds(s.attempt_seconds)},
              {"view", s.view}};
  Json& nodes = out["nodes"] = Json::array();
  for (const auto& n : s.nodes) {
    nodes.push_back({{"node_rank", n.node_rank},
                     {"host", n.host},
                     {"lease_age_seconds", json_seconds(n.lease_age)},
                     {"progress_age_seconds", json_seconds(n.progress_age)},
                     {"lost", n.lost},
                     {"self", n.self}});
  }
  Json& ranks = out["ranks"] = Json::array();
  for (const auto& r : s.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"local_rank", r.local_rank},
                     {"node_rank", r.node_rank},
                     {"pid", r.pid},
                     {"state", r.state},
                     {"running", r.running},
                     {"in", r.in},
                     {"still_seconds", json_seconds(r.still_seconds)},
                     {"at", r.at},
                     {"cpu_seconds", json_seconds(r.cpu_seconds)},
                     {"rss_bytes", json_or_null(r.rss_bytes)},
                     {"gpu_bytes", json_or_null(r.gpu_bytes)},
                     {"gpu", r.gpu},
                     {"cpus", r.cpus},
                     {"step", json_or_null(r.step)},
                     {"steps_per_second", json_seconds(r.steps_per_second)},
                     {"section", r.section.empty() ? Json(nullptr) : Json(r.section)},
                     {"section_seconds", json_seconds(r.section_seconds)},
                     {"section_timeout_seconds", json_seconds(r.section_timeout)}});
  }
  out["progress_timeout_seconds"] = json_seconds(s.progress_timeout);
  out["straggler_timeout_seconds"] = json_seconds(s.straggler_timeout);
  out["stuck_seconds"] = json_seconds(s.stuck_seconds);
  out["stragglers"] = s.stragglers;
  Json& causes = out["restarts_by_cause"] = Json::object();
  for (const auto& [cause, n] : s.restarts_by_cause) causes[cause] = n;
  out["store"] = s.store
                     ? Json{{"connections", s.store->connections}, {"keys", s.store->keys}, {"bytes", s.store->bytes}}
                     : Json(nullptr);
  return json_text(out);
}

std::string prometheus_text(const JobStatus& s) {
  std::string out;
  const auto head = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  const std::string node = fmt::format("node_rank=\"{}\"", s.node_rank);
  head("rankrun_info", "gauge", "The job this rankrun runs (always 1).");
  out += fmt::format("rankrun_info{{{},entrypoint=\"{}\",run_id=\"{}\",schema=\"{}\"}} 1\n", node, label(s.entrypoint),
                     label(s.run_id), s.schema);
  head("rankrun_world_size", "gauge", "Ranks in the job.");
  out += fmt::format("rankrun_world_size{{{}}} {}\n", node, s.world_size);
  head("rankrun_attempt", "gauge", "The attempt running (0 before the first restart).");
  out += fmt::format("rankrun_attempt{{{}}} {}\n", node, s.attempt);
  head("rankrun_uptime_seconds", "gauge", "Seconds since rankrun started the job.");
  out += fmt::format("rankrun_uptime_seconds{{{}}} {:.3f}\n", node, s.uptime_seconds);
  head("rankrun_restarts_total", "counter", "Restarts of the worker group, by cause.");
  if (s.restarts_by_cause.empty()) out += fmt::format("rankrun_restarts_total{{{},cause=\"none\"}} 0\n", node);
  for (const auto& [cause, n] : s.restarts_by_cause) {
    out += fmt::format("rankrun_restarts_total{{{},cause=\"{}\"}} {}\n", node, label(cause), n);
  }
  // Ranks by state: running, exited, and running ranks waiting in a collective.
  std::map<std::string, int> by_state{{"running", 0}, {"exited", 0}, {"in_collective", 0}};
  for (const auto& r : s.ranks) {
    if (r.running)
      ++by_state["running"];
    else
      ++by_state["exited"];
    if (r.running && !r.in.empty()) ++by_state["in_collective"];
  }
  head("rankrun_ranks", "gauge", "Ranks of the job by state (in_collective: running ranks waiting in a collective).");
  for (const auto& [state, n] : by_state) out += fmt::format("rankrun_ranks{{{},state=\"{}\"}} {}\n", node, state, n);
  head("rankrun_rank_still_seconds", "gauge",
       "Seconds since each running rank last moved (stack, CPU, output, collectives).");
  for (const auto& r : s.ranks) {
    if (r.running && r.still_seconds) {
      out += fmt::format("rankrun_rank_still_seconds{{{},rank=\"{}\",rank_node=\"{}\",collective=\"{}\"}} {:.3f}\n",
                         node, r.rank, r.node_rank, label(r.in), *r.still_seconds);
    }
  }
  head("rankrun_rank_step", "gauge", "The step each rank last reported (rankrun.progress.step, the runtime's step()).");
  for (const auto& r : s.ranks) {
    if (r.step && *r.step >= 0) out += fmt::format("rankrun_rank_step{{{},rank=\"{}\"}} {}\n", node, r.rank, *r.step);
  }
  head("rankrun_rank_steps_per_second", "gauge", "Each rank's steps per second over the last minute of reports.");
  for (const auto& r : s.ranks) {
    if (r.steps_per_second)
      out += fmt::format("rankrun_rank_steps_per_second{{{},rank=\"{}\"}} {:.4f}\n", node, r.rank, *r.steps_per_second);
  }
  head("rankrun_rank_section_seconds", "gauge", "How long each rank has been inside the section it declared.");
  for (const auto& r : s.ranks) {
    if (!r.section.empty() && r.section_seconds) {
      out += fmt::format("rankrun_rank_section_seconds{{{},rank=\"{}\",section=\"{}\"}} {:.3f}\n", node, r.rank,
                         label(r.section), *r.section_seconds);
    }
  }
  head("rankrun_rank_cpu_seconds_total", "counter", "CPU time of each running rank of this node.");
  for (const auto& r : s.ranks) {
    if (r.cpu_seconds)
      out += fmt::format("rankrun_rank_cpu_seconds_total{{{},rank=\"{}\"}} {:.3f}\n", node, r.rank, *r.cpu_seconds);
  }
  head("rankrun_rank_resident_bytes", "gauge", "Resident memory of each running rank of this node.");
  for (const auto& r : s.ranks) {
    if (r.rss_bytes)
      out += fmt::format("rankrun_rank_resident_bytes{{{},rank=\"{}\"}} {}\n", node, r.rank, *r.rss_bytes);
  }
  head("rankrun_rank_gpu_memory_bytes", "gauge", "GPU memory each running rank of this node holds (NVML).");
  for (const auto& r : s.ranks) {
    if (r.gpu_bytes) {
      out += fmt::format("rankrun_rank_gpu_memory_bytes{{{},rank=\"{}\",gpu=\"{}\"}} {}\n", node, r.rank, label(r.gpu),
                         *r.gpu_bytes);
    }
  }
  head("rankrun_hang_stuck_seconds", "gauge",
       "Seconds every running rank has waited in collectives with none moving (0: not stuck).");
  out += fmt::format("rankrun_hang_stuck_seconds{{{}}} {:.3f}\n", node, s.stuck_seconds.value_or(0));
  head("rankrun_hang_progress_timeout_seconds", "gauge", "--progress-timeout (0: off).");
  out += fmt::format("rankrun_hang_progress_timeout_seconds{{{}}} {:.3f}\n", node, s.progress_timeout.value_or(0));
  head("rankrun_stragglers", "gauge", "Running ranks outside the collectives while others wait in them.");
  out += fmt::format("rankrun_stragglers{{{}}} {}\n", node, s.stragglers.size());
  head("rankrun_nodes", "gauge", "Nodes of the job by state.");
  int lost = 0;
  for (const auto& n : s.nodes) lost += n.lost ? 1 : 0;
  out += fmt::format("rankrun_nodes{{{},state=\"up\"}} {}\n", node, s.nnodes - lost);
  out += fmt::format("rankrun_nodes{{{},state=\"lost\"}} {}\n", node, lost);
  head("rankrun_node_lease_age_seconds", "gauge", "Seconds since each node's lease was refreshed (on the store host).");
  for (const auto& n : s.nodes) {
    if (n.lease_age) {
      out += fmt::format("rankrun_node_lease_age_seconds{{{},node=\"{}\"}} {:.3f}\n", node, n.node_rank, *n.lease_age);
    }
  }
  if (s.store) {
    head("rankrun_store_connections", "gauge", "Open connections of the store this node hosts.");
    out += fmt::format("rankrun_store_connections{{{}}} {}\n", node, s.store->connections);
    head("rankrun_store_keys", "gauge", "Keys the store this node hosts holds for the workers.");
    out += fmt::format("rankrun_store_keys{{{}}} {}\n", node, s.store->keys);
    head("rankrun_store_bytes", "gauge", "Bytes of keys and values the store this node hosts holds for the workers.");
    out += fmt::format("rankrun_store_bytes{{{}}} {}\n", node, s.store->bytes);
  }
  return out;
}

std::string event_line(std::string_view type, double unix_seconds, int node_rank, const Json& fields) {
  const auto whole = static_cast<std::time_t>(std::floor(unix_seconds));
  const int millis = static_cast<int>((unix_seconds - static_cast<double>(whole)) * 1000);
  std::tm tm{};
  ::gmtime_r(&whole, &tm);
  Json line = {{"schema", k_schema},
               {"type", type},
               {"time", fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                                    tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, std::clamp(millis, 0, 999))},
               {"unix", json_seconds(unix_seconds)},
               {"node", node_rank}};
  if (fields.is_object()) {
    for (const auto& [key, value] : fields.items()) line[key] = value;
  }
  return json_text(line);
}

std::optional<std::string> answer_status_request(std::string_view line, const JobStatus& status) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  if (line == "status") return format_status(status);
  if (line == "status json") return status_json(status) + "\n";
  if (line == "metrics") return prometheus_text(status);
  return std::nullopt;
}

std::string answer_http_request(std::string_view head, const JobStatus& status) {
  if (head.size() > k_max_http_request) return "";
  HttpParser parser;
  bound_http_parser(parser);
  boost::system::error_code ec;
  parser.put(boost::beast::net::const_buffer(head.data(), head.size()), ec);
  if (ec == boost::beast::http::error::need_more) parser.put_eof(ec);  // it ends before its blank line
  if (ec) {
    const auto refused = answer_http_error(ec);
    return refused ? http_text(*refused) : "";
  }
  return http_text(answer_http(parser.get(), status));
}

}  // namespace rankrun::launcher::observe
