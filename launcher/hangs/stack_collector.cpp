#include "launcher/hangs/stack_collector.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <spdlog/spdlog.h>

#include "launcher/files/run_dir.hpp"
#include "launcher/hangs/flight_match.hpp"
#include "launcher/processes/proc_scan.hpp"

extern char** environ;

namespace rankrun::launcher {

namespace {

// How long samplers get to answer (they look once a second), ranks their signal handlers to
// write their stacks, and gdb to attach and print.
constexpr std::chrono::steady_clock::duration k_answer_wait = std::chrono::milliseconds(2500);
constexpr std::chrono::steady_clock::duration k_dump_wait = std::chrono::milliseconds(1500);
constexpr std::chrono::steady_clock::duration k_gdb_wait = std::chrono::seconds(20);
constexpr auto k_poll = std::chrono::milliseconds(100);

std::optional<std::string> find_gdb() {
  for (const char* p : {"/usr/bin/gdb", "/usr/local/bin/gdb", "/bin/gdb"}) {
    if (::access(p, X_OK) == 0) return std::string(p);
  }
  return std::nullopt;
}

// gdb -batch -p PID: every thread's stack into `out` (a new file in `dir`).
std::optional<pid_t> start_gdb(const std::string& gdb, pid_t target, int dir, const std::string& out) {
  const auto pid_text = std::to_string(target);
  ::unlinkat(dir, out.c_str(), 0);
  const UniqueFd out_fd = open_below(dir, out, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (!out_fd) return std::nullopt;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_fd.get(), 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args{gdb, "-nx", "-batch", "-p", pid_text, "-ex", "thread apply all bt"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // gdb starts with no signal blocked (rankrun blocks SIGCONT: block_continue_signal()).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t gdb_pid = 0;
  const bool ok = posix_spawn(&gdb_pid, gdb.c_str(), &fa, &attr, argv.data(), environ) == 0;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  return ok ? std::optional<pid_t>(gdb_pid) : std::nullopt;
}

}  // namespace

int stack_dump_signal() { return SIGRTMIN + 8; }

ProcessStackCollector::ProcessStackCollector(boost::asio::io_context& io, int stack_dir, int stack_signal)
    : m_stack_dir(stack_dir), m_stack_signal(stack_signal), m_timer(io) {}

ProcessStackCollector::~ProcessStackCollector() { kill_debuggers(); }

std::optional<pid_t> ProcessStackCollector::sampled_process(pid_t root) const {
  for (pid_t pid : process_tree(root)) {
    if (exists_below(m_stack_dir, file_of(pid, ".where"))) return pid;
  }
  return std::nullopt;
}

std::vector<RankReading> ProcessStackCollector::read(const std::vector<pid_t>& pids) {
  std::vector<RankReading> out(pids.size());
  static const double ticks_per_second = static_cast<double>(::sysconf(_SC_CLK_TCK));
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    const auto sampled = sampled_process(pids[i]);
    if (sampled) {
      if (const auto text = read_below(m_stack_dir, file_of(*sampled, ".where"), 16384)) {
        out[i].sample = parse_rank_sample(*text);
      }
    }
    if (const auto stat = read_proc_stat(sampled.value_or(pids[i])); stat && !stat->dead() && ticks_per_second > 0) {
      out[i].cpu = static_cast<double>(stat->cpu_ticks) / ticks_per_second;
    }
  }
  return out;
}

void ProcessStackCollector::collect(const std::vector<pid_t>& pids,
                                    std::function<void(std::vector<std::string>)> done) {
  m_pids = pids;
  m_done = std::move(done);
  m_gdb.clear();
  m_asked.assign(pids.size(), std::nullopt);
  m_answered.assign(pids.size(), -1);
  m_silent.assign(pids.size(), -1);
  // Samplers first: they answer from inside the worker without interrupting anything.
  bool any = false;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    const auto pid = sampled_process(pids[i]);
    if (!pid) continue;
    // A marker: created, never written, so one already there is as good (O_NONBLOCK: a FIFO
    // there is not waited on).
    if (!open_below(m_stack_dir, file_of(*pid, ".ask"), O_WRONLY | O_CREAT | O_NONBLOCK, 0600)) continue;
    m_asked[i] = *pid;
    any = true;
    wake_sampler(*pid);
  }
  if (any) {
    wait_for_answers(std::chrono::steady_clock::now() + k_answer_wait);
  } else {
    signal_the_rest();
  }
}

// The sampler waits on its <pid>.wake FIFO between samples: a byte there has it look for the ask
// at once rather than at its next sample. Never waited on: no reader (it exited, or a sampler
// without the FIFO) fails the open with ENXIO, a full pipe the write with EAGAIN; either way the
// ask is still answered at the sampler's next look.
void ProcessStackCollector::wake_sampler(pid_t pid) const {
  const auto fd = open_below(m_stack_dir, file_of(pid, ".wake"), O_WRONLY | O_NONBLOCK);
  if (!fd) return;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISFIFO(st.st_mode)) return;
  const char byte = 'w';
  [[maybe_unused]] const auto written = ::write(fd.get(), &byte, 1);
}

