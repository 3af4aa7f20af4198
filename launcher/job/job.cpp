#include "launcher/job/job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <utility>

#include "launcher/cli/host_facts.hpp"
#include "launcher/cli/launch_error.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/report/arrival.hpp"
#include "launcher/report/error_file.hpp"
#include "rankrun/store_keys.hpp"

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
// How long node 0 waits for the other nodes to hang up after a rendezvous that failed.
constexpr auto k_linger = std::chrono::seconds(2);

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int open_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw LaunchError("cannot create log file " + path + ": " + std::strerror(errno) + "; check --log-dir");
  return fd;
}

std::unique_ptr<rendezvous::StoreServer> bind_store(boost::asio::io_context& io, const LaunchConfig& c) {
  try {
    return std::make_unique<rendezvous::StoreServer>(io, Job::store_options(c, c.master_addr));
  } catch (const rendezvous::StorePortInUse& e) {
    if (c.elastic && !c.is_host) {
      // Several nodes of one machine (a test on loopback): the first to bind hosts the store.
      spdlog::info("the rendezvous port {}:{} is taken on this machine; joining the store there as a node",
                   c.master_addr, c.master_port.value_or(0));
      return nullptr;
    }
    throw LaunchError(e.what());
  } catch (const rendezvous::StoreBindError& e) {
    throw LaunchError(e.what());
  }
}

JobLimits limits_of(const LaunchConfig& c) {
  JobLimits l;
  l.max_restarts = c.max_restarts;
  l.term_timeout = c.term_timeout;
  l.kill_timeout = c.kill_timeout;
  l.term_signal = SIGTERM;
  return l;
}

}  // namespace

