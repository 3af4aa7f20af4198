#include "launcher/job/job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <spdlog/spdlog.h>
#include <utility>

#include "launcher/types/error_record.hpp"
#include "launcher/types/launch_error.hpp"
#include "launcher/files/run_dir.hpp"
#include "launcher/gpu/gpu_guard.hpp"
#include "launcher/observe/job_status.hpp"
#include "launcher/observe/observer.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/report/line_prefix.hpp"

namespace rankrun::launcher {
using Clock = std::chrono::steady_clock;

namespace {

// The signals rankrun takes from the user, Slurm or systemd: the stop signals (--signals-to-handle
// and the four it always handles) and SIGUSR1, SIGUSR2, which otherwise only reach the workers.
std::vector<int> handled_signals(const std::vector<int>& stop_signals) {
  std::vector<int> all = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  for (int s : stop_signals) {
    if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
  }
  return all;
}

// How long to wait for a finished worker's output to reach EOF; a daemon that kept the
// worker's stdout open must not keep rankrun waiting.
constexpr auto k_drain_timeout = std::chrono::seconds(2);
// How long the ranks still running are held once a rank died of a collective timeout, at most:
// the hold ends as soon as their stacks and dumps are in (woken samplers answer within
// milliseconds), and this outlasts the collector's own bounds (2.5 s for a sampler's answer,
// then 1.5 s for a signal's dump) so that a loaded machine's slow answer still makes the verdict.
constexpr auto k_timeout_evidence_window = std::chrono::seconds(5);

JobLimits limits_of(const LaunchConfig& c) {
  JobLimits l;
  l.max_restarts = c.max_restarts;
  l.term_timeout = c.term_timeout;
  l.kill_timeout = c.kill_timeout;
  l.term_signal = SIGTERM;
  l.slurm_step = !c.slurm_job_id.empty();
  return l;
}

}  // namespace

// Until a round says otherwise, the ranks of a job on one node; the first rank names the
// runtime's keys.
std::vector<std::unique_ptr<Job::Worker>> Job::make_workers(const LaunchConfig& c) {
  std::vector<std::unique_ptr<Worker>> workers;
  for (const auto& plan : plan_workers(c)) {
    auto w = std::make_unique<Worker>();
    w->plan = plan;
    workers.push_back(std::move(w));
  }
  return workers;
}

Job::Job(boost::asio::io_context& io, const LaunchConfig& config, EnvMap parent_env, JobPaths paths, JobParts parts)
    : m_io(io),
      m_config(config),
      m_parent_env(std::move(parent_env)),
      m_paths(std::move(paths)),
      m_parts(parts),
      m_policy(config.nproc, limits_of(config)),
      m_workers(make_workers(config)),
      m_output(m_console, m_workers.size()),
      m_store(io, config.hosts_store ? rdzv::open_store(io, config) : nullptr, m_workers.front()->plan.rank,
              [this](int local_rank, StoreEvent event) { on_store_event(local_rank, event); }),
      m_hang(io, config.hang, parts.stacks, m_console,
             HangMonitor::Hooks{[this](int local_rank) { return store_view(local_rank); },
                                [this] {
                                  m_service.hang_seen();  // supervision is no longer healthy
                                  on_hang_found();
                                },
                                [this](cluster::NodeProgress mine) { share_progress(std::move(mine)); },
                                [this](const std::string& warning) {
                                  log_event("straggler", {{"warning", warning}});
                                }}),
      m_user_signals(io, handled_signals(config.stop_signals),
                     [this](int signo, pid_t sender) {
                       if (!std::binary_search(m_config.stop_signals.begin(), m_config.stop_signals.end(), signo)) {
                         on_user_signal(signo, sender);
                         return;
                       }
                       // A --preempt-signal listed in --signals-to-handle announces the
                       // preemption and stops the job at once.
                       if (signo == m_config.preempt_signal && !m_finished) announce_preemption();
                       on_stop_signal(signo, sender);
                     }),
      m_grace_timer(io),
      m_kill_timer(io),
      m_drain_timer(io),
      m_slurm(config.slurm_job_id),
      m_service(io, m_parent_env, [this] { return service_snapshot(); }),
      m_nodes(io) {
  m_nodes.rank = config.node_rank;
  m_parts.spawner.listen(
      WorkerListener{[this](int slot, StreamId id, std::string_view bytes) { on_output(slot, id, bytes); },
                     [this](int slot, StreamId id) { on_closed(slot, id); },
                     [this](int slot, ExitStatus status, ExitSeen seen) { on_exited(slot, status, seen); }});
  m_rdzv = m_parts.rendezvous ? m_parts.rendezvous(job_side()) : rdzv::make_backend(io, config, job_side());
  if (m_parts.observer) {
    m_parts.observer->attach([this](std::function<void(observe::JobStatus)> answer) { status(std::move(answer)); });
  }
  m_output.set_filters(config.stdout_filters, config.stderr_filters);
  for (std::size_t i = 0; i < config.worker_cpus.size(); ++i) {
    const int node = i < config.worker_memory_node.size() ? config.worker_memory_node[i] : -1;
    if (!config.worker_cpus[i].empty() || node >= 0)
      m_parts.spawner.place(static_cast<int>(i), {config.worker_cpus[i], node});
  }
  if (!config.line_prefix_template.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    m_hostname = name;
  }
  m_default_omp = should_default_omp_threads(m_parent_env, config.nproc);
  if (m_default_omp) {
    spdlog::warn(
        "setting OMP_NUM_THREADS=1 for each worker (it was unset and there are {} workers per node); "
        "set it yourself to tune",
        config.nproc);
  }
}

Job::~Job() {
  m_rdzv.reset();  // it stops observing the store
}
std::uint16_t Job::store_port() const { return m_store.server() ? m_store.port() : m_rdzv->workers_port(); }
int Job::attempt_id() const {
  if (m_nodes.round < 0) return m_policy.attempt();
  return cluster::attempt_id(m_nodes.round, m_policy.attempt() - m_nodes.round_first_attempt);
}
std::string Job::attempt_dir(int restart_count) const { return m_paths.run_dir + "/" + attempt_name(restart_count); }

void Job::own_failure(const std::string& what) {
  if (m_finished) return;
  spdlog::error("{}; stopping the job", what);
  if (m_own_failure.empty()) m_own_failure = what;
  log_event("own_failure", {{"what", what}});
  const bool starting = m_policy.phase() == Phase::Running && m_started < static_cast<int>(m_workers.size());
  dispatch(event::InternalFailure{starting ? m_started : -1});
  // The other nodes hear it, as they would a failure here.
  if (m_nodes.map && !m_nodes.attempt.published && !m_nodes.attempt.notice) publish_local_stop();
}

int Job::run(const std::string& failed_checks) {
  m_job_start = Clock::now();
  log_event("job_started",
            {{"entrypoint", m_config.entrypoint_name},
             {"run_id", m_config.run_id},
             {"nproc", m_config.nproc},
             {"nnodes", is_elastic(m_config.rdzv) ? Json(fmt::format("{}:{}", m_config.min_nodes, m_config.nnodes))
                                                  : Json(m_config.nnodes)},
             {"max_restarts", m_config.max_restarts},
             {"pid", ::getpid()}});
  m_service.start();
  if (!failed_checks.empty()) {
    // A check failed here: this node does not join, no node starts its workers, and every node
    // hears which one and why.
    const auto message = "node " + std::to_string(m_config.node_rank) + " failed its checks: " + failed_checks;
    spdlog::error("{}", message);
    m_finished = true;
    m_rdzv->start_aborted(rendezvous_hooks(), message, [this] { end_early(JobEnding::ended_early(EarlyEnd::Usage)); });
  } else {
    m_rdzv->start(rendezvous_hooks());
  }
  // Every error of rankrun's own that escapes a handler comes here and ends the job through the
  // policy (the workers' grace, the report, k_exit_internal); the loop goes on to that end.
  for (;;) {
    try {
      m_io.run();
      break;
    } catch (const std::exception& e) {
      own_failure(e.what());
    }
  }
  return m_exit_code;
}

AttemptSettings Job::attempt_settings(int restart_count) const {
  AttemptSettings a;
  a.master_addr = m_rdzv->workers_host();
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
  a.worker_library = m_paths.worker_library;
  a.debug_hangs = m_config.debug_hangs;
  a.signals_to_handle = m_config.signals_to_handle;
  // Four beats per --heartbeat-timeout, at most one every 5 s and at least one every 100 ms.
  if (m_config.hang.heartbeat_timeout) {
    a.heartbeat_interval_ms = std::clamp(static_cast<int>(m_config.hang.heartbeat_timeout->count() * 250), 100, 5000);
  }
  return a;
}

void Job::start_attempt() {
  m_started = 0;
  for (auto& w : m_workers) w->pid = 0;  // none of this attempt's yet
  dispatch(event::AttemptStarted{});
  try {
    start_attempt_workers();
  } catch (const LaunchError& e) {
    own_failure(e.what());
  }
}

void Job::start_attempt_workers() {
  const int restart = m_policy.attempt();
  const AttemptSettings attempt = attempt_settings(m_policy.restart_count());
  const auto dir = attempt_dir(restart);
  if (const int error = remove_below(m_paths.dir_fd, attempt_name(restart)); error != 0) {
    throw LaunchError("cannot remove " + dir + " from an earlier run: " + std::strerror(error) + "; check --log-dir");
  }
  if (!m_config.stdout_filters.empty() || !m_config.stderr_filters.empty()) {
    if (const int error = make_dirs_below(m_paths.dir_fd, attempt_name(restart), 0755); error != 0) {
      throw LaunchError("cannot create " + dir + ": " + std::strerror(error) + "; check --log-dir");
    }
    const UniqueFd dir_fd = open_below(m_paths.dir_fd, attempt_name(restart), O_PATH | O_DIRECTORY);
    if (!dir_fd) {
      const int error = errno;
      throw LaunchError("cannot open " + dir + ": " + std::strerror(error) + "; check --log-dir");
    }
    m_output.open_filtered(dir_fd.get(), dir);
  }
  std::vector<pid_t> pids;
  std::vector<int> ranks;
  for (auto& w : m_workers) {
    start_worker(*w, attempt, restart);
    ++m_started;
    pids.push_back(w->pid);
    ranks.push_back(w->plan.rank);
  }
  // Each attempt has a key space of its own, opened before any worker of it can connect.
  m_store.start_attempt(attempt_id(), pids);
  if (m_paths.logs_kept) {
    m_hang.start_attempt(pids, ranks, open_below(m_paths.dir_fd, attempt_name(restart), O_PATH | O_DIRECTORY), dir);
  } else {
    m_hang.start_attempt(pids, ranks);
  }
  m_last_step.reset();
  m_attempt_start = Clock::now();
  log_event("attempt_started", {{"attempt", restart}, {"attempt_id", attempt_id()}, {"workers", m_workers.size()}});
  for (const auto& w : m_workers) {
    log_event("worker_started", {{"rank", w->plan.rank},
                                 {"local_rank", w->plan.local_rank},
                                 {"pid", w->pid},
                                 {"attempt", restart},
                                 {"gpu", w->plan.cuda_visible_devices.value_or("")}});
  }
  m_service.attempt_started();
  spdlog::info("started {} worker{} (attempt {}), store at {}:{}", m_workers.size(), m_workers.size() == 1 ? "" : "s",
               restart, attempt.master_addr, attempt.master_port);
}

void Job::start_worker(Worker& w, const AttemptSettings& attempt, int restart) {
  const int local = w.plan.local_rank;
  const auto rank_rel = attempt_name(restart) + "/" + std::to_string(local);
  const auto rank_dir = m_paths.run_dir + "/" + rank_rel;
  if (const int error = make_dirs_below(m_paths.dir_fd, rank_rel, 0755); error != 0) {
    throw LaunchError("cannot create " + rank_dir + ": " + std::strerror(error) + "; check --log-dir");
  }
  const UniqueFd rank_fd = open_below(m_paths.dir_fd, rank_rel, O_PATH | O_DIRECTORY);
  if (!rank_fd) {
    const int error = errno;
    throw LaunchError("cannot open " + rank_dir + ": " + std::strerror(error) + "; check --log-dir");
  }
  w.error_file = rank_dir + "/error.json";
  w.error_rel = rank_rel + "/error.json";
  w.ended = {};
  w.ended_exact = true;
  OutputTargets targets;
  targets.rank = w.plan.rank;
  if (!m_config.line_prefix_template.empty()) {
    targets.prefix = expand_line_prefix(m_config.line_prefix_template,
                                        LinePrefixValues{m_config.role, w.plan.rank, local, m_hostname});
  }
  targets.console = !m_config.console_ranks || m_config.console_ranks->count(local) > 0;
  targets.redirect = m_config.redirects.for_rank(local);
  targets.tee = m_config.tee.for_rank(local);
  targets.rank_dir = rank_dir;
  targets.rank_dir_fd = rank_fd.get();
  m_output.open(local, targets);

  auto argv = m_config.command;
  const auto args = substitute_local_rank({argv.begin() + 1, argv.end()}, local);
  std::copy(args.begin(), args.end(), argv.begin() + 1);
  const auto env = worker_env(m_parent_env, w.plan, attempt, w.error_file, m_default_omp);
  w.pid = m_parts.spawner.start(local, argv, env);
  w.started = Clock::now();
  w.started_wall = std::chrono::system_clock::now();
  spdlog::debug("rank {} (local {}) is pid {}", w.plan.rank, local, w.pid);
}

void Job::on_output(int slot, StreamId id, std::string_view bytes) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  m_hang.on_output(slot);
  m_output.feed(slot, id, bytes);
}

