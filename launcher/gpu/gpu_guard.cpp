#include "base/parse_number.hpp"
#include "base/read_file.hpp"
#include "launcher/gpu/gpu_guard.hpp"

#include <pwd.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "launcher/processes/proc_parse.hpp"

namespace rankrun::launcher::gpu {

namespace {

constexpr auto k_poll = std::chrono::milliseconds(100);
constexpr auto k_progress_every = std::chrono::seconds(5);
constexpr std::size_t k_command_chars = 160;

std::string user_of(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

bool alive(pid_t pid) {
  const auto st = read_proc_stat(pid);
  return st && !st->dead();
}

}  // namespace

ProcessFacts read_process_facts(pid_t pid, const JobScope* scope) {
  ProcessFacts f;
  const auto st = read_proc_stat(pid);
  if (!st || st->dead()) return f;
  f.alive = true;
  f.state = st->state;
  const std::string dir = "/proc/" + std::to_string(pid);
  if (const auto status = read_file_head(dir + "/status", 64 * 1024)) {
    if (const auto uid = parse_proc_status(*status).uid) f.user = user_of(*uid);
  }
  if (auto cmdline = command_line_of(pid)) {
    if (cmdline->size() > k_command_chars) *cmdline = cmdline->substr(0, k_command_chars) + "...";
    f.command = cmdline->empty() ? "[" + st->comm + "]" : *cmdline;
  }
  if (const auto uptime = read_file_head("/proc/uptime", 256)) {
    // "SECONDS_UP SECONDS_IDLE\n"
    if (const auto up = parse_decimal(std::string_view(*uptime).substr(0, uptime->find(' '))))
      f.age_seconds = *up - static_cast<double>(st->start_time) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  // Re-parented to init (or to a user's systemd, the usual subreaper) while it is not a session
  // of its own (a daemon is): its parent is gone. A session whose leader is gone: no session.
  const auto parent = read_proc_stat(st->ppid);
  const bool adopted = st->ppid == 1 || (parent && parent->comm == "systemd");
  f.parent_gone = adopted && st->session != pid;
  f.no_session = st->session > 0 && st->session != pid && !alive(st->session);
  f.of_job = scope != nullptr && belongs_to_job(pid, *scope);
  return f;
}

std::string current_user() { return user_of(::getuid()); }

std::string node_prefix(const LaunchConfig& config) {
  if (config.rdzv == RdzvKind::Single) return "";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("node {} ({}): ", config.node_rank, host);
}

std::vector<Finding> check_node_gpus(const LaunchConfig& config, const EnvMap& env) {
  if (config.gpu_check == GpuCheck::Off || config.gpus.empty()) return {};
  std::string why;
  const auto nvml = Nvml::open(env, &why);
  if (!nvml) {
    spdlog::debug("GPU check skipped: {}", why);
    return {};
  }
  const auto gpus = nvml->read(config.gpus);
  const auto facts = [](pid_t pid) { return read_process_facts(pid, nullptr); };
  auto out = unfit(gpus, !config.pin && config.nproc > 1, false);
  for (auto& f : held_by_others(gpus, facts, current_user())) out.push_back(std::move(f));
  return out;
}

std::vector<std::string> finding_lines(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const auto& f : findings) {
    out.push_back(fmt::format(
        "{}{}; {}", f.kind == Finding::Kind::HeldByOther ? "GPU memory in use: " : "GPU unfit: ", f.detail, f.fix));
  }
  return out;
}

GpuGuard::GpuGuard(boost::asio::io_context& io, const LaunchConfig& config, const EnvMap& env, JobScope scope)
    : m_config(config), m_scope(std::move(scope)), m_timer(io) {
  if (config.gpu_check == GpuCheck::Off || config.gpus.empty()) return;
  std::string why;
  m_nvml = Nvml::open(env, &why);
  if (!m_nvml) spdlog::debug("GPU checks between attempts are off: {}", why);
}

GpuGuard::~GpuGuard() = default;

void GpuGuard::close() {
  m_timer.cancel();
  m_done = nullptr;
}

void GpuGuard::cut_short() {
  if (!m_done) return;
  m_timer.cancel();
  spdlog::info("{}stopping: no longer waiting for the last attempt's GPU memory", node_prefix(m_config));
  auto done = std::move(m_done);
  m_done = nullptr;
  done(false);
}

void GpuGuard::await_release(std::set<pid_t> attempt, std::function<void(bool)> done) {
  if (!m_nvml) {
    done(false);
    return;
  }
  m_attempt = std::move(attempt);
  m_done = std::move(done);
  m_began = std::chrono::steady_clock::now();
  m_waiting_said = false;
  poll();
}

void GpuGuard::poll() {
  const auto gpus = m_nvml->read(m_config.gpus);
  const auto facts = [this](pid_t pid) { return read_process_facts(pid, &m_scope); };
  const auto holders = attempt_holders(gpus, facts, [this](pid_t pid) { return m_attempt.count(pid) > 0; });
  const auto now = std::chrono::steady_clock::now();
  const double waited = std::chrono::duration<double>(now - m_began).count();
  const auto prefix = node_prefix(m_config);
  if (holders.empty()) {
    if (m_waiting_said) spdlog::warn("{}the last attempt's GPU memory was released after {:.1f}s", prefix, waited);
    for (const auto& line : finding_lines(
             held_by_others(gpus, facts, current_user(), [this](pid_t pid) { return m_attempt.count(pid) > 0; }))) {
      spdlog::warn("{}{}", prefix, line);
    }
    auto done = std::move(m_done);
    m_done = nullptr;
    if (done) done(false);
    return;
  }
  if (waited >= m_config.gpu_release_timeout) {
    for (const auto& line : describe_stuck(holders, waited)) spdlog::error("{}{}", prefix, line);
    spdlog::error("{}not restarting onto GPU memory the last attempt still holds", prefix);
    auto done = std::move(m_done);
    m_done = nullptr;
    if (done) done(true);
    return;
  }
  if (!m_waiting_said) {
    spdlog::warn("{}waiting up to {:.0f}s for the last attempt's GPU memory to be released: {}", prefix,
                 m_config.gpu_release_timeout, describe_holders(holders));
    m_waiting_said = true;
    m_said = now;
  } else if (now - m_said >= k_progress_every) {
    spdlog::warn("{}still waiting for GPU memory ({:.0f}s of {:.0f}s): {}", prefix, waited,
                 m_config.gpu_release_timeout, describe_holders(holders));
    m_said = now;
  }
  m_timer.expires_after(k_poll);
  m_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec && m_done) poll();
  });
}

std::map<pid_t, std::uint64_t> GpuGuard::memory_by_pid() const {
  std::map<pid_t, std::uint64_t> out;
  if (!m_nvml) return out;
  for (const auto& g : m_nvml->read(m_config.gpus)) {
    for (const auto& p : g.processes) {
      if (p.used_bytes) out[p.pid] += *p.used_bytes;
    }
  }
  return out;
}

std::vector<std::string> GpuGuard::unfit_now(const std::string& id) const {
  if (!m_nvml) return {};
  std::vector<std::string> out;
  for (const auto& f : unfit(m_nvml->read({id}), false, false)) out.push_back(f.detail + "; " + f.fix);
  return out;
}

}  // namespace rankrun::launcher::gpu