Job::Job(boost::asio::io_context& io, const LaunchConfig& config, EnvMap parent_env, JobPaths paths, JobParts parts)
    : m_io(io),
      m_config(config),
      m_parent_env(std::move(parent_env)),
      m_paths(std::move(paths)),
      m_parts(parts),
      m_policy(config.nproc, limits_of(config)),
      m_store(config.hosts_store ? bind_store(io, config) : nullptr),
      m_hang(io, config.hang, parts.stacks, m_console,
             HangMonitor::Hooks{[this](int local_rank) { return store_view(local_rank); },
                                [this] {
                                  m_hang_seen = true;  // supervision is no longer healthy: no more WATCHDOG=1
                                  m_watchdog_timer.cancel();
                                  dispatch(event::HangDetected{});
                                }}),
      m_user_signals(io, {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2},
                     [this](int signo, pid_t sender) {
                       if (signo == SIGUSR1 || signo == SIGUSR2) {
                         on_user_signal(signo, sender);
                       } else {
                         on_stop_signal(signo, sender);
                       }
                     }),
      m_grace_timer(io),
      m_kill_timer(io),
      m_drain_timer(io),
      m_watchdog_timer(io) {
  // Under systemd (Type=notify): the notify socket is rankrun's alone, not the workers'.
  const auto parent_value = [this](const char* name) -> std::optional<std::string> {
    const auto it = m_parent_env.find(name);
    return it == m_parent_env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  if (const auto socket = parent_value("NOTIFY_SOCKET"); socket && !socket->empty()) {
    m_notify = SdNotifier(*socket, watchdog_interval(parent_value("WATCHDOG_USEC"), parent_value("WATCHDOG_PID"), ::getpid()));
  }
  for (const char* name : {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}) m_parent_env.erase(name);
  // Rank plans are fixed for the job on one node; the first rank names the runtime's keys.
  const auto plans = plan_workers(m_config);
  for (const auto& plan : plans) {
    auto w = std::make_unique<Worker>();
    w->plan = plan;
    m_workers.push_back(std::move(w));
  }
  if (m_store) {
    m_watch.emplace(io, m_store->port(), plans.empty() ? 0 : plans.front().rank,
                    [this](int local_rank, StoreEvent event) { on_store_event(local_rank, event); });
    m_store->add_observer(&*m_watch);
    // Workers of every node join the default key space: it must be attempt 0's before any
    // node can start them.
    m_key_space = m_store->begin_key_space("attempt_0");
  }
  m_node_rank = config.node_rank;
  m_parts.spawner.listen(WorkerListener{[this](int slot, StreamId id, std::string_view bytes) { on_output(slot, id, bytes); },
                                        [this](int slot, StreamId id) { on_closed(slot, id); },
                                        [this](int slot, ExitStatus status) { on_exited(slot, status); }});
  m_slurm_step = !m_config.slurm_job_id.empty();
  m_default_omp = should_default_omp_threads(m_parent_env, config.nproc);
  if (m_default_omp) {
    spdlog::warn("setting OMP_NUM_THREADS=1 for each worker (it was unset and there are {} workers per node); "
                 "set it yourself to tune", config.nproc);
  }
}

Job::~Job() {
  if (m_link) m_link->stop();
  if (m_coordinator) m_coordinator->stop(std::chrono::milliseconds(0));
  if (m_store && m_leases && !m_config.etcd) m_store->remove_observer(m_leases.get());
  if (m_store && m_rounds && !m_config.etcd) m_store->remove_observer(m_rounds.get());
  if (m_store && m_watch) m_store->remove_observer(&*m_watch);
  for (auto& w : m_workers) {
    close_file(w->out);
    close_file(w->err);
  }
}

rendezvous::ServerOptions Job::store_options(const LaunchConfig& c, std::string bind_address) {
  rendezvous::ServerOptions options;
  options.bind_address = std::move(bind_address);
  options.port = c.master_port.value_or(0);
  options.protocol = c.store_protocol;
  // c10d's store is the rendezvous endpoint's; etcd's node rank 0 hosts the workers' store alone.
  options.port_flag = c.elastic && !c.etcd ? "--rdzv-endpoint" : "--master-port";
  return options;
}

std::uint16_t Job::store_port() const {
  if (m_store) return m_store->port();
  return m_config.etcd ? m_workers_port : m_config.master_port.value_or(0);
}

bool Job::coordinates() const { return m_config.etcd ? m_coordinator && m_coordinator->elected() : store_host(); }

std::string Job::rendezvous_where() const {
  if (m_config.etcd) return "etcd at " + m_config.rdzv_host + ":" + std::to_string(m_config.rdzv_port);
  return "the store host " + m_config.master_addr + ":" + std::to_string(store_port());
}

std::optional<std::string> Job::agent_value(const std::string& key) const {
  if (m_coordinator) return m_coordinator->value(key);
  if (!m_store) return std::nullopt;
  const auto space = m_store->find_key_space(cluster::k_agents_key_space);
  if (!space) return std::nullopt;
  const auto value = m_store->state(*space).value(key);
  if (!value) return std::nullopt;
  return std::string(*value);
}

int Job::attempt_id() const {
  if (!m_config.elastic) return m_policy.attempt();
  return cluster::attempt_id(std::max(0, m_round), m_policy.attempt() - m_round_first_attempt);
}

std::string Job::attempt_dir(int restart_count) const {
  return m_paths.run_dir + "/attempt_" + std::to_string(restart_count);
}

int Job::run() {
  m_job_start = Clock::now();
  if (m_notify.watchdog_interval()) watchdog_tick();
  if (multi_node()) {
    start_link();
  } else {
    start_attempt();
  }
  m_io.run();
  return m_exit_code;
}

AttemptSettings Job::attempt_settings(int restart_count) const {
  AttemptSettings a;
  a.master_addr = m_config.etcd ? m_workers_host : m_config.master_addr;
  a.master_port = store_port();
  a.run_id = m_config.run_id;
  a.role = m_config.role;
  a.restart_count = restart_count;
  a.max_restarts = m_config.max_restarts;
  a.use_agent_store = true;
  a.virtual_local_rank = m_config.virtual_local_rank;
  a.stack_dir = m_paths.stack_dir;
  a.stack_signal = stack_dump_signal();
  a.python_hook_dir = m_paths.python_hook_dir;
  a.debug_hangs = m_config.debug_hangs;
  // Four beats per --heartbeat-timeout, at most one every 5 s and at least one every 100 ms.
  if (m_config.hang.heartbeat_timeout) {
    a.heartbeat_interval_ms = std::clamp(static_cast<int>(m_config.hang.heartbeat_timeout->count() * 250), 100, 5000);
  }
  return a;
}

void Job::start_attempt() {
  const int restart = m_policy.attempt();
  // Each attempt has a key space of its own: a restarted worker must not read the stale keys
  // (NCCL ids, barrier counters) of the attempt before, and nobody else's keys go with them.
  if (m_store && attempt_id() != m_key_space_attempt) {
    const auto previous = m_key_space;
    m_key_space = m_store->begin_key_space("attempt_" + std::to_string(attempt_id()));
    m_key_space_attempt = attempt_id();
    m_store->end_key_space(previous);
  }
  m_notice.reset();
  m_published = false;
  m_awaiting_notice = false;
  const AttemptSettings attempt = attempt_settings(m_policy.restart_count());
  const auto dir = attempt_dir(restart);
  fs::remove_all(dir);
  std::vector<pid_t> pids;
  std::vector<int> ranks;
  for (auto& w : m_workers) {
    start_worker(*w, attempt, dir);
    pids.push_back(w->pid);
    ranks.push_back(w->plan.rank);
  }
  if (m_watch) m_watch->start_attempt(pids);
  m_hang.start_attempt(pids, ranks, m_paths.logs_kept ? dir : std::string());
  m_last_step.reset();
  if (!m_ready_sent) {
    // The rendezvous is done and every worker of the first attempt started.
    m_ready_sent = true;
    m_status_sent = Clock::now();
    m_notify.send(ready_message(format_service_status(service_snapshot())));
  } else {
    notify_status();
  }
  spdlog::info("started {} worker{} (attempt {}), store at {}:{}", m_workers.size(), m_workers.size() == 1 ? "" : "s",
               restart, attempt.master_addr, attempt.master_port);
}

void Job::start_worker(Worker& w, const AttemptSettings& attempt, const std::string& dir) {
  const int local = w.plan.local_rank;
  const auto rank_dir = dir + "/" + std::to_string(local);
  fs::create_directories(rank_dir);
  w.error_file = rank_dir + "/error.json";
  w.stderr_tail.clear();
  w.ended = {};

  const StreamMask redirect = m_config.redirects.for_rank(local);
  const StreamMask tee = m_config.tee.for_rank(local);
  const bool console_allowed = !m_config.console_ranks || m_config.console_ranks->count(local) > 0;
  w.out = Stream();
  w.err = Stream();
  w.out.console_fd = (console_allowed && (!redirect.out || tee.out)) ? 1 : -1;
  w.err.console_fd = (console_allowed && (!redirect.err || tee.err)) ? 2 : -1;
  if (redirect.out || tee.out) w.out.file_fd = open_log(rank_dir + "/stdout.log");
  if (redirect.err || tee.err) w.err.file_fd = open_log(rank_dir + "/stderr.log");

  auto argv = m_config.command;
  const auto args = substitute_local_rank({argv.begin() + 1, argv.end()}, local);
  std::copy(args.begin(), args.end(), argv.begin() + 1);
  const auto env = worker_env(m_parent_env, w.plan, attempt, w.error_file, m_default_omp);
  w.out.open = w.err.open = true;
  w.pid = m_parts.spawner.start(local, argv, env);
  w.started = Clock::now();
  spdlog::debug("rank {} (local {}) is pid {}", w.plan.rank, local, w.pid);
}

void Job::on_output(int slot, StreamId id, std::string_view bytes) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = *m_workers[static_cast<std::size_t>(slot)];
  auto& s = id == StreamId::Out ? w.out : w.err;
  m_hang.on_output(slot);
  if (s.file_fd >= 0) Console::write_all(s.file_fd, bytes);
  s.splitter.feed(bytes, [&](std::string_view line) { emit_line(w, id, line); });
}