void ProcessStackCollector::wait_for_answers(std::chrono::steady_clock::time_point deadline) {
  bool waiting = false;
  for (std::size_t i = 0; i < m_asked.size(); ++i) {
    if (!m_asked[i]) continue;
    if (!exists_below(m_stack_dir, file_of(*m_asked[i], ".ask"))) {
      m_answered[i] = *m_asked[i];
      m_asked[i].reset();
    } else {
      waiting = true;
    }
  }
  if (waiting && std::chrono::steady_clock::now() < deadline) {
    m_timer.expires_after(k_poll);
    m_timer.async_wait([this, deadline](boost::system::error_code ec) {
      if (!ec) wait_for_answers(deadline);
    });
    return;
  }
  // A sampler that did not answer: its main thread holds the interpreter in native code (torch
  // 1.13's store connect does). A signal would interrupt that call and fail the rank, so it
  // gets none: the stacks its sampler wrote when the main thread went in are used.
  for (std::size_t i = 0; i < m_asked.size(); ++i) {
    if (!m_asked[i]) continue;
    ::unlinkat(m_stack_dir, file_of(*m_asked[i], ".ask").c_str(), 0);
    m_silent[i] = *m_asked[i];
    m_asked[i].reset();
  }
  signal_the_rest();
}

void ProcessStackCollector::signal_the_rest() {
  const auto gdb = find_gdb();
  bool signaled = false;
  for (std::size_t i = 0; i < m_pids.size(); ++i) {
    const pid_t root = m_pids[i];
    if (root <= 0 || m_answered[i] > 0 || m_silent[i] > 0) continue;
    bool asked = false;
    for (pid_t pid : process_tree(root)) {
      // A <pid>.stack file means that process registered a handler for the signal.
      if (exists_below(m_stack_dir, file_of(pid, ".stack"))) {
        ::kill(pid, m_stack_signal);
        asked = true;
      }
    }
    signaled |= asked;
    if (asked || !gdb) continue;
    if (const auto g = start_gdb(*gdb, root, m_stack_dir, file_of(root, ".gdb"))) m_gdb.push_back(*g);
  }
  const auto wait = !m_gdb.empty() ? k_gdb_wait : signaled ? k_dump_wait : std::chrono::steady_clock::duration::zero();
  poll(std::chrono::steady_clock::now() + wait);
}

void ProcessStackCollector::cancel() {
  m_timer.cancel();
  for (auto& asked : m_asked) {
    if (asked) ::unlinkat(m_stack_dir, file_of(*asked, ".ask").c_str(), 0);
    asked.reset();
  }
  m_done = nullptr;
  kill_debuggers();
}

// Python and the runtime answer within milliseconds; gdb takes a second or two to attach. The
// wait is over at the deadline, or as soon as every gdb has finished.
void ProcessStackCollector::poll(std::chrono::steady_clock::time_point deadline) {
  bool gdb_running = false;
  for (pid_t pid : m_gdb) {
    // The spawner's reap loop collects gdb's exit; a zombie or a gone entry means it is done.
    if (const auto stat = read_proc_stat(pid); stat && !stat->dead()) gdb_running = true;
  }
  const auto now = std::chrono::steady_clock::now();
  const bool over = now >= deadline || (!m_gdb.empty() && !gdb_running);
  if (!over) {
    m_timer.expires_after(k_poll);
    m_timer.async_wait([this, deadline](boost::system::error_code ec) {
      if (!ec) poll(deadline);
    });
    return;
  }
  kill_debuggers();
  auto done = std::move(m_done);
  m_done = nullptr;
  if (done) done(read_dumps());
}

std::vector<std::string> ProcessStackCollector::read_dumps() const {
  std::vector<std::string> dumps;
  for (std::size_t i = 0; i < m_pids.size(); ++i) {
    const pid_t root = m_pids[i];
    std::string dump;
    if (i < m_answered.size() && m_answered[i] > 0) {
      if (const auto text = read_below(m_stack_dir, file_of(m_answered[i], ".pystack"))) dump = *text;
    } else if (i < m_silent.size() && m_silent[i] > 0) {
      if (const auto text = read_below(m_stack_dir, file_of(m_silent[i], ".pystack"))) {
        dump =
            "(its sampler did not answer: native code holds the interpreter; the stack as the main thread went in)\n" +
            *text;
      }
    } else if (root > 0) {
      for (pid_t pid : process_tree(root)) {
        if (const auto text = read_below(m_stack_dir, file_of(pid, ".stack"))) dump += *text;
      }
      if (dump.empty()) {
        if (const auto text = read_below(m_stack_dir, file_of(root, ".gdb"))) dump = *text;
      }
    }
    dumps.push_back(std::move(dump));
  }
  return dumps;
}

std::vector<std::vector<std::string>> ProcessStackCollector::flight_dumps() const {
  std::vector<std::vector<std::string>> out(m_pids.size());
  for (std::size_t i = 0; i < m_pids.size() && i < m_answered.size(); ++i) {
    if (m_answered[i] > 0) out[i] = flight_dumps_of(m_answered[i]);
  }
  return out;
}

std::vector<std::string> ProcessStackCollector::flight_dumps_of(pid_t pid) const {
  std::vector<std::string> out;
  for (const char* suffix : {".fr.json", ".fr-nccl.json"}) {
    if (auto text = read_below(m_stack_dir, file_of(pid, suffix), k_max_flight_dump)) out.push_back(std::move(*text));
  }
  return out;
}

std::optional<std::string> ProcessStackCollector::collective_timeout(pid_t pid) const {
  auto text = read_below(m_stack_dir, file_of(pid, ".timeout"), 4096);
  if (!text) return std::nullopt;
  while (!text->empty() && (text->back() == '\n' || text->back() == '\r')) text->pop_back();
  return text;
}

void ProcessStackCollector::kill_debuggers() {
  for (pid_t pid : m_gdb) ::kill(pid, SIGKILL);
  m_gdb.clear();
}

}  // namespace rankrun::launcher
