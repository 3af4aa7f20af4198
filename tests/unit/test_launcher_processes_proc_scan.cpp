// find_job_processes() on real processes: the job's cgroup members (read from cgroup.procs files
// in a directory standing in for the cgroup) and the launcher's descendants, nothing else.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "launcher/processes/proc_scan.hpp"

using namespace rankrun::launcher;
namespace fs = std::filesystem;

namespace {

pid_t sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (;;) ::pause();
  }
  return pid;
}

std::set<pid_t> pids_of(const std::vector<ProcStat>& stats) {
  std::set<pid_t> out;
  for (const auto& s : stats) out.insert(s.pid);
  return out;
}

struct Temp {
  fs::path dir;
  Temp() {
    char name[] = "/tmp/rankrun-proc-scan-XXXXXX";
    dir = ::mkdtemp(name);
  }
  ~Temp() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

void write_file(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("the job's processes are its cgroup's members and the launcher's descendants") {
  // launcher: a child with two children of its own, one of them excluded (the guardian).
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    ::close(ready[0]);
    const pid_t a = sleeper();
    const pid_t b = sleeper();
    const pid_t both[2] = {a, b};
    [[maybe_unused]] const auto n = ::write(ready[1], both, sizeof both);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  pid_t grandchildren[2] = {0, 0};
  REQUIRE(::read(ready[0], grandchildren, sizeof grandchildren) == static_cast<ssize_t>(sizeof grandchildren));
  ::close(ready[0]);
  const pid_t member = sleeper();      // in the cgroup, not below the launcher
  const pid_t sub_member = sleeper();  // in a cgroup the job made below its own
  const pid_t stranger = sleeper();    // neither

  Temp cgroup;
  write_file(cgroup.dir / "cgroup.procs", std::to_string(member) + "\n");
  fs::create_directory(cgroup.dir / "sub");
  write_file(cgroup.dir / "sub" / "cgroup.procs", std::to_string(sub_member) + "\n");

  const auto members = cgroup_subtree_pids(cgroup.dir.string());
  REQUIRE(members);
  CHECK(std::set<pid_t>(members->begin(), members->end()) == std::set<pid_t>{member, sub_member});

  JobScope scope;
  scope.launcher = launcher;
  scope.excluded = {grandchildren[1]};
  scope.cgroup_path = "/not-a-cgroup-of-this-machine";
  scope.cgroup_dir = cgroup.dir.string();
  // The children lists are filled by the kernel at fork; the ready pipe was written after both.
  CHECK(pids_of(find_job_processes(scope)) == std::set<pid_t>{grandchildren[0], member, sub_member});

  SUBCASE("an unreadable cgroup falls back to reading every process") {
    scope.cgroup_dir = (cgroup.dir / "gone").string();
    CHECK_FALSE(cgroup_subtree_pids(scope.cgroup_dir));
    CHECK(pids_of(find_job_processes(scope)) == std::set<pid_t>{grandchildren[0]});
  }

  for (pid_t p : {launcher, member, sub_member, stranger}) ::kill(p, SIGKILL);
  for (pid_t p : {grandchildren[0], grandchildren[1]}) ::kill(p, SIGKILL);
  for (pid_t p : {launcher, member, sub_member, stranger}) ::waitpid(p, nullptr, 0);
}
