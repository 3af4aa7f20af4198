#include "launcher/report/failure_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "launcher/types/exit_status.hpp"

namespace rankrun::launcher {
namespace {

std::string result_text(const RankReport& r, bool is_root) {
  if (!r.status) return r.pid > 0 ? "still running" : "not started";
  std::string text;
  if (r.stopped_by_rankrun && !is_root) {
    text = r.status->signaled ? "terminated by rankrun (" + r.status->describe() + ")"
                              : "terminated by rankrun (exited " + std::to_string(r.status->value) + ")";
  } else if (r.status->signaled) {
    text = "killed by " + r.status->describe();
  } else {
    text = "exit " + std::to_string(r.status->value);
  }
  return text;
}

void indent_into(std::string& out, const std::string& text, const char* prefix) {
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out += prefix;
    out.append(text, start, nl - start);
    out += '\n';
    start = nl + 1;
  }
}

// True when `line`, without surrounding blanks, is one of the lines of `text`.
bool appears_in(std::string_view text, std::string_view line) {
  const auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
    return v;
  };
  const auto wanted = trim(line);
  if (wanted.empty()) return true;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    if (trim(text.substr(start, nl - start)) == wanted) return true;
    start = nl + 1;
  }
  return false;
}

// The job-wide notice when the job ended because of something that did not happen on this node
// (nullptr when the root cause, if any, is local).
const cluster::StopNotice* remote_cause(const RunSummary& s) {
  if (!s.job_notice || s.job_notice->kind == cluster::StopKind::Success) return nullptr;
  const auto& n = *s.job_notice;
  if (n.kind == cluster::StopKind::Failure && s.root && s.ranks[static_cast<std::size_t>(*s.root)].rank == n.rank)
    return nullptr;
  if ((n.kind == cluster::StopKind::Signal && s.reason == StopReason::Signal) ||
      (n.kind == cluster::StopKind::Hang && s.reason == StopReason::Hang)) {
    return nullptr;
  }
  return &n;
}

std::string remote_headline(const std::string& entrypoint, const cluster::StopNotice& n) {
  if (n.kind == cluster::StopKind::Failure)
    return fmt::format("rankrun: {} FAILED on node {} ({})", entrypoint, n.node_rank, n.host);
  return fmt::format("rankrun: {} stopped: {}", entrypoint, n.describe());
}

// The root cause's error record and the last lines of its stderr.
void add_evidence(std::string& out, const std::vector<std::string>& stderr_tail,
                  const std::optional<ErrorRecord>& error, const std::string& error_file) {
  if (error) {
    if (!error->message.empty()) out += "  error: " + error->message + '\n';
    if (!error->traceback.empty()) {
      out += "  traceback (from " + error_file + "):\n";
      indent_into(out, error->traceback, "    ");
    }
  }
  // With a traceback from the error file, a few lines of stderr are enough context, and the
  // lines that repeat the traceback (a worker prints it to stderr too) are not shown again.
  const bool traceback = error && !error->traceback.empty();
  std::vector<const std::string*> lines;
  for (const auto& line : stderr_tail) {
    if (!traceback || !appears_in(error->traceback, line)) lines.push_back(&line);
  }
  const std::size_t tail = std::min(lines.size(), traceback ? std::size_t{5} : lines.size());
  if (tail > 0) {
    out += fmt::format("  last {} line{} of its stderr:\n", tail, tail == 1 ? "" : "s");
    for (auto it = lines.end() - static_cast<std::ptrdiff_t>(tail); it != lines.end(); ++it)
      out += "    " + **it + '\n';
  }
}

}  // namespace

std::string hint_for(const RankReport& rank, bool pinned) {
  const auto mentions = [&rank](const char* needle) {
    const auto has = [needle](const std::string& s) { return s.find(needle) != std::string::npos; };
    return std::any_of(rank.stderr_tail.begin(), rank.stderr_tail.end(), has) ||
           (rank.error && (has(rank.error->message) || has(rank.error->traceback)));
  };
  if (pinned && mentions("invalid device ordinal")) {
    return "rankrun gives each worker exactly one GPU (CUDA_VISIBLE_DEVICES), so inside the worker it is cuda:0; "
           "this script picks a device by LOCAL_RANK (local rank " +
           std::to_string(rank.local_rank) +
           "). Use cuda:0, or rerun with --virtual-local-rank (LOCAL_RANK=0), or --no-pin for torchrun's behaviour.";
  }
  return {};
}

