#include "launcher/supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <filesystem>
#include <fstream>
#include <spdlog/spdlog.h>

#include "launcher/error_file.hpp"
#include "launcher/launch_error.hpp"

namespace rankrun::launcher {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t k_tail_lines = 20;
constexpr std::size_t k_tail_line_bytes = 4096;
constexpr std::size_t k_error_file_max = 1 << 20;
// How long to wait for a finished worker's output to reach EOF; a daemon that kept the
// worker's stdout open must not keep rankrun waiting.
constexpr auto k_drain_timeout = std::chrono::seconds(2);
// How long a worker may outlive SIGKILL before it counts as unkillable (uninterruptible
// sleep in a driver, a frozen cgroup): the job then ends with kExitUnkillable, not a hang.
constexpr auto k_kill_timeout = std::chrono::seconds(3);

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int open_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw LaunchError("cannot create log file " + path + ": " + std::strerror(errno) + "; check --log-dir");
  return fd;
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(k_error_file_max, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return parse_error_file(text);
}

}  // namespace

Supervisor::Supervisor(boost::asio::io_context& io, const LaunchConfig& config, EnvMap parent_env, std::string run_dir,
                       AttemptSetup setup)
    : m_io(io),
      m_config(config),
      m_parent_env(std::move(parent_env)),
      m_run_dir(std::move(run_dir)),
      m_setup(std::move(setup)),
      m_policy(config.nproc, config.max_restarts, config.term_timeout),
      m_signals(io, SIGINT, SIGTERM, SIGHUP),
      m_sigchld(io, SIGCHLD),
      m_grace_timer(io),
      m_drain_timer(io),
      m_kill_timer(io) {
  m_signals.add(SIGQUIT);
  const auto path = m_parent_env.count("PATH") ? m_parent_env.at("PATH") : std::string("/usr/local/bin:/usr/bin:/bin");
  m_argv = config.command;
  const bool python = m_argv.size() > 1 && m_argv[1] == "-u" && config.command.front() != config.entrypoint_name;
  m_argv.front() = resolve_executable(m_argv.front(), path, python ? "Python interpreter" : "program");
  m_default_omp = should_default_omp_threads(m_parent_env, config.nproc);
  if (m_default_omp) {
    spdlog::warn("setting OMP_NUM_THREADS=1 for each worker (it was unset and there are {} workers per node); "
                 "set it yourself to tune", config.nproc);
  }
}

Supervisor::~Supervisor() {
  // A thrown exception must not leak GPU processes: kill whatever still runs, then reap it.
  for (auto& w : m_workers) {
    if (w->pid > 0 && !w->ended.time_since_epoch().count()) {
      ::kill(-w->pid, SIGKILL);
      ::waitpid(w->pid, nullptr, 0);
    }
    for (auto* fd : {&w->out.file_fd, &w->err.file_fd}) {
      if (*fd >= 0) ::close(*fd);
    }
  }
}

const std::vector<pid_t> Supervisor::worker_pids() const {
  std::vector<pid_t> pids;
  for (const auto& w : m_workers) pids.push_back(w->pid);
  return pids;
}

std::string Supervisor::attempt_dir(int restart_count) const {
  return m_run_dir + "/attempt_" + std::to_string(restart_count);
}

void Supervisor::start() {
  m_job_start = Clock::now();
  wait_signals();
  wait_children();
  start_attempt();
}

void Supervisor::start_attempt() {
  const int restart = m_policy.restart_count();
  const JobEnv job = m_setup.job_env(restart);
  const auto dir = attempt_dir(restart);
  fs::remove_all(dir);
  m_workers.clear();
  for (const auto& plan : plan_workers(m_config)) {
    auto w = std::make_unique<Worker>();
    w->plan = plan;
    m_workers.push_back(std::move(w));
  }
  for (auto& w : m_workers) spawn(*w, job, dir);
  if (m_setup.hang) {
    std::vector<pid_t> pids;
    std::vector<int> ranks;
    for (const auto& w : m_workers) {
      pids.push_back(w->pid);
      ranks.push_back(w->plan.rank);
    }
    m_setup.hang->start_attempt(pids, ranks, m_config.log_dir.empty() ? std::string() : dir);
  }
  spdlog::info("started {} worker{} (attempt {}), store at {}:{}", m_workers.size(), m_workers.size() == 1 ? "" : "s",
               restart, job.master_addr, job.master_port);
}

