#include "launcher/launch.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <spdlog/spdlog.h>

#include "launcher/cli/cli.hpp"
#include "launcher/files/run_dir.hpp"
#include "launcher/config/job_secret.hpp"
#include "launcher/host/host_facts.hpp"
#include "launcher/host/job_secret_file.hpp"
#include "launcher/host/python_env.hpp"
#include "launcher/host/munge.hpp"
#include "launcher/types/launch_error.hpp"
#include "launcher/host/slurm_setup.hpp"
#include "launcher/check/probe.hpp"
#include "launcher/gpu/gpu_guard.hpp"
#include "launcher/gpu/nvml.hpp"
#include "launcher/host/numa_topology.hpp"
#include "launcher/observe/observer.hpp"
#include "launcher/observe/status_client.hpp"
#include "launcher/hangs/python_hook.hpp"
#include "launcher/host/worker_library.hpp"
#include "launcher/hangs/stack_collector.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/job/job.hpp"
#include "launcher/processes/guardian.hpp"
#include "launcher/processes/job_cgroup.hpp"
#include "launcher/processes/leftovers.hpp"
#include "launcher/processes/posix_spawner.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/processes/shm_tracker.hpp"
#include "launcher/rdzv/etcd_access.hpp"
#include "launcher/report/console_writer.hpp"
#include "launcher/processes/user_signals.hpp"
#include "rendezvous/job_secret.hpp"
#include "rendezvous/open_files.hpp"
#include "base/host_port.hpp"