std::string format_summary(const RunSummary& s) {
  std::string out;
  const std::string border(72, '=');
  out += border + '\n';
  std::string headline;
  const auto* remote = remote_cause(s);
  const std::string on_node = s.node_label.empty() ? "" : " on " + s.node_label;
  switch (s.reason) {
    case StopReason::None:
      headline = fmt::format("rankrun: {} finished: all {} ranks exited 0", s.entrypoint, s.ranks.size());
      break;
    case StopReason::Failure: headline = fmt::format("rankrun: {} FAILED{}", s.entrypoint, on_node); break;
    case StopReason::Signal:
      headline =
          fmt::format("rankrun: {} stopped: rankrun{} received {}{}", s.entrypoint, on_node,
                      signal_name(s.signal.value_or(0)), s.preempted ? " after the preemption signal (preempted)" : "");
      break;
    case StopReason::Hang: headline = fmt::format("rankrun: {} HUNG{} and was stopped", s.entrypoint, on_node); break;
    case StopReason::Remote:
    case StopReason::Membership:
    case StopReason::NodeLost: headline = fmt::format("rankrun: {} stopped", s.entrypoint); break;
    case StopReason::StoreHostLost:
      headline = fmt::format("rankrun: {} stopped: {} lost the store host", s.entrypoint, s.node_label);
      break;
    case StopReason::Internal:
      headline = fmt::format("rankrun: {} stopped: rankrun{} could not go on", s.entrypoint, on_node);
      break;
  }
  if (remote) headline = remote_headline(s.entrypoint, *remote);
  // This node lost the rest of the job: that is the story, whatever its workers did after
  // (they fail when their peers go: they are victims, not the root cause).
  const bool host_lost = s.store_host_lost && !remote && !s.root_sent;
  const bool barrier_failed = host_lost && s.exit_code == k_exit_rendezvous;
  if (s.store_host_lost && !remote && s.root_sent) headline += ", then lost the store host";
  if (host_lost) {
    headline = barrier_failed ? fmt::format("rankrun: {} stopped: {}: the nodes were not all ready for the restart",
                                            s.entrypoint, s.node_label)
                              : fmt::format("rankrun: {} stopped: {} lost the store host", s.entrypoint, s.node_label);
  }
  out += headline;
  out += fmt::format(" ({:.2f}s", s.seconds);
  if (s.restart_count > 0) out += fmt::format(", after {} restart{}", s.restart_count, s.restart_count == 1 ? "" : "s");
  out += ")\n";

  // Root cause first, then the others by rank.
  std::vector<const RankReport*> order;
  for (const auto& r : s.ranks) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [&s](const RankReport* a, const RankReport* b) {
    const bool ra = s.root && a->local_rank == *s.root;
    const bool rb = s.root && b->local_rank == *s.root;
    if (ra != rb) return ra;
    return a->rank < b->rank;
  });
  out += fmt::format("  {:<6} {:<6} {:<9} {:<44} {}\n", "rank", "local", "pid", "result", "time");
  for (const auto* r : order) {
    const bool is_root = s.root && r->local_rank == *s.root;
    auto result = result_text(*r, is_root);
    if (is_root && !remote && !host_lost) result += "  <- root cause";
    if (remote && r->stopped_by_rankrun) {
      result += remote->kind == cluster::StopKind::Failure ? fmt::format(", because rank {} failed", remote->rank)
                                                           : std::string(", because the job stopped");
    }
    out += fmt::format("  {:<6} {:<6} {:<9} {:<44} {}{:.2f}s\n", r->rank, r->local_rank,
                       r->pid > 0 ? std::to_string(r->pid) : "-", result, r->seconds_exact ? "" : "by ", r->seconds);
  }

  if (s.reason != StopReason::None && !s.arrivals.empty()) out += "  store: " + s.arrivals + '\n';
  if (remote && remote->kind == cluster::StopKind::Failure) {
    out += std::string(72, '-') + '\n';
    out +=
        fmt::format("Root cause: {}{}\n", remote->describe(),
                    remote->ms >= 0 ? fmt::format(" {} {:.2f}s", remote->ms_exact ? "after" : "by", remote->ms / 1000.0)
                                    : std::string());
    add_evidence(out, remote->stderr_tail, remote->error, remote->error_file);
  } else if (remote) {
    out += std::string(72, '-') + '\n';
    out += fmt::format("Root cause: {}\n", remote->describe());
  } else if (host_lost) {
    out += std::string(72, '-') + '\n';
    out += barrier_failed ? fmt::format(
                                "Root cause: the nodes were not all ready for the restart within the rendezvous "
                                "timeout\n")
                          : fmt::format(
                                "Root cause: {} lost the store host (node 0, or the rendezvous host): it stopped "
                                "answering for --node-timeout\n",
                                s.node_label);
  } else if (s.reason == StopReason::Internal) {
    out += std::string(72, '-') + '\n';
    out += fmt::format("Root cause: rankrun{} could not go on: {}\n", on_node, s.own_failure);
    out += "  the workers it had started were stopped with their grace (--term-timeout); no restart follows\n";
  } else if (s.root) {
    const auto& r = s.ranks[static_cast<std::size_t>(*s.root)];
    out += std::string(72, '-') + '\n';
    out += fmt::format(
        "Root cause: rank {} (local_rank {}, pid {}){} {} {} {:.2f}s\n", r.rank, r.local_rank, r.pid, on_node,
        r.status && r.status->signaled ? "was killed by " + r.status->describe()
                                       : "exited with code " + std::to_string(r.status ? r.status->value : 0),
        r.seconds_exact ? "after" : "by", r.seconds);
    add_evidence(out, r.stderr_tail, r.error, r.error_file);
    // What NVML says of the rank's GPU now: a GPU that failed under it (an Xid) is named beside
    // the rank's own error.
    for (const auto& note : s.gpu_notes) out += "  its GPU: " + note + '\n';
    if (const auto hint = hint_for(r, s.pinned); !hint.empty()) out += "  hint: " + hint + '\n';
    if (!s.python.empty()) out += "  python: " + s.python + '\n';
  }
  out += fmt::format("rankrun: exit code {}", s.exit_code);
  if (remote) {
    switch (remote->kind) {
      case cluster::StopKind::Failure:
        out += fmt::format(" (rank {}'s, on node {})", remote->rank, remote->node_rank);
        break;
      case cluster::StopKind::Signal:
        out += remote->preempted
                   ? fmt::format(" (preempted, on node {})", remote->node_rank)
                   : fmt::format(" (128 + {}, on node {})", signal_name(remote->signo), remote->node_rank);
        break;
      case cluster::StopKind::Hang: out += fmt::format(" (hang detected on node {})", remote->node_rank); break;
      case cluster::StopKind::Internal:
        out += fmt::format(" (rankrun's own failure on node {})", remote->node_rank);
        break;
      case cluster::StopKind::NodeLost: out += fmt::format(" (node {} lost)", remote->node_rank); break;
      case cluster::StopKind::Membership: out += " (" + remote->why + ")"; break;
      case cluster::StopKind::Success: break;
    }
  } else if (host_lost) {
    out += barrier_failed ? " (the rendezvous failed)" : " (the store host was lost)";
  } else {
    switch (s.reason) {
      case StopReason::Failure:
        out += fmt::format(" (rank {}'s)", s.ranks[static_cast<std::size_t>(*s.root)].rank);
        break;
      case StopReason::Signal:
        out +=
            s.preempted ? std::string(" (preempted)") : fmt::format(" (128 + {})", signal_name(s.signal.value_or(0)));
        break;
      case StopReason::Hang: out += " (hang detected)"; break;
      case StopReason::StoreHostLost: out += " (the store host was lost)"; break;
      case StopReason::Internal: out += " (rankrun's own failure)"; break;
      case StopReason::None:
      case StopReason::Remote:
      case StopReason::Membership:
      case StopReason::NodeLost: break;
    }
  }
  out += '\n' + border + '\n';
  return out;
}

}  // namespace rankrun::launcher
