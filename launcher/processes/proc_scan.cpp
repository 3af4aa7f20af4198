#include "base/read_file.hpp"
#include "launcher/processes/proc_scan.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include <cstdio>
#include <map>
#include <set>
#include <memory>

#include "base/unique_fd.hpp"

namespace rankrun::launcher {

namespace {

std::optional<pid_t> pid_from_dirent(const char* name) {
  pid_t pid = 0;
  for (const char* c = name; *c; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
    pid = pid * 10 + (*c - '0');
  }
  return pid > 0 ? std::optional<pid_t>(pid) : std::nullopt;
}

// The pids of a kernel list: cgroup.procs (one a line), task/TID/children (space-separated).
void append_pids(const std::string& text, std::vector<pid_t>& out) {
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find_first_of(" \n", start);
    if (end == std::string::npos) end = text.size();
    if (const auto pid = pid_from_dirent(text.substr(start, end - start).c_str())) out.push_back(*pid);
    start = end + 1;
  }
}

bool in_cgroup(pid_t pid, const std::string& path) {
  if (path.empty()) return false;
  const auto text = read_file_head("/proc/" + std::to_string(pid) + "/cgroup", 64 * 1024);
  if (!text) return false;
  const auto mine = cgroup2_path(*text);
  // Sub-cgroups a job process made for itself are the job's too.
  return mine && (*mine == path || mine->rfind(path + "/", 0) == 0);
}

bool marked(pid_t pid, const std::string& job_id) {
  const auto env = read_file_head("/proc/" + std::to_string(pid) + "/environ");
  return env && environ_has_job(*env, job_id);
}

}  // namespace

std::string make_job_id() {
  unsigned long long value = 0;
  if (::getrandom(&value, sizeof value, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof value)) {
    value = (static_cast<unsigned long long>(::getpid()) << 32) ^ static_cast<unsigned long long>(::time(nullptr));
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", value);
  return text;
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  const auto text = read_file_head("/proc/" + std::to_string(pid) + "/stat", 4096);
  return text ? parse_proc_stat(*text) : std::nullopt;
}

std::vector<ProcStat> read_all_proc_stats() {
  std::vector<ProcStat> all;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/proc"), ::closedir);
  if (!dir) return {};
  while (const dirent* d = ::readdir(dir.get())) {
    const auto pid = pid_from_dirent(d->d_name);
    if (!pid) continue;
    if (auto stat = read_proc_stat(*pid)) all.push_back(std::move(*stat));  // else gone meanwhile
  }
  return all;
}

std::vector<pid_t> process_tree(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const auto& p : read_all_proc_stats()) children[p.ppid].push_back(p.pid);
  std::vector<pid_t> out{root};
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (pid_t c : children[out[i]]) out.push_back(c);
  }
  return out;
}

std::optional<std::vector<pid_t>> cgroup_subtree_pids(const std::string& dir) {
  const auto own = read_file_head(dir + "/cgroup.procs");
  if (!own) return std::nullopt;
  std::vector<pid_t> pids;
  std::vector<std::string> pending{dir};
  std::optional<std::string> text = own;
  // Breadth first, bounded: a job may make sub-cgroups of its own, not thousands of levels.
  for (std::size_t i = 0; i < pending.size() && i < 4096; ++i) {
    if (i > 0) text = read_file_head(pending[i] + "/cgroup.procs");
    if (text) {
      append_pids(*text, pids);
    }
    std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(pending[i].c_str()), ::closedir);
    if (!d) continue;
    while (const dirent* e = ::readdir(d.get())) {
      if (e->d_type == DT_DIR && e->d_name[0] != '.') pending.push_back(pending[i] + "/" + e->d_name);
    }
  }
  return pids;
}

namespace {

// The children of every thread of `pid` (/proc/PID/task/TID/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const auto task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(task_dir.c_str()), ::closedir);
  if (!d) return out;
  while (const dirent* e = ::readdir(d.get())) {
    if (!pid_from_dirent(e->d_name)) continue;
    const auto text = read_file_head(task_dir + "/" + e->d_name + "/children", 1 << 20);
    if (!text) continue;
    append_pids(*text, out);
  }
  return out;
}