namespace rankrun::launcher {
namespace fs = std::filesystem;

namespace {

// At exit, how long what is still queued for the console may take to be written: a console
// that does not take it in that time (a full pipe nobody reads) must not keep rankrun alive.
constexpr auto k_console_flush_timeout = std::chrono::seconds(2);

// rankrun's log lines go to stderr through the console's queue, in order with everything else.
void setup_logging(int verbose) {
  auto logger = std::make_shared<spdlog::logger>("rankrun", ConsoleWriter::log_sink());
  logger->set_pattern("rankrun: %^%l%$: %v");
  logger->set_level(verbose >= 2 ? spdlog::level::debug : verbose == 1 ? spdlog::level::info : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

// The nodes' agents meet in a store one of them hosts (static, c10d): they prove the job
// secret there. etcd's rendezvous is etcd's (its own TLS and users); one node needs none.
bool agents_meet_in_store(const LaunchConfig& config) {
  return config.rdzv == RdzvKind::Static || config.rdzv == RdzvKind::C10d;
}

// Inside a Slurm job without a secret file: MUNGE, when munged answers here. The store host
// (node 0) makes a random secret and hands it to each node that asks in a fresh credential,
// restricted to this user; a node takes it only from a credential that munged verifies, made by
// its own user, for this run. Empty: set up; else why MUNGE cannot be used.
std::string use_munge(LaunchConfig& config, const EnvMap& env) {
  std::string socket;
  if (const auto it = env.find("RANKRUN_MUNGE_SOCKET"); it != env.end() && !it->second.empty()) {
    socket = it->second;
  } else if (auto from_slurm =
                 munge_socket_in_slurm_config(run_shell("scontrol show config 2>/dev/null", 1 << 20).output)) {
    socket = std::move(*from_slurm);  // Slurm's AuthInfo=socket=..., which slurmd itself uses
  }
  std::shared_ptr<const Munge> munge;
  const uid_t uid = ::getuid();
  try {
    munge = std::make_shared<const Munge>(socket);
    (void)munge->encode("", uid);  // munged answers
  } catch (const MungeError& e) {
    return e.what();
  }
  config.job_secret_origin = "MUNGE (Slurm job " + config.slurm_job_id + ", munged at " +
                             (socket.empty() ? std::string("its default socket") : socket) + ")";
  if (config.hosts_store) {
    std::string secret = rendezvous::random_bytes(rendezvous::k_nonce_bytes);
    config.job_secret = rendezvous::make_job_secret(secret);
    config.issue_secret_credential = [munge, uid, payload = munge_secret_payload(config.run_id, secret)] {
      return munge->encode(payload, uid);
    };
    return {};
  }
  config.take_secret_credential = [munge, uid, run_id = config.run_id](const std::string& credential) {
    const auto decoded = munge->decode(credential);  // MungeError: expired, replayed, another key
    if (decoded.uid != uid) {
      throw MungeError("its MUNGE credential was made by uid " + std::to_string(decoded.uid) +
                       ", not by this job's user (uid " + std::to_string(uid) + ")");
    }
    std::string why;
    auto secret = secret_from_munge_payload(decoded.payload, run_id, why);
    if (!secret) throw MungeError("its MUNGE credential: " + why);
    return rendezvous::make_job_secret(std::move(*secret));
  };
  return {};
}

// The job secret, read now: a file that cannot be used is a usage error, before anything exists.
void load_job_secret(LaunchConfig& config, const EnvMap& env) {
  if (!agents_meet_in_store(config)) return;
  if (const auto source = choose_secret_source(config.secret_file, env)) {
    if (auto secret = read_job_secret(*source)) {
      config.job_secret = rendezvous::make_job_secret(std::move(*secret));
      config.job_secret_origin = source->origin;
      return;
    }
  }
  if (!config.slurm_job_id.empty()) config.munge_unusable = use_munge(config, env);
}

// --numa-binding: each worker's CPUs from the NUMA node of the GPU it really has (NVML's PCI
// address of that GPU, sysfs's node of the device), within the CPUs rankrun may use.
void place_workers_on_numa(LaunchConfig& c, const EnvMap& env) {
  if (!c.numa_binding) return;
  const auto mode = numa_mode_name(*c.numa_binding);
  std::string why;
  const auto nvml = c.gpus.empty() ? nullptr : gpu::Nvml::open(env, &why);
  if (!nvml) {
    spdlog::warn("--numa-binding={}: {}; no worker is bound to a NUMA node", mode,
                 c.gpus.empty() ? "this node has no GPUs to place the workers by"
                                : "NVML cannot say where the GPUs are (" + why + ")");
    return;
  }
  const auto topology = read_numa_topology();
  if (topology.node_cpus.empty()) {
    spdlog::warn("--numa-binding={}: /sys/devices/system/node lists no NUMA node; no worker is bound", mode);
    return;
  }
  std::vector<NumaWorker> workers(static_cast<std::size_t>(c.nproc));
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (i >= c.gpus.size()) continue;
    const auto address = nvml->pci_address(c.gpus[i]);
    if (address) workers[i].node = pci_numa_node(*address);
    if (!workers[i].node) {
      spdlog::warn("--numa-binding={}: the NUMA node of GPU {} (local rank {}) is unknown{}; that worker is not bound",
                   mode, c.gpus[i], i, address ? " (" + *address + " has no numa_node in sysfs)" : " to NVML");
    }
  }
  c.worker_cpus = plan_numa_cpus(*c.numa_binding, topology, workers, allowed_cpus());
  c.worker_memory_node.assign(workers.size(), -1);
  c.worker_numa_node.assign(workers.size(), -1);
  for (std::size_t i = 0; i < workers.size(); ++i) c.worker_numa_node[i] = workers[i].node.value_or(-1);
  std::map<int, std::optional<std::string>> refused;  // tried once per node
  for (std::size_t i = 0; i < workers.size(); ++i) {
    if (!workers[i].node) continue;
    const int node = *workers[i].node;
    if (c.numa_memory_preferred) {
      if (!refused.count(node)) {
        refused[node] = memory_policy_refused(node);
        if (refused[node]) {
          spdlog::warn(
              "--numa-memory=preferred: the kernel refuses a memory policy for NUMA node {} here ({}); the "
              "workers of that node are bound by their CPUs only",
              node, *refused[node]);
        }
      }
      if (!refused[node]) c.worker_memory_node[i] = node;
    }
    spdlog::info("--numa-binding={}: local rank {} (GPU {}, NUMA node {}) runs on CPUs {}{}", mode, i, c.gpus[i], node,
                 format_cpu_list(c.worker_cpus[i]), c.worker_memory_node[i] >= 0 ? ", memory from its node first" : "");
  }
}

// 1. Every usage and configuration error is found here, before anything exists.
LaunchConfig resolve_launch(LaunchOptions options, const EnvMap& env) {
  // Inside a Slurm job step, what the user did not give comes from SLURM_*.
  options.slurm_job_id = apply_slurm(options, env);
  const bool need_gpus = !options.gpus && !options.no_pin;
  const bool count_gpus = need_gpus || options.nproc_per_node == "gpu" || options.nproc_per_node == "auto";
  LaunchConfig config = resolve(
      options, gather_host_facts(
                   env, count_gpus ? std::function<int()>([&env] { return gpu::count_nvidia_gpus(env); }) : nullptr,
                   options.invoked_as));
  for (const auto& warning : config.warnings) spdlog::warn("{}", warning);
  if (!config.python_origin.empty())
    config.python_line = describe_python(config.command.front(), config.python_origin, env);
  place_workers_on_numa(config, env);
  // etcd's certificates and password: read and checked now, shared by every etcd client later.
  config.etcd_security = rdzv::make_etcd_security(config);
  load_job_secret(config, env);
  return config;
}

// The run directory holds attempt_N/<local_rank>/{stdout.log,stderr.log,error.json}, as
// torchrun's does: under --log-dir it is kept; otherwise it is private and removed at exit.
// Its place must keep other users out (files/dir_trust.hpp): the workers open what is in it by
// path, so a place where someone else could rename it is refused here, before anything exists.
std::unique_ptr<RunDir> make_run_dir(const LaunchConfig& c, const EnvMap& env) {
  const auto tmpdir = env.find("TMPDIR");
  const auto place = run_dir_place(c.log_dir, tmpdir != env.end() ? std::optional(tmpdir->second) : std::nullopt);
  auto dir = RunDir::create(place, c.log_dir.empty() ? "rankrun-" : c.run_id + "_");
  dir->keep(!c.log_dir.empty() || c.redirects.any() || c.tee.any());
  return dir;
}

// 2. What the job holds while it runs, released in reverse order on every path. Everything the
// job starts carries RANKRUN_JOB=<id> and, where the machine allows, lives in the job's cgroup.
// The guardian is forked before any socket or thread exists, so that it holds no port and may
// run ordinary code after fork; without release() it cleans up the job itself.
struct JobResources {
  JobResources(const LaunchConfig& config, const EnvMap& env)
      : job_id(make_job_id()),
        run_dir(make_run_dir(config, env)),
        cgroup(JobCgroup::create(job_id)),
        shm_watch(ShmTracker::open_watch(k_shm_dir)) {
    prepare_hang_diagnosis(config);
    GuardianPlan plan;
    plan.job_id = job_id;
    if (cgroup) {
      plan.cgroup_dir = cgroup->dir();
      plan.cgroup_path = cgroup->path();
    }
    plan.keep_fd = shm_watch;
    if (!run_dir->kept()) plan.private_dir = run_dir->path();
    guardian = Guardian::start(plan);
    worker_parent_env = env;
    worker_parent_env.erase(std::string(k_launcher_python_var));  // rankrun's alone
    const auto inherited = env.find(std::string(k_job_marker_var));
    worker_parent_env[std::string(k_job_marker_var)] =
        job_marker_value(inherited != env.end() ? std::optional<std::string>(inherited->second) : std::nullopt, job_id);
  }

  // Hang diagnosis: workers write their stacks here when asked (Python through rankrun's
  // sitecustomize, native ones through the worker runtime). A run directory that cannot hold
  // them (a full disk) is an error now, before anything starts, not a hang without stacks later.
  void prepare_hang_diagnosis(const LaunchConfig& config) {
    paths.run_dir = run_dir->path();
    paths.dir_fd = run_dir->fd();
    paths.stack_dir = run_dir->path() + "/stacks";
    paths.logs_kept = !config.log_dir.empty();
    std::optional<std::string> error;
    if (const int e = make_dirs_below(run_dir->fd(), "stacks", 0755); e != 0) {
      error = "cannot create " + paths.stack_dir + ": " + std::strerror(e);
    } else {
      stack_dir = open_below(run_dir->fd(), "stacks", O_RDONLY | O_DIRECTORY);
      const int open_error = errno;
      error = stack_dir ? install_python_hook(run_dir->fd(), run_dir->path(), "python")
                        : "cannot open " + paths.stack_dir + ": " + std::strerror(open_error);
    }
    if (!error) {
      // PYTHONPATH names this path, and every Python worker, on every restart, opens the
      // sitecustomize.py in it by path. It stays the file rankrun wrote because nobody but
      // rankrun's user and root may rename the run directory or a directory above it (the
      // check of its place) or write in it (mode 0700).
      paths.python_hook_dir = run_dir->path() + "/python";
      paths.worker_library = this_worker_library().value_or("");
      if (paths.worker_library.empty())
        spdlog::debug(
            "no librankrun_worker beside this rankrun: rankrun.data and rankrun.progress in the workers "
            "need RANKRUN_WORKER_LIBRARY or the rankrun wheel");
      return;
    }
    run_dir->keep(false);
    if (shm_watch >= 0) ::close(shm_watch);
    const auto base = fs::path(run_dir->path()).parent_path().string();
    throw LaunchError(
        "the run directory cannot hold rankrun's Python stack hook: " + *error + "; free space in " + base +
        (config.log_dir.empty() ? " or set TMPDIR to a writable directory with room" : " or give another --log-dir"));
  }

  JobScope scope() const {
    JobScope s;
    s.launcher = ::getpid();
    if (guardian) s.excluded.push_back(guardian->pid());
    s.job_id = job_id;
    s.cgroup_path = cgroup ? cgroup->path() : std::string();
    s.cgroup_dir = cgroup ? cgroup->dir() : std::string();
    return s;
  }

  /// The job is cleaned up: the guardian may go.
  void release() {
    if (guardian) guardian->release();
    if (run_dir->kept()) spdlog::info("logs are in {}", run_dir->path());
  }

  std::string job_id;
  std::unique_ptr<RunDir> run_dir;
  UniqueFd stack_dir;  // run_dir/stacks, opened: the stack collector reads the workers' files in it
  std::unique_ptr<JobCgroup> cgroup;
  int shm_watch;  // owned by the sweeper once the job runs
  std::unique_ptr<Guardian> guardian;
  EnvMap worker_parent_env;
  JobPaths paths;
};

// The GPUs this node gives its ranks, before anything starts: memory held by processes that
// are not the job's, GPUs that are unfit. Warnings, or a refusal under --gpu-check=refuse (a
// static job of several nodes refuses through its start checks, on every node at once).
void check_gpus_before_start(const LaunchConfig& config, const EnvMap& env, bool refused_elsewhere) {
  const auto findings = gpu::check_node_gpus(config, env);
  const auto prefix = gpu::node_prefix(config);
  for (const auto& line : gpu::finding_lines(findings)) spdlog::warn("{}{}", prefix, line);
  if (findings.empty() || config.gpu_check != GpuCheck::Refuse || refused_elsewhere) return;
  throw LaunchError(
      fmt::format("{}{} GPU problem{} above and --gpu-check=refuse: nothing was started; fix {} or "
                  "give the job other GPUs with --gpus",
                  prefix, findings.size(), findings.size() == 1 ? "" : "s", findings.size() == 1 ? "it" : "them"));
}

// 3. The job on one event loop, with the real spawner, stack collector and sweeper.
int run_job(const LaunchConfig& config, JobResources& resources, const std::string& failed_checks,
            const rlimit& worker_files) {
  boost::asio::io_context io;
  LeftoverSweeper sweeper(io, resources.scope(), resources.cgroup.get(), resources.shm_watch, resources.guardian.get());
  PosixSpawner spawner(
      io, resources.cgroup ? resources.cgroup->procs_fd() : -1, [&sweeper] { sweeper.drain_segments(); }, worker_files);
  spawner.read_failure_records(
      [dir = resources.stack_dir.get()](pid_t pid) { return read_failure_record(dir, "", pid); });
  ProcessStackCollector stacks(io, resources.stack_dir.get(), stack_dump_signal());
  gpu::GpuGuard gpus(io, config, resources.worker_parent_env, resources.scope());
  observe::Observer observer(io, config, resources.paths.dir_fd, resources.paths.run_dir);
  JobParts parts{spawner, stacks, sweeper};
  parts.gpus = &gpus;
  parts.observer = &observer;
  Job job(io, config, resources.worker_parent_env, resources.paths, std::move(parts));
  return job.run(failed_checks);
}

int launch(const LaunchOptions& options, const EnvMap& env) {
  setup_logging(options.verbose);  // the Slurm set-up in resolve says where each value came from (-v)
  const LaunchConfig config = resolve_launch(options, env);
  if (options.check) return check::run_checks(config, env, !options.no_python);
  if (!config.python_line.empty()) {
    // Shown whatever the verbosity: which Python the workers get is the first thing to know when
    // they cannot import torch.
    const auto level = spdlog::default_logger()->level();
    spdlog::default_logger()->set_level(std::min(level, spdlog::level::info));
    spdlog::info("Python workers: {}", config.python_line);
    spdlog::default_logger()->set_level(level);
  }
  // Several nodes (static): quick checks here, whose failure ends the job on every node.
  const std::string failed_checks = config.rdzv == RdzvKind::Static ? check::node_start_failures(config, env) : "";
  check_gpus_before_start(config, env, config.rdzv == RdzvKind::Static);
  if (agents_meet_in_store(config)) {
    if (config.job_secret || config.take_secret_credential) {
      spdlog::info("job secret: {}", config.job_secret_origin);
    } else {
      const auto& host = config.master_addr;
      spdlog::warn(
          "{}{}", no_secret_warning(host_port(host, static_cast<std::uint32_t>(config.master_port.value_or(0)))),
          config.munge_unusable.empty() ? "" : "; under Slurm MUNGE could give one, but: " + config.munge_unusable);
    }
  }
  // Orphaned descendants (daemonised DataLoader workers, torch_shm_manager) are re-parented
  // to rankrun rather than to init, so rankrun can still reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // A closed console must not kill rankrun before it has stopped the workers.
  ignore_broken_pipes();
  // A store host holds a descriptor per rank of the job, more than the usual soft limit (1024)
  // allows; the workers keep the limit rankrun was given.
  const rlimit worker_files = rendezvous::raise_open_files_limit();
  JobResources resources(config, env);
  // The guardian is forked: from here on the console is written by threads, and the event loop
  // never waits for it.
  ConsoleWriter::start();
  const int code = run_job(config, resources, failed_checks, worker_files);
  resources.release();
  return code;
}

}  // namespace

int run_cli(int argc, const char* const* argv) {
  // rankrun's own lines, from the first (a usage error) on, go through spdlog to the console.
  setup_logging(0);
  const EnvMap env = current_environment();
  int code = exit_code(JobEnding::ended_early(EarlyEnd::Usage));
  try {
    const auto cli = parse_cli(argc, argv, env);
    // `rankrun status`: a question to a running job, not a launch.
    if (cli.status) return observe::run_status_command(*cli.status);
    if (!cli.options) return cli.exit_code;
    code = launch(*cli.options, env);
  } catch (const LaunchError& e) {
    spdlog::error("{}", e.what());
    code = exit_code(JobEnding::ended_early(EarlyEnd::Usage));
  }
  // The exit code stays what the job decided, whether or not the console took the rest.
  ConsoleWriter::finish(k_console_flush_timeout);
  return code;
}

}  // namespace rankrun::launcher
