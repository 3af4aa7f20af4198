#include "launcher/hang_monitor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <spdlog/spdlog.h>
#include <sstream>

#include "launcher/stack_dump.hpp"

extern char** environ;

namespace rankrun::launcher {
namespace fs = std::filesystem;

namespace {

// How long ranks get to write their stacks, and gdb to attach and print.
constexpr auto k_dump_wait = std::chrono::milliseconds(1500);
constexpr auto k_gdb_wait = std::chrono::seconds(20);

std::string read_file(const std::string& path, std::size_t max = 1 << 20) {
  std::ifstream in(path, std::ios::binary);
  std::string text(max, '\0');
  in.read(text.data(), static_cast<std::streamsize>(max));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

// Every process in the tree under `root` (itself first), from one scan of /proc.
std::vector<pid_t> process_tree(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const auto name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto stat = read_file(entry.path().string() + "/stat", 4096);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    children[ppid].push_back(static_cast<pid_t>(std::stol(name)));
  }
  std::vector<pid_t> out{root};
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (pid_t c : children[out[i]]) out.push_back(c);
  }
  return out;
}

std::optional<std::string> find_gdb() {
  for (const char* p : {"/usr/bin/gdb", "/usr/local/bin/gdb", "/bin/gdb"}) {
    if (::access(p, X_OK) == 0) return std::string(p);
  }
  return std::nullopt;
}

}  // namespace

int stack_dump_signal() { return SIGRTMIN + 8; }

HangMonitor::HangMonitor(boost::asio::io_context& io, HangTimeouts timeouts, std::string stack_dir, int stack_signal,
                         Console& console, Hooks hooks)
    : m_io(io),
      m_timeouts(timeouts),
      m_stack_dir(std::move(stack_dir)),
      m_stack_signal(stack_signal),
      m_console(console),
      m_hooks(std::move(hooks)),
      m_timer(io) {}

RankActivity* HangMonitor::rank(int local_rank) {
  if (m_stopped || local_rank < 0 || static_cast<std::size_t>(local_rank) >= m_ranks.size()) return nullptr;
  return &m_ranks[static_cast<std::size_t>(local_rank)];
}

void HangMonitor::start_attempt(const std::vector<pid_t>& pids, const std::vector<int>& ranks, std::string attempt_dir) {
  m_pids = pids;
  m_global = ranks;
  m_attempt_dir = std::move(attempt_dir);
  m_ranks.assign(pids.size(), RankActivity{});
  m_status.assign(pids.size(), std::nullopt);
  const auto now = HangClock::now();
  for (auto& r : m_ranks) r.started = now;
  m_stopped = !m_timeouts.any();
  m_diagnosing = false;
  m_armed_for.reset();
  arm();
}

// Output is the hot path: only a time is stored; the timer re-reads it when it fires.
void HangMonitor::on_output(int local_rank) {
  if (auto* r = rank(local_rank)) r->last_output = HangClock::now();
}

void HangMonitor::on_exit(int local_rank, const ExitStatus& status) {
  auto* r = rank(local_rank);
  if (!r) return;
  r->alive = false;
  r->exited_at = HangClock::now();
  if (!status.signaled) r->exit_code = status.value;
  m_status[static_cast<std::size_t>(local_rank)] = status;
  arm();
}

void HangMonitor::on_heartbeat(int local_rank) {
  auto* r = rank(local_rank);
  if (!r) return;
  const bool first = !r->last_heartbeat;
  r->last_heartbeat = HangClock::now();
  if (first) arm();
}

void HangMonitor::on_progress(int local_rank) {
  if (auto* r = rank(local_rank)) r->last_progress = HangClock::now();
}

void HangMonitor::on_rendezvous(int local_rank) {
  auto* r = rank(local_rank);
  if (!r) return;
  r->rendezvoused_at = HangClock::now();
  arm();
}

void HangMonitor::stop() {
  m_stopped = true;
  m_timer.cancel();
  m_armed_for.reset();
}

// Activity only ever moves deadlines later, so a timer armed for an earlier deadline is safe:
// when it fires, check_hang() decides and the timer is armed again for the new deadline.
void HangMonitor::arm() {
  if (m_stopped || m_diagnosing) return;
  const auto next = next_check(m_ranks, m_timeouts);
  if (!next || (m_armed_for && *m_armed_for <= *next)) return;
  m_armed_for = next;
  m_timer.expires_at(*next);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    m_armed_for.reset();
    on_timer();
  });
}

void HangMonitor::on_timer() {
  if (m_stopped) return;
  if (const auto finding = check_hang(m_ranks, m_timeouts, HangClock::now())) {
    diagnose(*finding);
    return;
  }
  arm();
}