void Job::on_closed(int slot, StreamId id) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = *m_workers[static_cast<std::size_t>(slot)];
  auto& s = id == StreamId::Out ? w.out : w.err;
  s.splitter.finish([&](std::string_view line) { emit_line(w, id, line); });
  s.open = false;
  close_file(s);
  if (m_draining) after_drain();
}

void Job::on_exited(int slot, ExitStatus status) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = *m_workers[static_cast<std::size_t>(slot)];
  w.ended = Clock::now();
  spdlog::debug("rank {} (pid {}) ended: {}", w.plan.rank, w.pid, status.describe());
  m_hang.on_exit(slot, status);
  if (m_slurm_step && status.signaled && status.value == SIGTERM && m_policy.phase() == Phase::Running) {
    // Slurm is stopping the step: its SIGTERM reached this worker before rankrun's own. That is
    // the step's stop (a preemption, a scancel), not a failure of this rank.
    spdlog::warn("rank {} was killed by SIGTERM from outside rankrun: Slurm is stopping the step", w.plan.rank);
    dispatch(event::SignalReceived{SIGTERM, true});
  }
  dispatch(event::WorkerExited{slot, status});
}

void Job::emit_line(Worker& w, StreamId id, std::string_view line) {
  const auto& s = id == StreamId::Out ? w.out : w.err;
  if (s.console_fd >= 0) m_console.write_line(s.console_fd, w.plan.rank, line);
  if (id == StreamId::Err) {
    w.stderr_tail.emplace_back(line.substr(0, k_tail_line_bytes));
    if (w.stderr_tail.size() > k_tail_lines) w.stderr_tail.pop_front();
  }
}

void Job::close_file(Stream& s) {
  if (s.file_fd >= 0) {
    ::close(s.file_fd);
    s.file_fd = -1;
  }
}

void Job::on_store_event(int local_rank, StoreEvent event) {
  switch (event) {
    case StoreEvent::Heartbeat:
      m_hang.on_heartbeat(local_rank);
      // The value is applied after this call returns; read it then, to see a new step.
      boost::asio::post(m_io, [this, local_rank, space = m_key_space] {
        if (m_finished || space != m_key_space) return;
        const auto global = m_workers[static_cast<std::size_t>(local_rank)]->plan.rank;
        if (const auto hb = m_store->state(space).value(rankrun::heartbeat_key(global))) {
          if (const auto beat = rankrun::parse_heartbeat(*hb)) {
            m_watch->heartbeat_value(local_rank, beat->step);
            if (!m_last_step || beat->step > *m_last_step) {
              m_last_step = beat->step;
              // systemctl status need not follow every step: at most one STATUS= a second.
              if (m_notify.enabled() && m_policy.phase() == Phase::Running && Clock::now() - m_status_sent >= std::chrono::seconds(1)) {
                notify_status();
              }
            }
          }
        }
      });
      break;
    case StoreEvent::Progress: m_hang.on_progress(local_rank); break;
    case StoreEvent::Rendezvous: m_hang.on_rendezvous(local_rank); break;
  }
}

RankStoreView Job::store_view(int local_rank) {
  RankStoreView view;
  if (!m_store) return view;  // a multi-node job's other nodes: the store is node 0's
  const auto& state = m_store->state(m_key_space);
  const int global = m_workers[static_cast<std::size_t>(local_rank)]->plan.rank;
  if (const auto coll = state.value(rankrun::collective_record_key(global))) {
    if (const auto record = rankrun::parse_collective_record(*coll)) {
      view.collective = CollectiveState{record->kind, record->seq, record->entered, record->name};
    }
  }
  if (const auto hb = state.value(rankrun::heartbeat_key(global))) {
    if (const auto beat = rankrun::parse_heartbeat(*hb)) {
      const auto now_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      view.heartbeat_age = static_cast<double>(now_ms - beat->unix_ms) / 1000.0;
      view.step = beat->step;
    }
  }
  view.last_key = m_watch->last_key(local_rank);
  return view;
}

// A slurmstepd signals every process of its step, rankrun's workers included (whether rankrun
// is the step's task or runs under a shell that is).
bool Job::sent_by_slurm(pid_t sender) const {
  if (!m_slurm_step || sender <= 1) return false;
  const auto comm = read_text_file("/proc/" + std::to_string(sender) + "/comm", 64);
  return comm && comm->rfind("slurmstepd", 0) == 0;
}

void Job::on_stop_signal(int signo, pid_t sender) {
  if (m_finished) return;
  if (m_slurm_step && m_policy.phase() != Phase::Running && !(multi_node() && !m_map)) {
    // srun and slurmstepd both pass the step's signal on: the second is the same stop, not a
    // second Ctrl-C. Slurm itself sends SIGKILL after its KillWait.
    spdlog::info("received {} again; already stopping (under Slurm a repeated signal does not cut the grace short)",
                 signal_name(signo));
    return;
  }
  // From a slurmstepd, the signal reached every process of the step: the workers have it
  // already and get no second one.
  const bool from_slurm = sent_by_slurm(sender);
  spdlog::warn("received {}{}; stopping the {}", signal_name(signo), from_slurm ? " from Slurm" : "",
               multi_node() ? "job on every node" : "workers");
  if (multi_node() && (!m_map || m_between_rounds)) {
    // Still in the rendezvous: no worker to stop; the waiting nodes hear why it ends.
    if (m_link) {
      m_finished = true;
      const auto message = "rankrun on " + (m_config.elastic ? std::string("the store host") : "node " + std::to_string(m_node_rank)) +
                           " received " + signal_name(signo);
      if (m_config.elastic) {
        // A waiting node leaves alone; the store host tells every waiting node (with etcd the
        // store host is no node: another rankrun takes the rounds over, the others wait on).
        if (m_rounds && !m_config.etcd) m_rounds->close_job(message, !m_map);
        end_early(128 + signo);
      } else {
        m_link->abort_rendezvous(message, [this, signo] { end_early(128 + signo); });
      }
    }
    return;
  }
  dispatch(event::SignalReceived{signo, from_slurm});
}