void Job::on_closed(int slot, StreamId id) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  m_output.close(slot, id);
  if (m_nodes.attempt.tail_wait && id == StreamId::Err && m_policy.root_cause() == slot &&
      m_nodes.hold_timer.cancel() > 0) {
    publish_held_failure();
  }
  if (m_draining) after_drain();
}

void Job::on_exited(int slot, ExitStatus status, ExitSeen seen) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = *m_workers[static_cast<std::size_t>(slot)];
  w.ended = seen.at;
  w.ended_exact = seen.exact;
  spdlog::debug("rank {} (pid {}) ended: {}", w.plan.rank, w.pid, status.describe());
  Json ended = {
      {"rank", w.plan.rank}, {"local_rank", w.plan.local_rank}, {"pid", w.pid}, {"attempt", m_policy.restart_count()}};
  if (status.signaled)
    ended["signal"] = status.describe();
  else
    ended["exit_code"] = status.value;
  ended["seconds"] = json_seconds(seconds_between(w.started, w.ended));
  ended["seconds_exact"] = seen.exact;
  ended["stopped_by_rankrun"] = m_policy.phase() == Phase::Stopping || m_policy.phase() == Phase::Killing;
  log_event("worker_ended", ended);
  m_hang.on_exit(slot, status);
  // A rank that ends while the job's hang holds every rank for its evidence (its peer elsewhere
  // was stopped first): the hang is the cause, and its stop comes before this exit.
  if (m_nodes.attempt.evidence_then) end_evidence_hold();
  if (!status.success() && m_policy.phase() == Phase::Running && !m_nodes.attempt.notice) {
    if (const auto timeout = m_hang.collective_timeout(slot)) {
      // A rank that died of a collective timeout: the ranks still running are asked for their
      // flight recorder dumps before its failure stops them (a few seconds at most).
      spdlog::warn(
          "rank {} died of a collective timeout ({}); collecting the other ranks' stacks and flight recorder "
          "dumps before they are stopped",
          w.plan.rank, *timeout);
      const bool collecting = m_hang.collect_timeout_evidence(slot, [this,
                                                                     rank = w.plan.rank](const std::string& verdict) {
        if (!verdict.empty())
          Console::write_all(2, "rankrun: rank " + std::to_string(rank) + "'s collective timeout: " + verdict + "\n");
        end_evidence_hold();
      });
      if (collecting) {
        hold_for_evidence(
            [this, slot, status, seen] {
              dispatch(event::WorkerExited{slot, status, seen.before_signal});
            },
            k_timeout_evidence_window);
        return;
      }
    }
  }
  dispatch(event::WorkerExited{slot, status, seen.before_signal});
}