void Supervisor::spawn(Worker& w, const JobEnv& job, const std::string& dir) {
  const int local = w.plan.local_rank;
  const auto rank_dir = dir + "/" + std::to_string(local);
  fs::create_directories(rank_dir);
  w.error_file = rank_dir + "/error.json";

  const StreamMask redirect = m_config.redirects.for_rank(local);
  const StreamMask tee = m_config.tee.for_rank(local);
  const bool console_allowed = !m_config.console_ranks || m_config.console_ranks->count(local) > 0;
  w.out.console_fd = (console_allowed && (!redirect.out || tee.out)) ? 1 : -1;
  w.err.console_fd = (console_allowed && (!redirect.err || tee.err)) ? 2 : -1;
  if (redirect.out || tee.out) w.out.file_fd = open_log(rank_dir + "/stdout.log");
  if (redirect.err || tee.err) w.err.file_fd = open_log(rank_dir + "/stderr.log");
  w.err.keep_tail = true;

  auto argv = m_argv;
  const auto args = substitute_local_rank({m_argv.begin() + 1, m_argv.end()}, local);
  std::copy(args.begin(), args.end(), argv.begin() + 1);
  auto env = worker_env(m_parent_env, w.plan, job, w.error_file, m_default_omp);

  auto spawned = spawn_worker(m_io, argv, env, m_setup.cgroup_procs_fd);
  w.pid = spawned.pid;
  w.started = Clock::now();
  w.out.pipe = std::move(spawned.out);
  w.err.pipe = std::move(spawned.err);
  w.out.open = w.err.open = true;
  spdlog::debug("rank {} (local {}) is pid {}", w.plan.rank, local, w.pid);
  read_stream(w, w.out);
  read_stream(w, w.err);
}

void Supervisor::read_stream(Worker& w, Stream& s) {
  s.pipe->async_read_some(boost::asio::buffer(s.buffer), [this, &w, &s](boost::system::error_code ec, std::size_t n) {
    if (ec == boost::asio::error::operation_aborted) return;
    if (n > 0) {
      if (m_setup.hang) m_setup.hang->on_output(w.plan.local_rank);
      const auto* file_data = s.buffer.data();
      if (s.file_fd >= 0) Console::write_all(s.file_fd, {file_data, n});
      s.splitter.feed({s.buffer.data(), n}, [&](std::string_view line) { emit_line(w, s, line); });
    }
    if (ec) {
      s.splitter.finish([&](std::string_view line) { emit_line(w, s, line); });
      close_stream(s);
      check_drained();
      return;
    }
    read_stream(w, s);
  });
}

void Supervisor::emit_line(Worker& w, Stream& s, std::string_view line) {
  if (s.console_fd >= 0) m_console.write_line(s.console_fd, w.plan.rank, line);
  if (s.keep_tail) {
    w.stderr_tail.emplace_back(line.substr(0, k_tail_line_bytes));
    if (w.stderr_tail.size() > k_tail_lines) w.stderr_tail.pop_front();
  }
}

void Supervisor::close_stream(Stream& s) {
  if (!s.open) return;
  s.open = false;
  boost::system::error_code ignored;
  s.pipe->close(ignored);
  if (s.file_fd >= 0) {
    ::close(s.file_fd);
    s.file_fd = -1;
  }
}

void Supervisor::wait_signals() {
  m_signals.async_wait([this](boost::system::error_code ec, int signo) {
    if (ec) return;
    spdlog::warn("received {}; stopping the workers", signal_name(signo));
    dispatch(event::SignalReceived{signo});
    if (!m_finished) wait_signals();
  });
}

void Supervisor::wait_children() {
  m_sigchld.async_wait([this](boost::system::error_code ec, int) {
    if (ec) return;
    reap();
    if (!m_finished) wait_children();
  });
}

void Supervisor::reap() {
  if (m_setup.before_reap) m_setup.before_reap();
  // SIGCHLD coalesces: collect every child that has exited, workers and adopted orphans alike.
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (std::size_t i = 0; i < m_workers.size(); ++i) {
      auto& w = *m_workers[i];
      if (w.pid != pid) continue;
      w.ended = Clock::now();
      const auto st = ExitStatus::from_wait_status(status);
      spdlog::debug("rank {} (pid {}) ended: {}", w.plan.rank, pid, st.describe());
      if (m_setup.hang) m_setup.hang->on_exit(w.plan.local_rank, st);
      dispatch(event::WorkerExited{w.plan.local_rank, st});
      break;
    }
  }
}

void Supervisor::dispatch(const Event& event) {
  for (const auto& action : m_policy.on(event)) carry_out(action);
}

void Supervisor::signal_workers(int signo) {
  const auto& outcomes = m_policy.workers();
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    // The worker leads its own process group (setsid), so -pid reaches its children too.
    if (outcomes[i].alive && m_workers[i]->pid > 0) ::kill(-m_workers[i]->pid, signo);
  }
}

