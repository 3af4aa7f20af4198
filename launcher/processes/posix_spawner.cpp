#include "launcher/processes/posix_spawner.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
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
#include <utility>

#include "launcher/types/launch_error.hpp"
#include "launcher/processes/user_signals.hpp"
#include "rendezvous/open_files.hpp"

namespace rankrun::launcher {
namespace bp = boost::process;

namespace {

bool is_executable_file(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0 && ::access(path.c_str(), F_OK) == 0;
}

// Runs in the child between fork and exec: only async-signal-safe calls.
// The worker's CPUs and memory node (--numa-binding), set in the child: a policy that fails
// here was refused already in rankrun's own check (launcher/host/numa_topology.hpp), and the
// worker runs with the kernel's default then.
void place_child(const cpu_set_t* cpus, int memory_node) {
  if (cpus != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), cpus);
  if (memory_node >= 0 && memory_node < 1024) {
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
    const auto bits = 8 * sizeof(unsigned long);
    mask[static_cast<std::size_t>(memory_node) / bits] |= 1UL << (static_cast<unsigned>(memory_node) % bits);
    ::syscall(SYS_set_mempolicy, 1 /* MPOL_PREFERRED */, mask, 1024UL);
  }
}

void prepare_child(pid_t parent, int cgroup_procs_fd, const rlimit& files) {
  // Default dispositions first: a signal arriving now must not run rankrun's handlers here.
  default_signals_for_exec();
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
  rendezvous::restore_open_files_limit(files);
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
      throw LaunchError(what + " '" + name +
                        "' is not executable; chmod +x it, or drop --no-python to run it with Python");
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

PosixSpawner::PosixSpawner(boost::asio::io_context& io, int cgroup_procs_fd, std::function<void()> before_reap,
                           rlimit worker_files)
    : m_io(io),
      m_cgroup_procs_fd(cgroup_procs_fd),
      m_worker_files(worker_files),
      m_before_reap(std::move(before_reap)),
      m_sigchld(io, SIGCHLD),
      m_exits(::epoll_create1(EPOLL_CLOEXEC)),
      m_continued_fd(io) {
  wait_sigchld();
  // SIGCONT is blocked in every thread of rankrun (block_continue_signal()); a signalfd says when
  // rankrun was continued after a stop, so that the exits it then sees are not taken as prompt.
  sigset_t cont;
  sigemptyset(&cont);
  sigaddset(&cont, SIGCONT);
  const int fd = ::signalfd(-1, &cont, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd >= 0) {
    m_continued_fd.assign(fd);
    wait_continued();
  }
}

PosixSpawner::~PosixSpawner() {
  boost::system::error_code ignored;
  m_sigchld.cancel(ignored);
  m_continued_fd.close(ignored);
  for (auto& s : m_slots) {
    if (s && s->running && s->pid > 0) {
      ::kill(-s->pid, SIGKILL);
      ::waitpid(s->pid, nullptr, 0);
    }
  }
}

void PosixSpawner::listen(WorkerListener listener) { m_listener = std::move(listener); }

PosixSpawner::Stream& PosixSpawner::stream(int slot, StreamId id) {
  auto& s = *m_slots[static_cast<std::size_t>(slot)];
  return id == StreamId::Out ? s.out : s.err;
}

void PosixSpawner::place(int slot, const WorkerPlacement& placement) {
  if (slot < 0) return;
  if (static_cast<std::size_t>(slot) >= m_placements.size()) m_placements.resize(static_cast<std::size_t>(slot) + 1);
  m_placements[static_cast<std::size_t>(slot)] = placement;
}

pid_t PosixSpawner::start(int slot, const std::vector<std::string>& argv, const EnvMap& env) {
  if (slot < 0) throw LaunchError("worker slot " + std::to_string(slot) + " is negative");
  if (static_cast<std::size_t>(slot) >= m_slots.size()) m_slots.resize(static_cast<std::size_t>(slot) + 1);
  auto& s = m_slots[static_cast<std::size_t>(slot)];
  s = std::make_unique<Slot>();
  s->out.pipe = std::make_unique<bp::async_pipe>(m_io);
  s->err.pipe = std::make_unique<bp::async_pipe>(m_io);
  bp::environment child_env;
  for (const auto& [key, value] : env) child_env[key] = value;
  const std::vector<std::string> args(argv.begin() + 1, argv.end());
  const pid_t parent = ::getpid();
  const int procs_fd = m_cgroup_procs_fd;
  const rlimit files = m_worker_files;
  const WorkerPlacement placement = static_cast<std::size_t>(slot) < m_placements.size()
                                        ? m_placements[static_cast<std::size_t>(slot)]
                                        : WorkerPlacement{};
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : placement.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }
  const cpu_set_t* cpus_ptr = placement.cpus.empty() ? nullptr : &cpus;
  const int memory_node = placement.memory_node;
  {
    SignalBlock block;
    std::error_code ec;
    bp::child child(
        bp::exe = argv.front(), bp::args = args, child_env, bp::std_out > *s->out.pipe, bp::std_err > *s->err.pipe,
        bp::extend::on_exec_setup =
            [parent, procs_fd, files, cpus_ptr, memory_node](auto&) {
              prepare_child(parent, procs_fd, files);
              place_child(cpus_ptr, memory_node);
            },
        ec);
    if (ec) throw LaunchError("cannot start '" + argv.front() + "': " + ec.message());
    s->pid = child.id();
    // rankrun reaps its children itself (reap_children()), also the orphans it adopts as a
    // subreaper; the child object must neither wait nor kill.
    child.detach();
  }
  // The worker is not reaped before reap_children(), so its pid is still its own here, even if
  // it has already exited (its pidfd is then readable at once).
  s->pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, s->pid, 0)));
  if (s->pidfd && m_exits) {
    epoll_event ev{};
    // One-shot: a worker is in the ready list once, at its place in the order of exits.
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.u64 = static_cast<std::uint64_t>(s->pid);
    if (::epoll_ctl(m_exits.get(), EPOLL_CTL_ADD, s->pidfd.get(), &ev) != 0) s->pidfd.reset();
  }
  s->running = true;
  s->out.open = s->err.open = true;
  m_earliest_exit = std::chrono::steady_clock::now();
  read(slot, StreamId::Out);
  read(slot, StreamId::Err);
  return s->pid;
}

