#include "launcher/processes/proc_parse.hpp"

#include "base/parse_number.hpp"

#include <vector>

namespace rankrun::launcher {

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto pos = s.find(sep, start);
    if (pos == std::string_view::npos) pos = s.size();
    parts.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
  return parts;
}

std::string unescape_mount_field(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' && s[i + 2] <= '7' &&
        s[i + 3] >= '0' && s[i + 3] <= '7') {
      const int value = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out += static_cast<char>(value);
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
  ProcStat st;
  auto pid_text = text.substr(0, open);
  while (!pid_text.empty() && pid_text.back() == ' ') pid_text.remove_suffix(1);
  if (!parse_number(pid_text, st.pid)) return std::nullopt;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  // After ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
  // stime cutime cstime priority nice num_threads itrealvalue starttime ... (proc(5)).
  std::vector<std::string_view> fields;
  for (auto f : split(text.substr(close + 1), ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  if (fields.size() < 20 || fields[0].size() != 1) return std::nullopt;
  st.state = fields[0][0];
  auto last = fields[19];
  while (!last.empty() && last.back() == '\n') last.remove_suffix(1);
  if (!parse_number(fields[1], st.ppid) || !parse_number(fields[2], st.pgrp) || !parse_number(fields[3], st.session) ||
      !parse_number(last, st.start_time)) {
    return std::nullopt;
  }
  unsigned long long utime = 0, stime = 0;
  if (parse_number(fields[11], utime) && parse_number(fields[12], stime)) st.cpu_ticks = utime + stime;
  return st;
}

ProcIdentity parse_proc_status(std::string_view text) {
  ProcIdentity id;
  for (const auto line : split(text, '\n')) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const auto key = line.substr(0, colon);
    if (key != "Uid" && key != "NStgid") continue;
    std::vector<std::string_view> fields;
    for (auto field : split(line.substr(colon + 1), '\t')) {
      while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
      while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
      if (!field.empty()) fields.push_back(field);
    }
    if (key == "Uid") {
      // real, effective, saved set, file system
      uid_t uid = 0, fsuid = 0;
      if (fields.size() == 4 && parse_number(fields[0], uid)) id.uid = uid;
      if (fields.size() == 4 && parse_number(fields[3], fsuid)) id.fsuid = fsuid;
    } else {
      pid_t own = 0;
      if (!fields.empty() && parse_number(fields.back(), own) && own > 0) {
        id.own_pid = own;
        id.pid_ns_depth = static_cast<int>(fields.size());
      }
    }
  }
  return id;
}

std::string describe_proc_state(char state) {
  switch (state) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "disk sleep";
    case 'T': return "stopped";
    case 't': return "tracing stop";
    case 'Z': return "zombie";
    case 'X': return "dead";
    case 'I': return "idle";
    default: return std::string("state ") + state;
  }
}

std::string job_marker_value(const std::optional<std::string>& inherited, std::string_view id) {
  if (!inherited || inherited->empty()) return std::string(id);
  return *inherited + ":" + std::string(id);
}

bool environ_has_job(std::string_view environ, std::string_view id) {
  if (id.empty()) return false;
  const std::string prefix = std::string(k_job_marker_var) + "=";
  for (auto entry : split(environ, '\0')) {
    if (entry.substr(0, prefix.size()) != prefix) continue;
    for (auto token : split(entry.substr(prefix.size()), ':')) {
      if (token == id) return true;
    }
  }
  return false;
}

std::optional<std::string> cgroup2_mount_point(std::string_view mounts) {
  for (auto line : split(mounts, '\n')) {
    const auto fields = split(line, ' ');
    if (fields.size() >= 3 && fields[2] == "cgroup2") return unescape_mount_field(fields[1]);
  }
  return std::nullopt;
}

std::optional<std::string> cgroup2_path(std::string_view proc_cgroup) {
  for (auto line : split(proc_cgroup, '\n')) {
    if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
  }
  return std::nullopt;
}

}  // namespace rankrun::launcher