void Job::signal_received(int signo) { on_stop_signal(signo, 0); }

// SIGUSR1/SIGUSR2 go on to every live worker unchanged (a checkpoint request, a preemption
// notice), the job goes on. The --preempt-signal also marks the job as preempted: the signal
// that then stops it gives kExitPreempted, and with --requeue-on-preempt node 0 requeues it.
// A signal from a slurmstepd reached every process of the step, the workers included: it is not
// sent again.
void Job::on_user_signal(int signo, pid_t sender) {
  if (m_finished) return;
  const bool preempt = signo == m_config.preempt_signal;
  const bool from_slurm = sent_by_slurm(sender);
  spdlog::warn("received {}{}{}", signal_name(signo), preempt ? " (--preempt-signal: preemption is coming)" : "",
               from_slurm ? "; Slurm signalled the workers too" : "; forwarding it to the workers");
  if (!from_slurm && (m_map || !multi_node())) signal_workers(signo);
  if (!preempt) return;
  m_preempted = true;
  if (m_config.requeue_on_preempt && m_config.hosts_store) request_requeue();
}

void Job::request_requeue() {
  if (m_requeued) return;
  m_requeued = true;
  if (m_config.slurm_job_id.empty()) {
    spdlog::warn("--requeue-on-preempt: not inside a Slurm job; nothing to requeue");
    return;
  }
  // Synchronous and short: the reap loop cannot take scontrol's exit status meanwhile.
  const auto command = "scontrol requeue " + m_config.slurm_job_id + " 2>&1";
  const auto [status, out] = run_shell(command, 4096);
  if (status == 0) {
    spdlog::warn("requeued Slurm job {} (--requeue-on-preempt)", m_config.slurm_job_id);
  } else {
    spdlog::error("'scontrol requeue {}' failed: {}", m_config.slurm_job_id, out.empty() ? "could not run it" : out);
  }
}

void Job::dispatch(const Event& event) {
  const Phase before = m_policy.phase();
  for (const auto& action : m_policy.on(event)) carry_out(action);
  notify_after(before);
  if (m_link && !m_published && !m_finished) publish_local_stop();
}

void Job::signal_workers(int signo) {
  const auto& outcomes = m_policy.workers();
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    if (outcomes[i].alive) m_parts.spawner.signal(static_cast<int>(i), signo);
  }
}

void Job::start_timer(boost::asio::steady_timer& timer, double seconds, Event event) {
  timer.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  timer.async_wait([this, event](boost::system::error_code ec) {
    if (!ec) dispatch(event);
  });
}

void Job::carry_out(const Action& action) {
  std::visit(
      [this](const auto& a) {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, action::SignalWorkers>) {
          signal_workers(a.signo);
        } else if constexpr (std::is_same_v<T, action::StartGraceTimer>) {
          start_timer(m_grace_timer, a.seconds, event::GraceExpired{});
          // systemd's stop timeout must cover the grace, SIGKILL's deadline and the cleanup
          // (sent after STOPPING=1, by notify_after).
          m_extend_stop_by = a.seconds + m_policy.limits().kill_timeout + 10.0;
        } else if constexpr (std::is_same_v<T, action::KillWorkers>) {
          m_grace_timer.cancel();
          if (a.grace_expired) {
            spdlog::warn("workers still running {}s after SIGTERM (--term-timeout); sending SIGKILL", m_config.term_timeout);
          }
          signal_workers(SIGKILL);
        } else if constexpr (std::is_same_v<T, action::StartKillTimer>) {
          start_timer(m_kill_timer, a.seconds, event::KillDeadlinePassed{});
        } else if constexpr (std::is_same_v<T, action::CleanUp>) {
          clean_up();
        } else if constexpr (std::is_same_v<T, action::StartAttempt>) {
          begin_attempt(a);
        } else if constexpr (std::is_same_v<T, action::Finish>) {
          const bool preempted = m_preempted && m_policy.reason() == StopReason::Signal && a.exit_code != kExitUnkillable;
          finish(preempted ? kExitPreempted : a.exit_code);
        }
      },
      action);
}

void Job::clean_up() {
  m_hang.stop();
  m_grace_timer.cancel();
  m_kill_timer.cancel();
  if (m_policy.gave_up()) {
    for (std::size_t i = 0; i < m_workers.size(); ++i) {
      if (m_policy.workers()[i].alive) {
        spdlog::error("rank {} (pid {}) is still alive {}s after SIGKILL", m_workers[i]->plan.rank, m_workers[i]->pid,
                      m_policy.limits().kill_timeout);
      }
    }
  }
  // Daemons that kept a worker's output open die here, so the drain after this is quick.
  m_parts.cleanup.clean_up(m_workers.size(), [this](bool unkillable) {
    m_cleanup_unkillable = unkillable;
    m_draining = true;
    m_drain_timer.expires_after(k_drain_timeout);
    m_drain_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      // Someone (a process that survived) still holds a worker's output open; stop reading.
      for (std::size_t i = 0; i < m_workers.size(); ++i) m_parts.spawner.stop_reading(static_cast<int>(i));
      after_drain();
    });
    after_drain();
  });
}

void Job::after_drain() {
  if (!m_draining) return;
  for (const auto& w : m_workers) {
    if (w->out.open || w->err.open) return;
  }
  m_draining = false;
  m_drain_timer.cancel();
  if (m_link && !m_notice && !m_store_host_lost) {
    // The attempt's notice decides what comes next, the same on every node. A node whose
    // ranks all exited 0 says so; the store host publishes success once every node has.
    if (m_policy.reason() == StopReason::None) m_link->attempt_done(attempt_id());
    m_awaiting_notice = true;
    return;
  }
  dispatch(event::CleanedUp{m_cleanup_unkillable});
}