void PosixSpawner::signal(int slot, int signo) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_slots.size()) return;
  const auto& s = m_slots[static_cast<std::size_t>(slot)];
  // The worker leads its own process group (setsid), so -pid reaches its children too.
  if (s && s->running && s->pid > 0) {
    ::kill(-s->pid, signo);
    s->signalled = true;
    m_earliest_exit = std::chrono::steady_clock::now();
  }
}

void PosixSpawner::stop_reading(int slot) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_slots.size() || !m_slots[static_cast<std::size_t>(slot)]) return;
  close(slot, StreamId::Out);
  close(slot, StreamId::Err);
}

void PosixSpawner::stop() {
  m_stopped = true;
  reap_children();
  boost::system::error_code ignored;
  m_sigchld.cancel(ignored);
  m_continued_fd.cancel(ignored);
}

void PosixSpawner::read(int slot, StreamId id) {
  auto& st = stream(slot, id);
  st.pipe->async_read_some(boost::asio::buffer(st.buffer),
                           [this, slot, id, &st](boost::system::error_code ec, std::size_t n) {
                             if (ec == boost::asio::error::operation_aborted || !st.open) return;
                             if (n > 0 && m_listener.output)
                               m_listener.output(slot, id, std::string_view(st.buffer.data(), n));
                             if (ec) {
                               close(slot, id);
                               return;
                             }
                             read(slot, id);
                           });
}

void PosixSpawner::close(int slot, StreamId id) {
  auto& st = stream(slot, id);
  if (!st.open) return;
  st.open = false;
  boost::system::error_code ignored;
  st.pipe->close(ignored);
  if (m_listener.closed) m_listener.closed(slot, id);
}

void PosixSpawner::wait_sigchld() {
  m_sigchld.async_wait([this](boost::system::error_code ec, int) {
    if (ec || m_stopped) return;
    reap_children();
    // The job may have ended in there (its last exit), stopping the spawner.
    if (!m_stopped) wait_sigchld();
  });
}

void PosixSpawner::wait_continued() {
  m_continued_fd.async_wait(boost::asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
    if (ec || m_stopped) return;
    note_continued();
    wait_continued();
  });
}

void PosixSpawner::note_continued() {
  if (!m_continued_fd.is_open()) return;
  bool any = false;
  while (::read(m_continued_fd.native_handle(), m_continued_buf.data(), m_continued_buf.size()) > 0) any = true;
  if (any) m_continued = std::chrono::steady_clock::now();
}

std::vector<pid_t> PosixSpawner::ended_in_order() {
  std::vector<pid_t> order;
  if (!m_exits) return order;
  std::array<epoll_event, 64> events{};
  while (true) {
    const int n = ::epoll_wait(m_exits.get(), events.data(), static_cast<int>(events.size()), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) order.push_back(static_cast<pid_t>(events[static_cast<std::size_t>(i)].data.u64));
    if (n < static_cast<int>(events.size())) break;
  }
  return order;
}

void PosixSpawner::reap_children() {
  if (m_before_reap) m_before_reap();
  // The order first: a worker that exits after this look is reaped below too, and comes after
  // every worker the ready list named, as it ended after them.
  const auto ready = ended_in_order();
  // SIGCHLD coalesces: collect every child that has exited, workers and adopted orphans alike.
  std::vector<ReapedChild> reaped;
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    reaped.push_back({pid, status});
  }
  const auto earliest = std::exchange(m_earliest_exit, std::chrono::steady_clock::now());
  if (reaped.empty()) return;
  note_continued();
  std::vector<pid_t> workers(m_slots.size(), -1);
  for (std::size_t i = 0; i < m_slots.size(); ++i) {
    if (m_slots[i] && m_slots[i]->running) workers[i] = m_slots[i]->pid;
  }
  auto exits = order_exits(ready, workers, reaped, std::chrono::steady_clock::now(), m_continued, earliest);
  order_by_records(exits, m_failure_record);
  // Every exit of the round is over before the first is reported: a signal the first one's
  // report sends (the stop) reaches none of the others.
  for (std::size_t i = 0; i < exits.size(); ++i) {
    auto& s = *m_slots[static_cast<std::size_t>(exits[i].slot)];
    s.running = false;
    s.pidfd.reset();  // closing it takes it out of the epoll set
    exits[i].seen.before_signal = i > 0 && !s.signalled;
  }
  for (const auto& e : exits) {
    if (m_slots[static_cast<std::size_t>(e.slot)]->pid != e.pid) continue;  // the slot was started anew
    if (m_listener.exited) m_listener.exited(e.slot, e.status, e.seen);
  }
}

}  // namespace rankrun::launcher
