#include "launcher/config/options.hpp"

#include "base/parse_number.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string_view>

#include "launcher/config/gpu_list.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/types/launch_error.hpp"
#include "base/host_port.hpp"

namespace rankrun::launcher {

namespace {

StreamMask mask_of(int v) { return StreamMask{(v & 1) != 0, (v & 2) != 0}; }

}  // namespace

std::optional<int> parse_signal_name(const std::string& name) {
  std::string n = name;
  for (auto& ch : n) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (n.rfind("SIG", 0) == 0) n = n.substr(3);
  if (n == "USR1" || n == "10") return 10;
  if (n == "USR2" || n == "12") return 12;
  return std::nullopt;
}

std::vector<int> parse_stop_signals(const std::string& list) {
  std::vector<int> out = LaunchConfig{}.stop_signals;  // SIGHUP, SIGINT, SIGQUIT, SIGTERM
  for (const auto& item : split_at(list, ',')) {
    const std::string name(trim_blanks(item));
    if (name.empty()) continue;
    std::string upper = name;
    for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (upper.rfind("SIG", 0) != 0 && !std::isdigit(static_cast<unsigned char>(upper[0]))) upper = "SIG" + upper;
    int signo = 0;
    if (!parse_number(upper, signo)) signo = signal_number(upper).value_or(0);
    if (signo <= 0 || signal_name(signo).rfind("SIG", 0) != 0) {
      throw LaunchError("--signals-to-handle=" + list + ": '" + name +
                        "' is not a signal; write names such as SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1");
    }
    // Signals rankrun cannot take, or needs for itself (its children, its stops and continues),
    // and the faults, which are a process's own.
    static constexpr std::string_view k_refused[] = {"SIGKILL", "SIGSTOP", "SIGCHLD", "SIGCONT", "SIGPIPE",
                                                     "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGSEGV", "SIGBUS",
                                                     "SIGFPE",  "SIGILL",  "SIGTRAP", "SIGABRT", "SIGSYS"};
    const auto named = signal_name(signo);
    if (std::find(std::begin(k_refused), std::end(k_refused), named) != std::end(k_refused)) {
      throw LaunchError("--signals-to-handle=" + list + ": " + named +
                        " cannot stop a job (it cannot be handled, or rankrun needs it for itself); list signals such "
                        "as SIGTERM, SIGUSR1 or SIGUSR2");
    }
    out.push_back(signo);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> parse_filter_list(const std::string& list) {
  std::vector<std::string> out;
  std::string current;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i] != ',') {
      current += list[i];
    } else if (i + 1 < list.size() && list[i + 1] == ',') {
      current += ',';  // ",," is a comma inside one filter
      ++i;
    } else {
      if (!current.empty()) out.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

// Keys and values are read without the spaces around them, as torch reads them.
std::map<std::string, std::string> parse_rdzv_conf(const std::string& conf) {
  std::map<std::string, std::string> out;
  const auto trim = [](std::string_view s) { return std::string(trim_blanks(s)); };
  if (trim(conf).empty()) return out;
  for (const auto& kv : split_at(conf, ',')) {
    const auto eq = kv.find('=');
    const auto key = trim(kv.substr(0, eq));
    const auto value = eq == std::string::npos ? std::string() : trim(kv.substr(eq + 1));
    if (key.empty() || value.empty()) {
      throw LaunchError("--rdzv-conf entry '" + kv +
                        "' is not key=value; write e.g. --rdzv-conf=join_timeout=600,read_timeout=60");
    }
    out[key] = value;
  }
  return out;
}

std::optional<std::string> strip_stray_quotes(const std::string& text) {
  const auto is_quote = [](char c) { return c == '\'' || c == '"'; };
  std::size_t first = 0;
  std::size_t last = text.size();
  if (first < last && is_quote(text[first])) ++first;
  if (last > first && is_quote(text[last - 1])) --last;
  if (first == 0 && last == text.size()) return std::nullopt;
  return text.substr(first, last - first);
}

StreamMask StreamSpec::for_rank(int local_rank) const {
  const auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? all : it->second;
}

bool StreamSpec::any() const {
  if (all.out || all.err) return true;
  for (const auto& [rank, mask] : per_rank) {
    if (mask.out || mask.err) return true;
  }
  return false;
}

StreamSpec parse_stream_spec(const std::string& flag, const std::string& value) {
  const auto fail = [&] {
    return LaunchError(flag + "='" + value +
                       "' is not valid; use 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per local rank as 0:3,1:2");
  };
  StreamSpec spec;
  int v = 0;
  if (parse_number(value, v)) {
    if (v < 0 || v > 3) throw fail();
    spec.all = mask_of(v);
    return spec;
  }
  for (const auto& item : split_at(value, ',')) {
    const auto parts = split_at(item, ':');
    int rank = 0;
    if (parts.size() != 2 || !parse_number(parts[0], rank) || rank < 0 || !parse_number(parts[1], v) || v < 0 ||
        v > 3) {
      throw fail();
    }
    spec.per_rank[rank] = mask_of(v);
  }
  return spec;
}

std::vector<std::string> substitute_local_rank(const std::vector<std::string>& args, int local_rank) {
  static const std::string macro = "${local_rank}";
  std::vector<std::string> out = args;
  for (auto& arg : out) {
    for (auto at = arg.find(macro); at != std::string::npos; at = arg.find(macro, at)) {
      const auto value = std::to_string(local_rank);
      arg.replace(at, macro.size(), value);
      at += value.size();
    }
  }
  return out;
}

std::pair<std::string, int> parse_endpoint(const std::string& flag, const std::string& value) {
  const auto split = split_host_port(value);
  switch (split.problem) {
    case SplitHostPort::Problem::None: break;
    case SplitHostPort::Problem::NoClosingBracket:
      throw LaunchError(flag + "=" + value + " has no closing ']'; write e.g. [fd00::1]:29400");
    case SplitHostPort::Problem::JunkAfterBracket:
      throw LaunchError(flag + "=" + value + " is not HOST[:PORT]; write e.g. [fd00::1]:29400");
  }
  const auto& host = split.host;
  if (host.empty()) throw LaunchError(flag + "=" + value + " names no host; write HOST[:PORT], e.g. node1:29400");
  int port = 0;
  if (split.port && (!parse_number(*split.port, port) || port < 1 || port > 65535)) {
    throw LaunchError(flag + "=" + value + ": '" + *split.port + "' is not a TCP port; use 1-65535, e.g. " + host +
                      ":29400");
  }
  return {host, port};
}

bool endpoint_is_local(const std::string& endpoint_host, const std::vector<std::string>& endpoint_addresses,
                       const std::vector<std::string>& local_addresses, const std::vector<std::string>& local_names) {
  const auto has = [](const std::vector<std::string>& list, const std::string& v) {
    return std::find(list.begin(), list.end(), v) != list.end();
  };
  if (has(local_names, endpoint_host) || has(local_addresses, endpoint_host)) return true;
  // A name that resolves to loopback here (127.0.1.1 for the host name on Debian) would make
  // every node the host; only the interface addresses that other nodes can reach count.
  const bool loopback_endpoint = endpoint_host == "localhost" || is_loopback_address(endpoint_host);
  for (const auto& a : endpoint_addresses) {
    if (!loopback_endpoint && is_loopback_address(a)) continue;
    if (has(local_addresses, a)) return true;
  }
  return false;
}

std::string store_bind_address(const LaunchConfig& c) {
  static const std::set<std::string, std::less<>> loopback_names = {"localhost", "localhost.localdomain",
                                                                    "ip6-localhost", "ip6-loopback"};
  const bool loopback = is_loopback_address(c.master_addr) || loopback_names.count(c.master_addr) > 0;
  if (c.rdzv == RdzvKind::C10d && c.nnodes > 1 && loopback) return "::";
  return c.master_addr;
}

}  // namespace rankrun::launcher
