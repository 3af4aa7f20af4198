#include "launcher/hangs/stack_collector.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <optional>
#include <spdlog/spdlog.h>

#include "launcher/processes/proc_scan.hpp"

extern char** environ;

namespace rankrun::launcher {

namespace {

// How long ranks get to write their stacks, and gdb to attach and print.
constexpr std::chrono::steady_clock::duration k_dump_wait = std::chrono::milliseconds(1500);
constexpr std::chrono::steady_clock::duration k_gdb_wait = std::chrono::seconds(20);
constexpr auto k_poll = std::chrono::milliseconds(100);

std::optional<std::string> find_gdb() {
  for (const char* p : {"/usr/bin/gdb", "/usr/local/bin/gdb", "/bin/gdb"}) {
    if (::access(p, X_OK) == 0) return std::string(p);
  }
  return std::nullopt;
}

// gdb -batch -p PID: every thread's stack into `out`.
std::optional<pid_t> start_gdb(const std::string& gdb, pid_t target, const std::string& out) {
  const auto pid_text = std::to_string(target);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args{gdb, "-nx", "-batch", "-p", pid_text, "-ex", "thread apply all bt"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t gdb_pid = 0;
  const bool ok = posix_spawn(&gdb_pid, gdb.c_str(), &fa, nullptr, argv.data(), environ) == 0;
  posix_spawn_file_actions_destroy(&fa);
  return ok ? std::optional<pid_t>(gdb_pid) : std::nullopt;
}

}  // namespace

int stack_dump_signal() { return SIGRTMIN + 8; }

ProcessStackCollector::ProcessStackCollector(boost::asio::io_context& io, std::string stack_dir, int stack_signal)
    : m_stack_dir(std::move(stack_dir)), m_stack_signal(stack_signal), m_timer(io) {}

ProcessStackCollector::~ProcessStackCollector() { kill_debuggers(); }

void ProcessStackCollector::collect(const std::vector<pid_t>& pids, std::function<void(std::vector<std::string>)> done) {
  m_pids = pids;
  m_done = std::move(done);
  m_gdb.clear();
  const auto gdb = find_gdb();
  for (pid_t root : m_pids) {
    if (root <= 0) continue;
    bool asked = false;
    for (pid_t pid : process_tree(root)) {
      // A <pid>.stack file means that process registered a handler for the signal.
      if (::access((m_stack_dir + "/" + std::to_string(pid) + ".stack").c_str(), F_OK) == 0) {
        ::kill(pid, m_stack_signal);
        asked = true;
      }
    }
    if (asked || !gdb) continue;
    if (const auto g = start_gdb(*gdb, root, m_stack_dir + "/" + std::to_string(root) + ".gdb")) m_gdb.push_back(*g);
  }
  poll(std::chrono::steady_clock::now() + (m_gdb.empty() ? k_dump_wait : k_gdb_wait));
}

void ProcessStackCollector::cancel() {
  m_timer.cancel();
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
  for (pid_t root : m_pids) {
    std::string dump;
    if (root > 0) {
      for (pid_t pid : process_tree(root)) {
        if (const auto text = read_text_file(m_stack_dir + "/" + std::to_string(pid) + ".stack")) dump += *text;
      }
      if (dump.empty()) {
        if (const auto text = read_text_file(m_stack_dir + "/" + std::to_string(root) + ".gdb")) dump = *text;
      }
    }
    dumps.push_back(std::move(dump));
  }
  return dumps;
}

void ProcessStackCollector::kill_debuggers() {
  for (pid_t pid : m_gdb) ::kill(pid, SIGKILL);
  m_gdb.clear();
}

}  // namespace rankrun::launcher