RunSummary Job::summarize(int exit_code) {
  RunSummary s;
  s.reason = m_policy.reason();
  s.root = m_policy.root_cause();
  s.signal = m_policy.stop_signal();
  s.exit_code = exit_code;
  s.restart_count = m_policy.restart_count();
  s.pinned = m_config.pin;
  s.entrypoint = m_config.entrypoint_name;
  s.seconds = seconds_between(m_job_start, Clock::now());
  if (m_watch) s.arrivals = describe_arrivals(m_watch->arrivals());
  if (multi_node()) {
    s.node_label = "node " + std::to_string(m_node_rank) + (m_host.empty() ? "" : " (" + m_host + ")");
    s.job_notice = m_notice;
    s.store_host_lost = m_store_host_lost;
  }
  s.preempted = m_preempted && m_policy.reason() == StopReason::Signal;
  const auto& outcomes = m_policy.workers();
  for (std::size_t i = 0; i < m_workers.size(); ++i) {
    const auto& w = *m_workers[i];
    RankReport r;
    r.rank = w.plan.rank;
    r.local_rank = w.plan.local_rank;
    r.pid = w.pid;
    r.status = outcomes[i].status;
    r.stopped_by_rankrun = outcomes[i].stopped_by_rankrun;
    r.seconds = seconds_between(w.started, w.ended == Clock::time_point{} ? Clock::now() : w.ended);
    r.stderr_tail.assign(w.stderr_tail.begin(), w.stderr_tail.end());
    r.error_file = w.error_file;
    if (r.status && !r.status->success()) {
      if (const auto text = read_text_file(w.error_file, k_error_file_max)) r.error = parse_error_json(*text);
    }
    s.ranks.push_back(std::move(r));
  }
  return s;
}

void Job::finish(int exit_code) {
  m_finished = true;
  m_exit_code = exit_code;
  const auto summary = summarize(exit_code);
  Console::write_all(2, format_summary(summary));
  if (m_notify.enabled()) {
    const std::string done = "done: exit code " + std::to_string(exit_code);
    m_notify.send(m_stopping_sent ? status_message(done) : stopping_message(done));
    m_stopping_sent = true;
  }
  stop_supervising();
  if (m_rounds) m_rounds->close_job("the job ended with exit code " + std::to_string(exit_code));
  if (m_link && m_map && !m_store_host_lost) {
    // This node's result goes to the store host; node 0 serves until every node's is in.
    m_link->publish_final(final_report(summary), [this] {
      m_final_sent = true;
      if (!coordinates()) {
        shutdown();
      } else if (m_all_final) {
        serve_last_answers();
      } else if (m_config.etcd) {
        // The other nodes' results are in etcd, or their leases lapse: not forever.
        m_drain_timer.expires_after(std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000)) +
                                    k_linger);
        m_drain_timer.async_wait([this](boost::system::error_code ec) {
          if (!ec) shutdown();
        });
      }
    });
    return;
  }
  shutdown();
}

// The workers are gone; what is left (this node's report to node 0, node 0 serving the other
// nodes' reports, the cleanup) is short and bounded, and a late signal (Slurm sends several)
// must not cut it: from here on the signals are ignored.
void Job::stop_supervising() {
  m_user_signals.stop();
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) ::signal(s, SIG_IGN);
  m_grace_timer.cancel();
  m_kill_timer.cancel();
  m_drain_timer.cancel();
  m_hang.stop();
}

void Job::shutdown() {
  if (m_shut_down) return;
  m_shut_down = true;
  if (m_leases && m_map && coordinates()) {
    std::vector<cluster::NodeFinal> finals;
    for (int node : m_leases->finals()) {
      if (const auto v = agent_value(cluster::final_key(node))) {
        if (auto f = cluster::decode_final(*v)) finals.push_back(std::move(*f));
      }
    }
    const std::vector<int> lost(m_leases->lost().begin(), m_leases->lost().end());
    std::string rounds;
    if (m_rounds) {
      for (const auto& r : m_rounds->keeper().history()) rounds += "rankrun:   " + r + '\n';
      rounds = "rankrun: rounds:\n" + rounds;
    }
    Console::write_all(2, rounds + cluster::format_job_summary(*m_map, finals, lost, m_exit_code));
  }
  m_drain_timer.cancel();  // node 0's linger after a failed rendezvous
  m_watchdog_timer.cancel();
  if (m_coordinator) m_coordinator->stop();  // sends the last answers (spares told the job is over)
  if (m_link) m_link->stop();
  if (m_leases) m_leases->stop();
  if (m_rounds) m_rounds->stop();
  if (m_watch) m_watch->stop();
  if (m_store) m_store->stop();
  m_parts.cleanup.close();
  m_parts.spawner.stop();
}

// The store host, once every node's result is in: an elastic job's waiting nodes (spares, late
// ones) were just told that the rendezvous is closed; the store serves until they have read it
// and hung up (at most k_linger), so that they exit 119 and not as if the store host was lost.
void Job::serve_last_answers() {
  if (!m_rounds || m_config.etcd) {
    shutdown();
    return;
  }
  m_link->stop();
  linger(Clock::now() + k_linger);
}

// Before any worker exists (a failed rendezvous, a signal during it): no summary to give.
// Node 0 keeps serving a moment, until the other nodes have read how the rendezvous ended
// and hung up (at most k_linger), so that they report the same cause and not a lost store.
void Job::end_early(int exit_code) {
  m_finished = true;
  m_exit_code = exit_code;
  stop_supervising();
  if (!store_host() || !m_link || m_config.etcd) {
    shutdown();
    return;
  }
  m_link->stop();
  linger(Clock::now() + k_linger);
}

void Job::linger(Clock::time_point deadline) {
  const auto space = m_store->find_key_space(cluster::k_agents_key_space);
  if (!space || m_store->connection_count(*space) == 0 || Clock::now() >= deadline) {
    shutdown();
    return;
  }
  m_drain_timer.expires_after(std::chrono::milliseconds(20));
  m_drain_timer.async_wait([this, deadline](boost::system::error_code ec) {
    if (!ec) linger(deadline);
  });
}