void Job::on_store_event(int local_rank, StoreEvent event) {
  switch (event) {
    case StoreEvent::Heartbeat:
      m_hang.on_heartbeat(local_rank);
      m_store.read_step(local_rank, m_workers[static_cast<std::size_t>(local_rank)]->plan.rank,
                        [this, local_rank](const WorkersStore::StepReport& report) {
                          if (m_finished) return;
                          const int rank = m_workers[static_cast<std::size_t>(local_rank)]->plan.rank;
                          log_progress(rank, report, m_hang.on_section(local_rank, report.section));
                          if (report.called) m_hang.on_progress(local_rank);  // the script called since the last beat
                          const long long step = report.step;
                          if (m_last_step && step <= *m_last_step) return;
                          m_last_step = step;
                          if (m_policy.phase() == Phase::Running) m_service.new_step();
                        });
      break;
    case StoreEvent::Progress: m_hang.on_progress(local_rank); break;
    case StoreEvent::Rendezvous: m_hang.on_rendezvous(local_rank); break;
  }
}

RankStoreView Job::store_view(int local_rank) {
  return m_store.view(local_rank, m_workers[static_cast<std::size_t>(local_rank)]->plan.rank);
}

void Job::on_stop_signal(int signo, pid_t sender) {
  if (m_finished) return;
  if (m_policy.ignores_stop_signal()) {
    // srun and slurmstepd both pass the step's signal on: the second is the same stop, not a
    // second Ctrl-C. Slurm itself sends SIGKILL after its KillWait.
    spdlog::info("received {} again; already stopping (under Slurm a repeated signal does not cut the grace short)",
                 signal_name(signo));
    return;
  }
  // From a slurmstepd, the signal reached every process of the step: the workers have it
  // already and get no second one.
  const bool from_slurm = m_slurm.signalled_by_slurm(sender);
  spdlog::warn("received {}{}; stopping the {}", signal_name(signo), from_slurm ? " from Slurm" : "",
               m_nodes.map ? "job on every node" : "workers");
  log_event("stop", {{"signal", signal_name(signo)}, {"from_slurm", from_slurm}});
  if (!m_nodes.formed || m_nodes.between_rounds) {
    // Still in the rendezvous: no worker to stop; the waiting nodes hear why it ends.
    m_finished = true;
    m_rdzv->abort_waiting(signo, [this, signo] { end_early(JobEnding::stopped_by(signo)); });
    return;
  }
  dispatch(event::SignalReceived{signo, from_slurm});
  // A wait for the last attempt's GPU memory ends now: there is no restart to wait for.
  if (m_parts.gpus) m_parts.gpus->cut_short();
}