void Supervisor::carry_out(const Action& action) {
  std::visit(
      [this](const auto& a) {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, action::SignalWorkers>) {
          signal_workers(a.signo);
        } else if constexpr (std::is_same_v<T, action::StartGraceTimer>) {
          m_grace_timer.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds)));
          m_grace_timer.async_wait([this](boost::system::error_code ec) {
            if (ec) return;
            spdlog::warn("workers still running {}s after SIGTERM (--term-timeout); sending SIGKILL", m_config.term_timeout);
            dispatch(event::GraceExpired{});
          });
        } else if constexpr (std::is_same_v<T, action::KillWorkers>) {
          signal_workers(SIGKILL);
          m_kill_timer.expires_after(k_kill_timeout);
          m_kill_timer.async_wait([this](boost::system::error_code ec) {
            if (!ec && !m_finished) give_up_on_workers();
          });
        } else if constexpr (std::is_same_v<T, action::RestartWorkers>) {
          if (m_giving_up) return;  // give_up_on_workers() is ending the job already
          if (m_setup.hang) m_setup.hang->stop();
          m_grace_timer.cancel();
          m_kill_timer.cancel();
          clean_up_then([this, restart = a.restart_count](bool unkillable) {
            if (unkillable) {
              after_drain([this] { finish(kExitUnkillable); });
              return;
            }
            after_drain([this, restart] {
              const auto& root = *m_workers[static_cast<std::size_t>(*m_policy.root_cause())];
              const auto& status = *m_policy.workers()[static_cast<std::size_t>(*m_policy.root_cause())].status;
              spdlog::warn("rank {} failed ({}); restarting all workers (restart {} of {})", root.plan.rank, status.describe(),
                           restart, m_config.max_restarts);
              m_policy.start_next_attempt();
              start_attempt();
            });
          });
        } else if constexpr (std::is_same_v<T, action::Finish>) {
          if (m_giving_up) return;
          if (m_setup.hang) m_setup.hang->stop();
          m_grace_timer.cancel();
          m_kill_timer.cancel();
          clean_up_then([this, code = a.exit_code](bool unkillable) {
            after_drain([this, code = unkillable ? kExitUnkillable : code] { finish(code); });
          });
        }
      },
      action);
}

void Supervisor::after_drain(std::function<void()> then) {
  m_after_drain = std::move(then);
  m_drain_timer.expires_after(k_drain_timeout);
  m_drain_timer.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    // Someone (a daemonised grandchild) still holds a worker's output open; stop reading.
    for (auto& w : m_workers) {
      close_stream(w->out);
      close_stream(w->err);
    }
    check_drained();
  });
  check_drained();
}

void Supervisor::clean_up_then(std::function<void(bool)> then) {
  // Daemons that kept a worker's output open die here, so the drain after this is quick.
  if (m_setup.clean_up) {
    m_setup.clean_up(m_workers.size(), std::move(then));
  } else {
    then(false);
  }
}

void Supervisor::give_up_on_workers() {
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    if (m_policy.workers()[i].alive) {
      spdlog::error("rank {} (pid {}) is still alive {}s after SIGKILL", m_workers[i]->plan.rank, m_workers[i]->pid,
                    std::chrono::duration_cast<std::chrono::seconds>(k_kill_timeout).count());
    }
  }
  m_giving_up = true;
  m_grace_timer.cancel();
  clean_up_then([this](bool) { after_drain([this] { finish(kExitUnkillable); }); });
}

void Supervisor::check_drained() {
  if (!m_after_drain) return;
  for (const auto& w : m_workers) {
    if (w->out.open || w->err.open) return;
  }
  m_drain_timer.cancel();
  auto then = std::move(m_after_drain);
  m_after_drain = nullptr;
  then();
}

RunSummary Supervisor::summarize(int exit_code) const {
  RunSummary s;
  s.reason = m_policy.reason();
  s.root = m_policy.root_cause();
  s.signal = m_policy.stop_signal();
  s.exit_code = exit_code;
  s.restart_count = m_policy.restart_count();
  s.pinned = m_config.pin;
  s.entrypoint = m_config.entrypoint_name;
  s.seconds = seconds_between(m_job_start, Clock::now());
  if (m_setup.arrivals) s.arrivals = m_setup.arrivals();
  const auto& outcomes = m_policy.workers();
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    const auto& w = *m_workers[i];
    RankReport r;
    r.rank = w.plan.rank;
    r.local_rank = w.plan.local_rank;
    r.pid = w.pid;
    r.status = outcomes[i].status;
    r.stopped_by_rankrun = outcomes[i].stopped_by_rankrun;
    r.seconds = seconds_between(w.started, w.ended);
    r.stderr_tail.assign(w.stderr_tail.begin(), w.stderr_tail.end());
    r.error_file = w.error_file;
    if (r.status && !r.status->success()) r.error = read_error_file(w.error_file);
    s.ranks.push_back(std::move(r));
  }
  return s;
}

void Supervisor::finish(int exit_code) {
  m_finished = true;
  m_exit_code = exit_code;
  Console::write_all(2, format_summary(summarize(exit_code)));
  // From here on a signal has its default effect again: nothing is left to forward it to.
  boost::system::error_code ignored;
  m_signals.clear(ignored);
  m_signals.cancel();
  m_sigchld.cancel();
  m_grace_timer.cancel();
  m_drain_timer.cancel();
  m_kill_timer.cancel();
  if (m_setup.on_finish) m_setup.on_finish();
}

}  // namespace rankrun::launcher