// The coordinator's parts: the nodes' leases and results, and (elastic) the rounds, which read
// the joins from and write the answers to `keys`.
void Job::coordinate(cluster::RoundKeys* keys) {
  m_leases = std::make_unique<cluster::LeaseWatch>(
      m_io, m_config.nnodes, std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000)),
      cluster::LeaseWatch::Hooks{[this](int node) { on_node_lost(node); },
                                 [this](int attempt) {
                                   cluster::StopNotice n;
                                   n.kind = cluster::StopKind::Success;
                                   n.host = m_host;
                                   m_link->publish_stop(attempt, n);
                                 },
                                 [this] {
                                   m_all_final = true;
                                   // etcd: the coordinator may be a spare; the job is over for the waiting nodes.
                                   if (m_config.etcd && m_rounds && !m_finished) m_rounds->close_job("the job is over");
                                   if (m_final_sent) serve_last_answers();
                                 }});
  if (!keys) return;
  cluster::RoundRules rules;
  rules.min_nodes = m_config.min_nodes;
  rules.max_nodes = m_config.nnodes;
  rules.last_call = std::chrono::milliseconds(static_cast<long long>(m_config.last_call_timeout * 1000));
  rules.join_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.join_timeout * 1000));
  std::function<void(const cluster::RoundRecord&)> closed;
  if (m_config.etcd) {
    // The coordinator times the round's leases whether or not it is a member.
    closed = [this](const cluster::RoundRecord& round) {
      m_leases->start_round(static_cast<int>(round.members.size()), cluster::lease_prefix(round.round));
    };
  }
  m_rounds = std::make_unique<cluster::RoundHost>(
      m_io, *keys, rules,
      cluster::RoundHost::Hooks{[this](const std::string& why, int round, int nodes) { publish_membership(why, round, nodes); },
                                std::move(closed)});
}

void Job::start_link() {
  cluster::LinkSettings s;
  s.store_host = m_config.etcd ? m_config.rdzv_host : m_config.master_addr;
  s.store_port = m_config.etcd ? m_config.rdzv_port : store_port();
  s.etcd = m_config.etcd;
  if (s.etcd) s.etcd_prefix = "/rankrun/" + m_config.run_id + "/";
  s.node_rank = m_config.node_rank;
  s.nnodes = m_config.nnodes;
  s.elastic = m_config.elastic;
  s.coordinator = store_host();
  s.nproc = m_config.nproc;
  s.local_addr = m_config.local_addr;
  s.run_id = m_config.run_id;
  s.rdzv_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.rdzv_timeout * 1000));
  s.node_timeout = std::chrono::milliseconds(static_cast<long long>(m_config.node_timeout * 1000));
  if (m_config.etcd) {
    start_coordinator();
  } else if (m_store) {
    m_round_keys = cluster::store_keys(*m_store);
    coordinate(m_config.elastic ? m_round_keys.get() : nullptr);
    m_store->add_observer(m_leases.get());
    if (m_rounds) m_store->add_observer(m_rounds.get());
  }
  m_link = std::make_unique<cluster::NodeLink>(
      m_io, s,
      cluster::LinkHandlers{
          [this](cluster::NodeMap map, int node_rank, std::string host, int round) {
            on_rendezvous(std::move(map), node_rank, std::move(host), round);
          },
          [this](int code, std::string message) {
            spdlog::error("{}", message);
            if (m_between_rounds && !m_finished) {
              end_early(code);
              return;
            }
            if (m_map && !m_finished) {
              // A restart barrier that failed: the workers are gone already.
              m_store_host_lost = true;
              dispatch(event::JobStop{StopReason::StoreHostLost, code, false});
              if (m_awaiting_notice) dispatch(event::CleanedUp{m_cleanup_unkillable});
              return;
            }
            if (!m_finished) end_early(code);
          },
          [this](int attempt, cluster::StopNotice n) { on_notice(attempt, std::move(n)); },
          [this](std::string why) {
            if (m_finished) {
              if (!m_shut_down) shutdown();
              return;
            }
            if (m_between_rounds) {
              spdlog::error("lost {} between rounds: {}", rendezvous_where(), why);
              end_early(kExitStoreHostLost);
              return;
            }
            spdlog::error("lost {}: {}; stopping this node's workers", rendezvous_where(), why);
            m_store_host_lost = true;
            dispatch(event::JobStop{StopReason::StoreHostLost, kExitStoreHostLost, false});
            if (m_awaiting_notice) {
              m_awaiting_notice = false;
              dispatch(event::CleanedUp{m_cleanup_unkillable});
            }
          }});
  notify_status();
  if (m_config.etcd) {
    spdlog::info("elastic rendezvous in etcd at {}:{}, {} to {} nodes", m_config.rdzv_host, m_config.rdzv_port,
                 m_config.min_nodes, m_config.nnodes);
  } else if (m_config.elastic) {
    spdlog::info("elastic rendezvous at {}:{} ({}), {} to {} nodes", m_config.master_addr, store_port(),
                 store_host() ? "hosted here" : "hosted there", m_config.min_nodes, m_config.nnodes);
  } else {
    spdlog::info("node {} of {}: rendezvous at {}:{}", m_config.node_rank, m_config.nnodes, m_config.master_addr, store_port());
  }
  if (!m_config.start_check_failures.empty()) {
    // A check failed here: this node does not join, no node starts its workers, and every node
    // hears which one and why.
    const auto message = "node " + std::to_string(m_config.node_rank) + " failed its checks: " + m_config.start_check_failures;
    spdlog::error("{}", message);
    m_finished = true;
    m_link->start_aborted(message, [this] { end_early(kExitUsage); });
    return;
  }
  m_link->start();
}