void Job::signal_received(int signo) { on_stop_signal(signo, 0); }

// SIGUSR1/SIGUSR2 go on to every live worker unchanged (a checkpoint request, a preemption
// notice), the job goes on. The --preempt-signal also marks the job as preempted: the signal
// that then stops it gives k_exit_preempted, and with --requeue-on-preempt node 0 requeues it.
// A signal from a slurmstepd reached every process of the step, the workers included: it is not
// sent again.
void Job::on_user_signal(int signo, pid_t sender) {
  if (m_finished) return;
  const bool preempt = signo == m_config.preempt_signal;
  const bool from_slurm = m_slurm.signalled_by_slurm(sender);
  spdlog::warn("received {}{}{}", signal_name(signo), preempt ? " (--preempt-signal: preemption is coming)" : "",
               from_slurm ? "; Slurm signalled the workers too" : "; forwarding it to the workers");
  if (!from_slurm && m_nodes.formed) signal_workers(signo);
  if (preempt) announce_preemption();
}

void Job::announce_preemption() {
  dispatch(event::PreemptionAnnounced{});
  if (m_config.requeue_on_preempt && m_config.hosts_store) m_slurm.requeue();
}

void Job::dispatch(const Event& event) {
  const Phase before = m_policy.phase();
  const auto actions = m_policy.on(event);
  // The stop goes to the other nodes before what it leads to here (a Finish sends this node's
  // result, which must follow it).
  if (m_nodes.map && !m_nodes.attempt.published && !m_finished) publish_local_stop();
  for (const auto& action : actions) carry_out(action);
  m_service.after_event(!m_finished && before == Phase::Running && m_policy.phase() != Phase::Running,
                        m_policy.may_restart());
}