void HangMonitor::diagnose(const HangFinding& finding) {
  m_diagnosing = true;
  spdlog::error("hang detected: {}; collecting the stacks of the running ranks", finding.reason);
  const auto gdb = find_gdb();
  m_gdb.clear();
  bool waiting_for_gdb = false;
  for (std::size_t i = 0; i < m_pids.size(); ++i) {
    if (!m_ranks[i].alive) continue;
    bool asked = false;
    for (pid_t pid : process_tree(m_pids[i])) {
      // A <pid>.stack file means that process registered a handler for the signal.
      if (::access((m_stack_dir + "/" + std::to_string(pid) + ".stack").c_str(), F_OK) == 0) {
        ::kill(pid, m_stack_signal);
        asked = true;
      }
    }
    if (asked || !gdb) continue;
    // A native rank without the runtime: gdb prints every thread's stack.
    const auto out = m_stack_dir + "/" + std::to_string(m_pids[i]) + ".gdb";
    const auto pid_text = std::to_string(m_pids[i]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    std::vector<std::string> args{*gdb, "-nx", "-batch", "-p", pid_text, "-ex", "thread apply all bt"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t gdb_pid = 0;
    if (posix_spawn(&gdb_pid, gdb->c_str(), &fa, nullptr, argv.data(), environ) == 0) {
      m_gdb.push_back(gdb_pid);
      waiting_for_gdb = true;
    }
    posix_spawn_file_actions_destroy(&fa);
  }
  const auto now = HangClock::now();
  collect_dumps(finding, now + (waiting_for_gdb ? std::chrono::duration_cast<HangClock::duration>(k_gdb_wait) : k_dump_wait));
}

// Waits (in short timer steps, only during a diagnosis) until the dumps are written: Python
// and the runtime answer within milliseconds; gdb takes a second or two to attach.
void HangMonitor::collect_dumps(const HangFinding& finding, HangTime deadline) {
  bool gdb_running = false;
  for (pid_t pid : m_gdb) {
    // The supervisor's reaper collects gdb's exit; a gone /proc entry means it is done.
    if (fs::exists("/proc/" + std::to_string(pid))) {
      const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat", 512);
      const auto close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z') gdb_running = true;
    }
  }
  const auto now = HangClock::now();
  const bool python_wait_over = m_gdb.empty() ? now >= deadline : now >= deadline || !gdb_running;
  if (!python_wait_over && now < deadline) {
    m_timer.expires_after(std::chrono::milliseconds(100));
    m_timer.async_wait([this, finding, deadline](boost::system::error_code ec) {
      if (ec) return;
      collect_dumps(finding, deadline);
    });
    return;
  }
  for (pid_t pid : m_gdb) ::kill(pid, SIGKILL);
  report(finding);
}

void HangMonitor::report(const HangFinding& finding) {
  std::vector<RankHangState> states;
  for (std::size_t i = 0; i < m_pids.size(); ++i) {
    RankHangState s;
    s.rank = m_global[i];
    s.alive = m_ranks[i].alive;
    s.status = m_status[i];
    if (m_hooks.store_view) {
      auto view = m_hooks.store_view(static_cast<int>(i));
      s.collective = view.collective;
      s.heartbeat_age = view.heartbeat_age;
      s.step = view.step;
      s.last_key = view.last_key;
    }
    if (s.alive) {
      std::string dump;
      for (pid_t pid : process_tree(m_pids[i])) {
        const auto path = m_stack_dir + "/" + std::to_string(pid) + ".stack";
        if (fs::exists(path)) dump += read_file(path);
      }
      const auto gdb_path = m_stack_dir + "/" + std::to_string(m_pids[i]) + ".gdb";
      if (dump.empty() && fs::exists(gdb_path)) dump = read_file(gdb_path);
      s.stack_dumped = !dump.empty();
      if (s.stack_dumped) {
        // The dump reaches the console whole, prefixed by rank, and the log dir.
        m_console.write_line(2, s.rank, "stack of rank " + std::to_string(s.rank) + " (pid " + std::to_string(m_pids[i]) + "):");
        std::istringstream lines(dump);
        for (std::string line; std::getline(lines, line);) m_console.write_line(2, s.rank, line);
        if (!m_attempt_dir.empty()) {
          std::ofstream(m_attempt_dir + "/" + std::to_string(i) + "/stacks.txt") << dump;
        }
        s.wait = find_wait_point(parse_faulthandler(dump));
      }
    }
    states.push_back(std::move(s));
  }
  std::string text = "rankrun: HANG: " + finding.reason + "\n" + format_rank_states(states) +
                     "rankrun: verdict: " + hang_verdict(finding, states) + "\n";
  Console::write_all(2, text);
  m_diagnosing = false;
  m_stopped = true;
  if (m_hooks.hung) m_hooks.hung();
}

}  // namespace rankrun::launcher