void Job::on_rendezvous(cluster::NodeMap map, int node_rank, std::string host, int round) {
  if (m_finished) return;
  m_host = std::move(host);
  m_between_rounds = false;
  m_node_rank = node_rank;
  m_round = round;
  m_round_first_attempt = m_policy.attempt();
  const int first_rank = map.nodes[static_cast<std::size_t>(node_rank)].first_rank;
  auto lines = cluster::format_node_map(map);
  if (round >= 0) {
    const char* role = m_config.etcd ? (node_rank == 0 ? " (this node hosts the workers' store)" : "")
                       : store_host()  ? " (this node hosts the store)"
                                       : "";
    lines = fmt::format("round {}: {} node{}, world size {}{}\n", round, map.nodes.size(), map.nodes.size() == 1 ? "" : "s",
                        map.world_size, role) + lines;
  }
  std::string text;
  for (std::size_t at = 0; at < lines.size();) {
    const auto nl = lines.find('\n', at);
    const auto end = nl == std::string::npos ? lines.size() : nl + 1;
    text += "rankrun: " + lines.substr(at, end - at);
    at = end;
  }
  Console::write_all(2, text);
  const auto plans = plan_workers(m_config, first_rank, map.world_size, node_rank, static_cast<int>(map.nodes.size()));
  for (std::size_t i = 0; i < m_workers.size(); ++i) m_workers[i]->plan = plans[i];
  m_console.set_host(m_host);
  if (m_watch) m_watch->set_first_rank(first_rank);
  const int nodes = static_cast<int>(map.nodes.size());
  m_map = std::move(map);
  if (m_leases && !m_config.etcd) {
    if (round >= 0) {
      m_leases->start_round(nodes, cluster::lease_prefix(round));
    } else {
      m_leases->start();
    }
  }
  if (m_config.etcd && node_rank == 0) {
    host_workers_store(first_rank);
    if (m_finished) return;  // it could not: this node left
  }
  if (attempt_id() == 0 && !m_config.etcd) {
    start_attempt();
    return;
  }
  // A later round (a membership change, or this node joined a running job): every node of the
  // round has stopped the workers of the round before when the store host opens this one.
  // etcd: every round, since the workers' store is node rank 0's and the nodes learn it here.
  const int id = attempt_id();
  m_link->ready_for(id, [this, id](const std::string& opened) {
    if (m_finished) return;
    take_opened(opened);
    start_attempt();
    if (m_config.etcd ? m_node_rank == 0 : store_host()) m_link->open_attempt(id, opened_value());
  });
}

void Job::publish_membership(const std::string& why, int next_round, int next_nodes) {
  if (m_finished || (!m_map && !m_config.etcd)) return;
  cluster::StopNotice n;
  n.kind = cluster::StopKind::Membership;
  n.node_rank = m_node_rank;
  n.host = m_host;
  n.why = why;
  n.next_round = next_round;
  n.next_nodes = next_nodes;
  // etcd: the coordinator need not be a member of the round (a spare elected after the one
  // before was lost): the notice goes to the attempt the round runs.
  m_link->publish_stop(m_config.etcd ? running_attempt(next_round - 1) : attempt_id(), n);
}

void Job::begin_attempt(const action::StartAttempt& a) {
  if (a.membership) {
    // The notice said why (a node lost or arrived); the next round decides the ranks.
    spdlog::info("joining round {}", m_notice ? m_notice->next_round : m_round + 1);
    if (m_leases) m_leases->stop();
    m_between_rounds = true;
    m_link->rejoin();
    return;
  }
  if (a.failed_local_rank >= 0) {
    spdlog::warn("rank {} failed ({}); restarting all workers (restart {} of {})",
                 m_workers[static_cast<std::size_t>(a.failed_local_rank)]->plan.rank, a.failed_status.describe(),
                 a.restart_count, m_config.max_restarts);
  } else {
    spdlog::warn("{}; restarting all workers on every node (restart {} of {})",
                 m_notice ? m_notice->describe() : std::string("the job failed"), a.restart_count, m_config.max_restarts);
  }
  if (!m_link) {
    start_attempt();
    return;
  }
  // Every node cleaned up attempt N-1 before node 0 opens attempt N's key space and any node
  // starts its workers.
  const int attempt = attempt_id();
  m_link->ready_for(attempt, [this, attempt](const std::string& opened) {
    if (m_finished) return;
    take_opened(opened);
    start_attempt();
    if (m_config.etcd ? m_node_rank == 0 : store_host()) m_link->open_attempt(attempt, opened_value());
  });
}

void Job::publish_local_stop() {
  if (!m_map) return;
  cluster::StopNotice n;
  n.node_rank = m_node_rank;
  n.host = m_host;
  switch (m_policy.reason()) {
    case StopReason::Failure: {
      const auto root = m_policy.root_cause();
      if (!root) return;
      const auto& w = *m_workers[static_cast<std::size_t>(*root)];
      n.kind = cluster::StopKind::Failure;
      n.rank = w.plan.rank;
      n.local_rank = w.plan.local_rank;
      n.status = *m_policy.workers()[static_cast<std::size_t>(*root)].status;
      n.stderr_tail.assign(w.stderr_tail.begin(), w.stderr_tail.end());
      n.error_file = w.error_file;
      if (const auto text = read_text_file(w.error_file, k_error_file_max)) n.error = parse_error_json(*text);
      n.restartable = true;
      break;
    }
    case StopReason::Signal:
      n.kind = cluster::StopKind::Signal;
      n.signo = m_policy.stop_signal().value_or(SIGTERM);
      n.preempted = m_preempted;
      break;
    case StopReason::Hang: n.kind = cluster::StopKind::Hang; break;
    default: return;
  }
  m_published = true;
  m_link->publish_stop(attempt_id(), n);
}

void Job::on_notice(int attempt, cluster::StopNotice notice) {
  if (m_finished || attempt != attempt_id() || m_notice) return;
  const bool mine = notice.node_rank == m_node_rank && notice.kind != cluster::StopKind::Success &&
                    notice.kind != cluster::StopKind::NodeLost && notice.kind != cluster::StopKind::Membership;
  if (!mine && notice.kind != cluster::StopKind::Success) spdlog::warn("stopping the job: {}", notice.describe());
  StopReason reason = StopReason::Remote;
  if (notice.kind == cluster::StopKind::Success) reason = StopReason::None;
  if (notice.kind == cluster::StopKind::NodeLost) reason = StopReason::NodeLost;
  const bool membership = notice.kind == cluster::StopKind::Membership;
  if (membership) reason = StopReason::Membership;
  const auto code = notice.exit_code();
  const bool restartable = notice.restartable;
  m_notice = std::move(notice);
  dispatch(event::JobStop{reason, code, restartable, membership});
  if (m_awaiting_notice) {
    m_awaiting_notice = false;
    dispatch(event::CleanedUp{m_cleanup_unkillable});
  }
}