void Job::signal_workers(int signo) {
  // The report says which ranks reached the store: their connections are told apart by the
  // processes that hold them, which this signal may end (a background mapping may still be
  // waiting for the cores on a busy machine).
  m_store.map_connections();
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
          m_service.extend_stop_by(a.seconds + m_policy.limits().kill_timeout + 10.0);
        } else if constexpr (std::is_same_v<T, action::KillWorkers>) {
          m_grace_timer.cancel();
          if (a.grace_expired) {
            spdlog::warn("workers still running {}s after {} (--term-timeout); sending SIGKILL", m_config.term_timeout,
                         signal_name(a.stop_signal ? a.stop_signal : SIGTERM));
          }
          signal_workers(SIGKILL);
        } else if constexpr (std::is_same_v<T, action::StartKillTimer>) {
          start_timer(m_kill_timer, a.seconds, event::KillDeadlinePassed{});
        } else if constexpr (std::is_same_v<T, action::CleanUp>) {
          clean_up();
        } else if constexpr (std::is_same_v<T, action::StartAttempt>) {
          begin_attempt(a);
        } else if constexpr (std::is_same_v<T, action::Finish>) {
          finish(a.exit_code);
        } else if constexpr (std::is_same_v<T, action::StepStopping>) {
          spdlog::warn("rank {} was killed by SIGTERM from outside rankrun: Slurm is stopping the step",
                       m_workers[static_cast<std::size_t>(a.local_rank)]->plan.rank);
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
    // A restart never starts onto GPU memory the last attempt still holds: wait for the driver
    // to release it (bounded); memory still held then ends the job as an unkillable process does.
    if (!unkillable && m_parts.gpus && m_policy.may_restart()) {
      std::set<pid_t> attempt;
      for (const auto& w : m_workers) attempt.insert(w->pid);
      m_parts.gpus->await_release(std::move(attempt), [this](bool stuck) {
        m_cleanup_unkillable = stuck;
        start_drain();
      });
      return;
    }
    start_drain();
  });
}