// The job's processes from its cgroup's members and the launcher's descendants alone.
std::optional<std::vector<ProcEntry>> job_entries_from_cgroup(const JobScope& scope) {
  const auto members = cgroup_subtree_pids(scope.cgroup_dir);
  if (!members) return std::nullopt;
  std::set<pid_t> in_cgroup(members->begin(), members->end());
  std::set<pid_t> seen;
  std::vector<ProcEntry> all;
  const auto add = [&](pid_t pid) {
    if (!seen.insert(pid).second) return false;
    auto stat = read_proc_stat(pid);
    if (!stat) return false;  // gone meanwhile
    ProcEntry e;
    e.in_job_cgroup = in_cgroup.count(pid) > 0;
    e.stat = std::move(*stat);
    all.push_back(std::move(e));
    return true;
  };
  for (pid_t pid : *members) add(pid);
  if (scope.launcher > 0) {
    // Descendants that left the cgroup (or are not in it yet): the launcher is a subreaper, so
    // they stay below it. job_processes() sorts out the excluded ones.
    std::vector<pid_t> queue = children_of(scope.launcher);
    for (std::size_t i = 0; i < queue.size() && i < 100000; ++i) {
      if (!seen.count(queue[i]) && !add(queue[i])) continue;
      for (pid_t c : children_of(queue[i])) {
        if (!seen.count(c)) queue.push_back(c);
      }
    }
  }
  return all;
}

// Python's resource trackers among them: their command lines (a Python's only; 4 KiB at most).
std::vector<ProcStat> with_resource_trackers(std::vector<ProcStat> job) {
  for (auto& p : job) {
    if (p.comm.rfind("python", 0) != 0) continue;
    if (const auto cmdline = read_file_head("/proc/" + std::to_string(p.pid) + "/cmdline", 4096))
      p.resource_tracker = is_python_resource_tracker(*cmdline);
  }
  return job;
}

}  // namespace

std::vector<ProcStat> find_job_processes(const JobScope& scope) {
  if (!scope.scan_markers && !scope.cgroup_dir.empty()) {
    if (auto all = job_entries_from_cgroup(scope))
      return with_resource_trackers(job_processes(*all, scope.launcher, scope.excluded));
  }
  std::vector<ProcEntry> all;
  for (auto& stat : read_all_proc_stats()) {
    ProcEntry e;
    e.in_job_cgroup = in_cgroup(stat.pid, scope.cgroup_path);
    e.marked = scope.scan_markers && !e.in_job_cgroup && marked(stat.pid, scope.job_id);
    e.stat = std::move(stat);
    all.push_back(std::move(e));
  }
  return with_resource_trackers(job_processes(all, scope.launcher, scope.excluded));
}

bool belongs_to_job(pid_t pid, const JobScope& scope) {
  for (pid_t ex : scope.excluded) {
    if (pid == ex) return false;
  }
  if (pid == scope.launcher) return false;
  if (in_cgroup(pid, scope.cgroup_path)) return true;
  if (scope.launcher > 0) {
    // Up the parent chain: rankrun is a subreaper, so every process of the job has it as an
    // ancestor while it lives.
    pid_t p = pid;
    for (int depth = 0; depth < 4096 && p > 1; ++depth) {
      const auto st = read_proc_stat(p);
      if (!st) break;
      if (st->ppid == scope.launcher) {
        bool excluded = false;
        for (pid_t ex : scope.excluded) excluded = excluded || st->pid == ex;
        if (!excluded) return true;
        break;
      }
      p = st->ppid;
    }
  }
  return marked(pid, scope.job_id);
}

void kill_processes(const std::vector<ProcStat>& targets) {
  for (const auto& t : targets) {
    const auto now = read_proc_stat(t.pid);
    if (!now || now->start_time != t.start_time) continue;  // exited; the pid may be reused
    ::kill(t.pid, SIGKILL);
  }
}

}  // namespace rankrun::launcher