void Job::on_node_lost(int node_rank) {
  if (m_config.etcd) {
    // The coordinator's view (it need not be a member of the round).
    if (!m_rounds) return;
    std::string host = "?";
    for (const auto& m : m_rounds->keeper().members()) {
      if (m.node_rank == node_rank) host = m.host;
    }
    spdlog::error("node {} ({}) is lost: its etcd lease lapsed (--node-timeout {} s)", node_rank, host, m_config.node_timeout);
    m_rounds->lost(node_rank);
    return;
  }
  if (!m_map || static_cast<std::size_t>(node_rank) >= m_map->nodes.size()) return;
  const auto& node = m_map->nodes[static_cast<std::size_t>(node_rank)];
  spdlog::error("node {} ({}, {}) is lost: no lease for {} s (--node-timeout)", node_rank, node.host, cluster::ranks_of(node),
                m_config.node_timeout);
  if (m_finished) return;
  if (m_rounds) {
    // Elastic: the round ends, a new one forms without it (RoundHost's restart hook).
    m_rounds->lost(node_rank);
    return;
  }
  cluster::StopNotice n;
  n.kind = cluster::StopKind::NodeLost;
  n.node_rank = node_rank;
  n.host = node.host;
  n.ranks = cluster::ranks_of(node);
  m_link->publish_stop(attempt_id(), n);
}

cluster::NodeFinal Job::final_report(const RunSummary& summary) const {
  cluster::NodeFinal f;
  f.node_rank = m_node_rank;
  f.host = m_host;
  f.exit_code = summary.exit_code;
  for (const auto& r : summary.ranks) {
    std::string result = r.status ? (r.status->success() ? "exit 0" : r.status->describe()) : "still running";
    if (r.stopped_by_rankrun && r.status && !r.status->success()) result += " (stopped by rankrun)";
    if (summary.root && *summary.root == r.local_rank) result += "  <- root cause";
    f.rows.push_back("rank " + std::to_string(r.rank) + " (local " + std::to_string(r.local_rank) + ", pid " +
                     std::to_string(r.pid) + "): " + result);
  }
  return f;
}

ServiceSnapshot Job::service_snapshot() const {
  ServiceSnapshot s;
  s.restart_count = m_policy.restart_count();
  s.max_restarts = m_config.max_restarts;
  s.node_rank = m_node_rank;
  s.nnodes = m_map ? static_cast<int>(m_map->nodes.size()) : m_config.nnodes;
  const auto& outcomes = m_policy.workers();
  s.ranks_running = static_cast<int>(std::count_if(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.alive; }));
  s.last_step = m_last_step;
  if (multi_node() && !m_map) {
    s.state = ServiceSnapshot::State::WaitingForNodes;
  } else if (m_policy.phase() != Phase::Running) {
    s.state = ServiceSnapshot::State::Stopping;
    switch (m_policy.reason()) {
      case StopReason::None: s.why = "every rank finished"; break;
      case StopReason::Failure:
        if (const auto root = m_policy.root_cause()) {
          const auto& status = outcomes[static_cast<std::size_t>(*root)].status;
          s.why = "rank " + std::to_string(m_workers[static_cast<std::size_t>(*root)]->plan.rank) + " failed (" +
                  (status ? status->describe() : std::string("?")) + ")";
        } else {
          s.why = "a rank failed";
        }
        break;
      case StopReason::Signal: s.why = "received " + signal_name(m_policy.stop_signal().value_or(SIGTERM)); break;
      case StopReason::Hang: s.why = "a hang was detected"; break;
      case StopReason::StoreHostLost: s.why = "lost the store host"; break;
      case StopReason::Remote:
      case StopReason::NodeLost:
      case StopReason::Membership: s.why = m_notice ? m_notice->describe() : std::string("the job stopped on another node"); break;
    }
  }
  return s;
}

void Job::notify_status() {
  if (!m_notify.enabled() || m_finished) return;
  m_status_sent = Clock::now();
  m_notify.send(status_message(format_service_status(service_snapshot())));
}

// After an event: a stop that began is told to systemd, with STOPPING=1 when no restart can
// follow it (systemd then shows the service as deactivating).
void Job::notify_after(Phase before) {
  if (!m_notify.enabled()) return;
  const auto extend = std::exchange(m_extend_stop_by, 0.0);
  if (!m_finished && before == Phase::Running && m_policy.phase() != Phase::Running) notify_stop_began();
  if (extend > 0) m_notify.send(extend_timeout_message(extend));
}

void Job::notify_stop_began() {
  const auto reason = m_policy.reason();
  const bool may_restart = (reason == StopReason::Failure || reason == StopReason::Remote) && !m_policy.stop_signal() &&
                           m_policy.restart_count() < m_config.max_restarts;
  const auto text = format_service_status(service_snapshot());
  if (may_restart || m_stopping_sent) {
    m_notify.send(status_message(text));
  } else {
    m_stopping_sent = true;
    m_notify.send(stopping_message(text));
  }
  m_status_sent = Clock::now();
}

// WATCHDOG=1 every half $WATCHDOG_USEC while supervision is healthy: never after a hang was
// detected, so that systemd's watchdog ends a rankrun that cannot end a hang itself.
void Job::watchdog_tick() {
  const auto interval = m_notify.watchdog_interval();
  if (!interval || m_hang_seen || m_shut_down) return;
  m_notify.send(kWatchdogMessage);
  m_watchdog_timer.expires_after(*interval);
  m_watchdog_timer.async_wait([this](boost::system::error_code ec) {
    if (!ec) watchdog_tick();
  });
}

}  // namespace rankrun::launcher