void Job::start_drain() {
  m_draining = true;
  m_drain_timer.expires_after(k_drain_timeout);
  m_drain_timer.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    // Someone (a process that survived) still holds a worker's output open; stop reading.
    for (std::size_t i = 0; i < m_workers.size(); ++i) m_parts.spawner.stop_reading(static_cast<int>(i));
    after_drain();
  });
  after_drain();
}

void Job::after_drain() {
  if (!m_draining) return;
  if (m_output.any_open()) return;
  m_draining = false;
  m_drain_timer.cancel();
  if (m_nodes.map && !m_nodes.attempt.notice && !m_nodes.store_host_lost) {
    // The attempt's notice decides what comes next, the same on every node. A node whose
    // ranks all exited 0 says so; the coordinator publishes success once every node has.
    if (m_policy.reason() == StopReason::None) m_rdzv->attempt_done(attempt_id());
    m_nodes.attempt.awaiting_notice = true;
    return;
  }
  dispatch(event::CleanedUp{m_cleanup_unkillable});
}

void Job::finish(int exit_code) {
  m_finished = true;
  m_exit_code = exit_code;
  const auto summary = summarize(exit_code);
  Console::write_all(2, format_summary(summary));
  log_event("job_ended", ended_fields(summary));
  m_service.done(exit_code);
  stop_supervising();
  // This node's result goes to the coordinator, which serves until every node's is in.
  std::optional<cluster::NodeFinal> result;
  if (m_nodes.map && !m_nodes.store_host_lost) result = final_report(summary);
  m_rdzv->job_ended(exit_code, std::move(result), [this] { shutdown(); });
}
// The workers are gone; what is left (this node's report to node 0, node 0 serving the other
// nodes' reports, the cleanup) is short and bounded, and a late signal (Slurm sends several)
// must not cut it: from here on the signals are ignored.
void Job::stop_supervising() {
  m_user_signals.stop(/*ignore=*/true);
  m_grace_timer.cancel();
  m_kill_timer.cancel();
  m_drain_timer.cancel();
  m_hang.stop();
}

