#include "launcher/processes/guardian.hpp"

#include "base/parse_number.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <spdlog/spdlog.h>
#include <thread>

#include "launcher/processes/job_cgroup.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/processes/shm_tracker.hpp"
#include "launcher/processes/user_signals.hpp"

namespace rankrun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int k_pipe_fd = 3;

void say(const std::string& text) {
  const std::string line = "rankrun: guardian: " + text + "\n";
  [[maybe_unused]] const auto n = ::write(2, line.data(), line.size());
}

// rankrun is gone (or gave up): end the job and remove what it left.
void clean_up(const GuardianPlan& plan, std::map<std::string, ino_t> segments) {
  JobScope scope;
  scope.launcher = -1;
  scope.excluded = {::getpid()};
  scope.job_id = plan.job_id;
  scope.cgroup_path = plan.cgroup_path;
  scope.scan_markers = true;
  const ShmTracker::Belongs belongs = [&scope](pid_t pid) { return belongs_to_job(pid, scope); };
  // Before the kill: a creator must be alive to be confirmed. The same checks as rankrun's
  // (shm_names.hpp): another user's file named after a worker stays.
  const auto creator_of = [&belongs](pid_t pid) { return read_shm_creator(pid, belongs); };
  for (auto& entry : attributable_segments(plan.shm_dir, creator_of, own_pid_namespace())) segments.insert(entry);

  // As rankrun's own sweep: everything but Python's resource trackers first, the whole cgroup
  // once they have done their work or the settle time is over (decide_cleanup).
  const auto began = Clock::now();
  std::size_t killed = 0;
  std::optional<double> killing_since;
  const CleanupLimits limits;
  while (true) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - began).count();
    const auto decision = decide_cleanup(find_job_processes(scope), elapsed, killing_since, limits);
    if (decision.step == CleanupStep::Done) break;
    if (decision.step == CleanupStep::GiveUp) {
      for (const auto& p : decision.targets) say(describe_unkillable(p));
      break;
    }
    if (decision.step == CleanupStep::Kill && !killing_since) {
      if (!plan.cgroup_dir.empty()) cgroup_kill(plan.cgroup_dir);
      killing_since = elapsed;
    }
    kill_processes(decision.targets);
    killed = std::max(killed, decision.targets.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::size_t removed = 0;
  for (const auto& [name, ino] : segments) removed += remove_segment(plan.shm_dir, name, ino) ? 1 : 0;
  if (!plan.cgroup_dir.empty()) cgroup_remove(plan.cgroup_dir, 1.0);
  if (!plan.private_dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(plan.private_dir, ignored);
  }
  if (killed > 0 || removed > 0) {
    say("rankrun ended without cleaning up; killed " + std::to_string(killed) + " process" + (killed == 1 ? "" : "es") +
        ", removed " + std::to_string(removed) + " shared-memory segment" + (removed == 1 ? "" : "s"));
  }
}

[[noreturn]] void guardian_main(const GuardianPlan& plan) {
  ::setsid();  // no terminal signals, and not in rankrun's process group
  ignore_terminal_signals();
  if (const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC); null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
  }
  if (::chdir("/") != 0) {
    // stays where it is; only a busy mount would notice
  }
  std::map<std::string, ino_t> segments;
  std::string pending;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(k_pipe_fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<std::size_t>(n));
    for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line == "d") ::_exit(0);
      // "s <inode> <name>"
      if (line.size() > 2 && line[0] == 's') {
        const auto space = line.find(' ', 2);
        ino_t inode = 0;
        if (space != std::string::npos && parse_number(std::string_view(line).substr(2, space - 2), inode)) {
          segments[line.substr(space + 1)] = inode;
        }
      }
    }
  }
  clean_up(plan, std::move(segments));
  ::_exit(0);
}

}  // namespace

std::unique_ptr<Guardian> Guardian::start(const GuardianPlan& plan) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    spdlog::warn("cannot start the guardian ({}); if rankrun is killed, the job's processes may survive",
                 std::strerror(errno));
    return nullptr;
  }
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  const pid_t pid = ::fork();
  if (pid < 0) {
    spdlog::warn("cannot start the guardian ({}); if rankrun is killed, the job's processes may survive",
                 std::strerror(errno));
    return nullptr;
  }
  if (pid == 0) {
    // rankrun is single-threaded here (no thread is started before the guardian), so the
    // child may run ordinary code.
    ::dup2(read_end.get(), k_pipe_fd);
    int first_closed = k_pipe_fd + 1;
    if (plan.keep_fd >= 0) ::dup2(plan.keep_fd, first_closed++);
    if (::syscall(SYS_close_range, first_closed, UINT_MAX, 0) != 0) {
      for (int fd = first_closed; fd < 4096; ++fd) ::close(fd);
    }
    guardian_main(plan);
  }
  // A guardian that stops reading must never block rankrun: a lost name only means the
  // guardian relies on its own scan of /dev/shm.
  ::fcntl(write_end.get(), F_SETFL, O_NONBLOCK);
  return std::unique_ptr<Guardian>(new Guardian(pid, std::move(write_end)));
}

void Guardian::remember_segment(const std::string& name, ino_t inode) {
  if (!m_pipe || name.find('\n') != std::string::npos) return;
  const std::string line = "s " + std::to_string(inode) + " " + name + "\n";
  [[maybe_unused]] const auto n = ::write(m_pipe.get(), line.data(), line.size());
}

void Guardian::release() {
  if (!m_pipe) return;
  [[maybe_unused]] const auto n = ::write(m_pipe.get(), "d\n", 2);
  m_pipe.reset();
  // The guardian exits at once on "d". rankrun does not wait for it: its exit also tears down
  // the inotify instance it keeps, which takes milliseconds. Whoever adopts it reaps it.
}

}  // namespace rankrun::launcher
