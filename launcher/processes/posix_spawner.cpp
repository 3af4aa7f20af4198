#include "launcher/posix_spawner.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/io.hpp>
#include <cerrno>
#include <climits>
#include <cstring>

#include "launcher/launch_error.hpp"

namespace rankrun::launcher {
namespace bp = boost::process;

namespace {

bool is_executable_file(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0 && ::access(path.c_str(), F_OK) == 0;
}

// Runs in the child between fork and exec: only async-signal-safe calls.
void prepare_child(pid_t parent, int cgroup_procs_fd) {
  // Default dispositions first: a signal arriving now must not run rankrun's handlers here.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  // Into the job cgroup before exec, so that everything the worker starts is in it from the
  // first instruction on ("0" is the writer itself). On failure the tree walk still finds it.
  if (cgroup_procs_fd >= 0) {
    [[maybe_unused]] const auto n = ::write(cgroup_procs_fd, "0", 1);
  }
  // Own session and process group: killpg() then reaches the worker's children too, and a
  // Ctrl-C on the terminal reaches rankrun only, which forwards it.
  ::setsid();
  // Die with rankrun. The race: rankrun may have died before prctl ran.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  // Nothing of rankrun's (the store's listening socket, other workers' pipes) may outlive
  // exec in the worker: a leaked listening socket keeps the port bound after rankrun exits.
  if (::syscall(SYS_close_range, 3U, UINT_MAX, CLOSE_RANGE_CLOEXEC) != 0) {
    for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Blocks every signal in rankrun while it forks, so that no handler of rankrun's can run in
// the child before prepare_child() resets the dispositions.
class SignalBlock {
 public:
  SignalBlock() {
    sigset_t all;
    sigfillset(&all);
    ::sigprocmask(SIG_BLOCK, &all, &m_old);
  }
  ~SignalBlock() { ::sigprocmask(SIG_SETMASK, &m_old, nullptr); }
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

 private:
  sigset_t m_old;
};

}  // namespace

std::string resolve_executable(const std::string& name, const std::string& path_env, const std::string& what) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), F_OK) != 0) {
      throw LaunchError(what + " '" + name + "' does not exist; check the path");
    }
    if (!is_executable_file(name)) {
      throw LaunchError(what + " '" + name + "' is not executable; chmod +x it, or drop --no-python to run it with Python");
    }
    return name;
  }
  std::size_t start = 0;
  while (start <= path_env.size()) {
    auto colon = path_env.find(':', start);
    if (colon == std::string::npos) colon = path_env.size();
    std::string dir = path_env.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = colon + 1;
  }
  throw LaunchError(what + " '" + name + "' was not found on PATH; give its full path" +
                    (what == "Python interpreter" ? std::string(" with PYTHON_EXEC=/usr/bin/python3") : std::string()));
}

SpawnedWorker spawn_worker(boost::asio::io_context& io, const std::vector<std::string>& argv, const EnvMap& env,
                           int cgroup_procs_fd) {
  SpawnedWorker w;
  w.out = std::make_unique<bp::async_pipe>(io);
  w.err = std::make_unique<bp::async_pipe>(io);
  bp::environment child_env;
  for (const auto& [key, value] : env) child_env[key] = value;
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  const pid_t parent = ::getpid();

  SignalBlock block;
  std::error_code ec;
  bp::child child(bp::exe = argv.front(), bp::args = args, child_env, bp::std_out > *w.out, bp::std_err > *w.err,
                  bp::extend::on_exec_setup = [parent, cgroup_procs_fd](auto&) { prepare_child(parent, cgroup_procs_fd); }, ec);
  if (ec) {
    throw LaunchError("cannot start '" + argv.front() + "': " + ec.message());
  }
  w.pid = child.id();
  // rankrun reaps its children itself (SIGCHLD + waitpid), also the orphans it adopts as a
  // subreaper; the child object must neither wait nor kill.
  child.detach();
  return w;
}

}  // namespace rankrun::launcher