void Job::shutdown() {
  if (m_shut_down) return;
  m_shut_down = true;
  m_drain_timer.cancel();
  m_service.stop();
  m_rdzv->stop(m_exit_code);
  m_store.stop();
  m_parts.cleanup.close();
  m_parts.spawner.stop();
  if (m_parts.observer) m_parts.observer->close();
}
// Before any worker exists (a failed rendezvous, a signal during it): no summary to give.
void Job::end_early(const JobEnding& ending) {
  m_finished = true;
  m_exit_code = exit_code(ending);
  log_event("job_ended", {{"exit_code", m_exit_code},
                          {"reason", "before any worker"},
                          {"root_cause_rank", nullptr},
                          {"restarts", 0},
                          {"seconds", json_seconds(seconds_between(m_job_start, Clock::now()))},
                          {"ranks", Json::array()}});
  stop_supervising();
  m_rdzv->leave_early([this] { shutdown(); });
}

void Job::begin_attempt(const action::StartAttempt& a) {
  // The attempt before is over on every node: its notice and this node's stop are history.
  const auto last_notice = std::move(m_nodes.attempt.notice);
  m_nodes.attempt = JobNodes::AttemptAcrossNodes{};
  m_nodes.hold_timer.cancel();
  m_nodes.evidence_timer.cancel();
  if (a.membership) {
    // The notice said why (a node lost or arrived); the next round decides the ranks.
    spdlog::info("joining round {}", last_notice ? last_notice->next_round : m_nodes.round + 1);
    if (m_parts.observer) m_parts.observer->restarted("membership");
    log_event("restart", {{"restart", a.restart_count},
                          {"cause", "membership"},
                          {"next_round", last_notice ? last_notice->next_round : m_nodes.round + 1}});
    m_nodes.between_rounds = true;
    m_rdzv->rejoin();
    return;
  }
  if (a.failed_local_rank >= 0) {
    spdlog::warn("rank {} failed ({}); restarting all workers (restart {} of {})",
                 m_workers[static_cast<std::size_t>(a.failed_local_rank)]->plan.rank, a.failed_status.describe(),
                 a.restart_count, m_config.max_restarts);
  } else {
    spdlog::warn("{}; restarting all workers on every node (restart {} of {})",
                 last_notice ? last_notice->describe() : std::string("the job failed"), a.restart_count,
                 m_config.max_restarts);
  }
  std::string cause = "rank failure";
  if (a.failed_local_rank < 0 && last_notice) {
    switch (last_notice->kind) {
      case cluster::StopKind::NodeLost: cause = "node lost"; break;
      case cluster::StopKind::Hang: cause = "hang"; break;
      case cluster::StopKind::Signal: cause = "signal"; break;
      default: break;
    }
  }
  if (m_parts.observer) m_parts.observer->restarted(cause);
  Json restart = {{"restart", a.restart_count}, {"of", m_config.max_restarts}, {"cause", cause}};
  if (a.failed_local_rank >= 0) {
    restart["rank"] = m_workers[static_cast<std::size_t>(a.failed_local_rank)]->plan.rank;
    restart["status"] = a.failed_status.describe();
  } else {
    restart["why"] = last_notice ? last_notice->describe() : std::string("the job failed");
  }
  log_event("restart", restart);
  // Every node cleaned up attempt N-1 before any node starts attempt N's workers.
  m_rdzv->before_attempt(attempt_id(), [this] { start_attempt(); });
}

void Job::notify_status() {
  if (!m_finished) m_service.status();
}

}  // namespace rankrun::launcher
