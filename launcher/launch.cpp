#include "launcher/run.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <filesystem>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "launcher/cli.hpp"
#include "launcher/exit_status.hpp"
#include "launcher/guardian.hpp"
#include "launcher/host_facts.hpp"
#include "launcher/job_cgroup.hpp"
#include "launcher/proc_scan.hpp"
#include "launcher/reaper.hpp"
#include "launcher/shm_tracker.hpp"
#include "launcher/launch_error.hpp"
#include "launcher/hang_monitor.hpp"
#include "launcher/python_hook.hpp"
#include "launcher/store_watch.hpp"
#include "rankrun/store_keys.hpp"
#include "launcher/supervisor.hpp"
#include "rendezvous/store_server.hpp"

namespace rankrun::launcher {
namespace fs = std::filesystem;

namespace {

void setup_logging(int verbose) {
  auto logger = spdlog::stderr_color_mt("rankrun");
  logger->set_pattern("rankrun: %^%l%$: %v");
  logger->set_level(verbose >= 2 ? spdlog::level::debug : verbose == 1 ? spdlog::level::info : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

// The run directory holds attempt_N/<local_rank>/{stdout.log,stderr.log,error.json}, as
// torchrun's does: under --log-dir it is kept; otherwise it is private and removed at exit.
std::string make_run_dir(const LaunchConfig& c, const EnvMap& env) {
  std::string base = c.log_dir;
  if (base.empty()) {
    const auto tmp = env.find("TMPDIR");
    base = tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
  }
  std::error_code ec;
  fs::create_directories(base, ec);
  std::string pattern = base + "/" + (c.log_dir.empty() ? "rankrun-" : c.run_id + "_") + "XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw LaunchError("cannot create a run directory in " + base + ": " + std::strerror(errno) +
                      (c.log_dir.empty() ? "; set TMPDIR to a writable directory" : "; check --log-dir"));
  }
  return pattern;
}

// rankrun hosts the workers' store: up before the first worker starts, bound to --master-addr
// only, on --master-port or a port the kernel picks (so two jobs never collide).
std::unique_ptr<rendezvous::StoreServer> start_store(boost::asio::io_context& io, const LaunchConfig& c,
                                                     rendezvous::StoreObserver& observer) {
  const auto protocol = rendezvous::parse_protocol_choice(c.store_protocol);
  if (!protocol) {
    throw LaunchError("--store-protocol=" + c.store_protocol +
                      " is not known; use auto, 1.13 (also 2.0), 2.1, or 2.2 (also every later version)");
  }
  rendezvous::ServerOptions options;
  options.bind_address = c.master_addr;
  options.port = c.master_port.value_or(0);
  options.protocol = *protocol;
  try {
    return std::make_unique<rendezvous::StoreServer>(io, options, &observer);
  } catch (const rendezvous::StoreBindError& e) {
    throw LaunchError(e.what());
  }
}

int launch(const LaunchOptions& options, const EnvMap& env) {
  const bool need_gpus = !options.gpus && !options.no_pin;
  const LaunchConfig config = resolve(options, gather_host_facts(env, need_gpus || options.nproc_per_node == "gpu" ||
                                                                           options.nproc_per_node == "auto"));
  setup_logging(config.verbose);

  // Orphaned descendants (daemonised DataLoader workers, torch_shm_manager) are re-parented
  // to rankrun rather than to init, so rankrun can still reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // A closed console must not kill rankrun before it has stopped the workers.
  ::signal(SIGPIPE, SIG_IGN);

  // Everything the job starts carries RANKRUN_JOB=<id> and, where the machine allows, lives in
  // the job's cgroup. The guardian is forked now, before any socket or thread exists, so that
  // it holds no port and may run ordinary code after fork.
  const std::string job_id = make_job_id();
  const auto cgroup = JobCgroup::create(job_id);
  GuardianPlan guardian_plan;
  guardian_plan.job_id = job_id;
  if (cgroup) {
    guardian_plan.cgroup_dir = cgroup->dir();
    guardian_plan.cgroup_path = cgroup->path();
  }
  const int shm_watch = ShmTracker::open_watch(kShmDir);
  guardian_plan.keep_fd = shm_watch;
  auto guardian = Guardian::start(guardian_plan);
  EnvMap job_parent_env = env;
  const auto inherited = env.find(std::string(kJobMarkerVar));
  job_parent_env[std::string(kJobMarkerVar)] =
      job_marker_value(inherited != env.end() ? std::optional<std::string>(inherited->second) : std::nullopt, job_id);

  const std::string run_dir = make_run_dir(config, env);
  const bool keep_run_dir = !config.log_dir.empty() || config.redirects.any() || config.tee.any();
  boost::asio::io_context io;
  Supervisor* supervisor_ptr = nullptr;
  StoreWatch watch([&supervisor_ptr] { return supervisor_ptr ? supervisor_ptr->worker_pids() : std::vector<pid_t>{}; });
  const auto store = start_store(io, config, watch);

  JobScope scope;
  scope.launcher = ::getpid();
  if (guardian) scope.excluded.push_back(guardian->pid());
  scope.job_id = job_id;
  scope.cgroup_path = cgroup ? cgroup->path() : std::string();
  ShmTracker shm(
      io, kShmDir, shm_watch, [&scope](pid_t pid) { return belongs_to_job(pid, scope); },
      [&guardian](const std::string& name, ino_t inode) {
        if (guardian) guardian->remember_segment(name, inode);
      });
  Reaper reaper(io, scope, cgroup.get(), &shm);

  AttemptSetup setup;
  setup.arrivals = [&watch] { return describe_arrivals(watch.arrivals()); };
  setup.on_finish = [&store, &shm] {
    store->stop();
    shm.stop();
  };
  setup.before_reap = [&shm] { shm.drain(); };
  setup.cgroup_procs_fd = cgroup ? cgroup->procs_fd() : -1;
  setup.clean_up = [&reaper](std::size_t workers, std::function<void(bool)> done) {
    reaper.sweep(workers, [done = std::move(done)](const Reaper::Outcome& outcome) { done(!outcome.stuck.empty()); });
  };
  // Hang detection: workers can be asked for their stacks (Python through rankrun's
  // sitecustomize, native ones through the worker runtime) into the run directory.
  const std::string stack_dir = run_dir + "/stacks";
  const std::string python_hook_dir = run_dir + "/python";
  fs::create_directories(stack_dir);
  const bool python_hook = install_python_hook(python_hook_dir);
  Console hang_console;
  HangMonitor::Hooks hang_hooks;
  hang_hooks.hung = [&supervisor_ptr] {
    if (supervisor_ptr) supervisor_ptr->hang_detected();
  };
  hang_hooks.store_view = [&store, &watch](int local_rank) {
    RankStoreView view;
    const auto& state = store->state();
    // One node: the global rank in the runtime's keys is the local rank.
    if (const auto coll = state.value(rankrun::collective_record_key(local_rank))) {
      if (const auto record = rankrun::parse_collective_record(*coll)) {
        view.collective = CollectiveState{record->kind, record->seq, record->entered, record->name};
      }
    }
    if (const auto hb = state.value(rankrun::heartbeat_key(local_rank))) {
      if (const auto beat = rankrun::parse_heartbeat(*hb)) {
        const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
        view.heartbeat_age = static_cast<double>(now_ms - beat->unix_ms) / 1000.0;
        view.step = beat->step;
      }
    }
    view.last_key = watch.last_key(local_rank);
    return view;
  };
  HangMonitor hang(io, config.hang, stack_dir, stack_dump_signal(), hang_console, hang_hooks);
  watch.set_listener([&hang, &io, &store, &watch](int local_rank, StoreEvent event) {
    switch (event) {
      case StoreEvent::Heartbeat:
        hang.on_heartbeat(local_rank);
        // The value is applied after this call returns; read it then, to see a new step.
        boost::asio::post(io, [&store, &watch, local_rank] {
          if (const auto hb = store->state().value(rankrun::heartbeat_key(local_rank))) {
            if (const auto beat = rankrun::parse_heartbeat(*hb)) watch.heartbeat_value(local_rank, beat->step);
          }
        });
        break;
      case StoreEvent::Progress: hang.on_progress(local_rank); break;
      case StoreEvent::Rendezvous: hang.on_rendezvous(local_rank); break;
    }
  });
  setup.hang = &hang;

  setup.job_env = [&config, &store, &watch, &stack_dir, &python_hook_dir, python_hook](int restart) {
    // Each attempt starts on a fresh key space: a restarted worker must not read the stale
    // keys (NCCL ids, barrier counters) of the attempt before.
    if (restart > 0) store->reset();
    watch.reset(static_cast<std::size_t>(config.nproc));
    JobEnv job;
    job.master_addr = config.master_addr;
    job.master_port = store->port();
    job.run_id = config.run_id;
    job.role = config.role;
    job.restart_count = restart;
    job.max_restarts = config.max_restarts;
    job.use_agent_store = true;
    job.virtual_local_rank = config.virtual_local_rank;
    job.stack_dir = stack_dir;
    job.stack_signal = stack_dump_signal();
    if (python_hook) job.python_hook_dir = python_hook_dir;
    job.debug_hangs = config.debug_hangs;
    // Four beats per --heartbeat-timeout, at most one every 5 s and at least one every 100 ms.
    if (config.hang.heartbeat_timeout) {
      job.heartbeat_interval_ms = std::clamp(static_cast<int>(config.hang.heartbeat_timeout->count() * 250), 100, 5000);
    }
    return job;
  };
  int code = 0;
  {
    Supervisor supervisor(io, config, job_parent_env, run_dir, setup);
    supervisor_ptr = &supervisor;
    supervisor.start();
    io.run();
    code = supervisor.exit_code();
    supervisor_ptr = nullptr;
  }
  // The job is cleaned up; the guardian may go. (On an exception it is not released, and
  // cleans up itself.)
  if (guardian) guardian->release();
  if (keep_run_dir) {
    spdlog::info("logs are in {}", run_dir);
  } else {
    std::error_code ec;
    fs::remove_all(run_dir, ec);
  }
  return code;
}

}  // namespace

int run_cli(int argc, const char* const* argv) {
  const EnvMap env = current_environment();
  try {
    const auto cli = parse_cli(argc, argv, env);
    if (!cli.options) return cli.exit_code;
    return launch(*cli.options, env);
  } catch (const LaunchError& e) {
    std::fprintf(stderr, "rankrun: error: %s\n", e.what());
    return kExitUsage;
  }
}

}  // namespace rankrun::launcher
