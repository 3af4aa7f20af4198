#pragma once
// The launcher's options as typed by the user (LaunchOptions), and their validated, resolved
// form (LaunchConfig). resolve() is pure: everything it needs from the host comes in HostFacts.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/types/env_map.hpp"
#include "launcher/types/hang_timeouts.hpp"
#include "launcher/config/numa_plan.hpp"
#include "launcher/types/stop.hpp"
#include "launcher/types/streams.hpp"
#include "rendezvous/key_space_auth.hpp"
#include "rendezvous/wire.hpp"

namespace rankrun::rendezvous {
class EtcdSecurity;  // etcd_client.hpp
}

namespace rankrun::launcher {

/// What the user typed (command line, else PET_* environment, else the default), unvalidated.
struct LaunchOptions {
  // torchrun's options
  std::string nproc_per_node = "1";
  std::string nnodes = "1:1";
  int node_rank = 0;
  std::optional<std::string> master_addr;  // absent: 127.0.0.1 on one node; required on several
  std::optional<int> master_port;          // absent: the kernel chooses a free port (29500 on several nodes)
  bool standalone = false;
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string role = "default";
  int max_restarts = 0;
  double monitor_interval = 0.1;       // accepted; supervision is event-driven
  std::string start_method = "spawn";  // accepted; only function entrypoints would use it
  std::string log_dir;
  std::string redirects = "0";
  std::string tee = "0";
  std::string local_ranks_filter;
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  std::string local_addr;
  bool virtual_local_rank = false;
  // torch 2.14's torchrun: the signals that stop the job, the console lines' prefix, the lines of
  // the teed streams also copied to filtered_std{out,err}.log, the agent's event log, and the
  // options rankrun refuses with what it offers instead (LogsSpecs plugins, NUMA binding)
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::string log_line_prefix_template;  // else TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE
  std::string duplicate_stdout_filters;
  std::string duplicate_stderr_filters;
  std::string event_log_handler = "null";
  std::optional<std::string> logs_specs;
  std::optional<std::string> numa_binding;
  // rankrun's own
  std::string numa_memory = "none";  // with --numa-binding: none, or preferred (the GPU's node)
  std::optional<std::string> gpus;
  bool no_pin = false;
  double term_timeout = 30.0;
  /// The option term_timeout came from, for messages: --term-timeout, --shutdown-timeout (the
  /// same value: the last given wins) or TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
  std::string term_timeout_from = "--term-timeout";
  double node_timeout = 15.0;
  std::string preempt_signal = "SIGUSR1";
  bool requeue_on_preempt = false;
  bool slurm_tasks_per_node_ok = false;
  bool check = false;  // --check: start nothing, run the preflight checks
  int verbose = 0;
  /// The options the user gave (command line or environment), by their dashed name: values
  /// derived from a Slurm job step never replace these.
  std::set<std::string> given;
  /// Not a flag: the Slurm job this runs in (SLURM_JOB_ID), set by the Slurm setup.
  std::string slurm_job_id;
  /// Not a flag: rankrun's argv[0], as it was run (a link named torchrun, a venv's bin/rankrun).
  std::string invoked_as;
  std::string store_protocol = "auto";
  /// --store-memory as typed, a size ("512M", "2G": resolve() reads it); unset: a sixteenth of the
  /// machine's memory (at least 256 MiB).
  std::optional<std::string> store_memory;
  /// --store-connections-per-address: connections the store takes from one address
  /// (rendezvous::Limits::max_connections_per_peer's default when unset).
  std::optional<long long> store_connections_per_address;
  // hang detection, seconds; 0 turns one off
  double exit_timeout = 300;
  double heartbeat_timeout = 60;
  /// unset: k_default_progress_timeout, on one node or many (node rank 0 decides for the job)
  std::optional<double> progress_timeout;
  double straggler_timeout = k_default_straggler_timeout;
  double init_timeout = 600;
  bool debug_hangs = false;
  // the node's GPUs, read through NVML: warn (default), refuse or off
  std::string gpu_check = "warn";
  double gpu_release_timeout = 30;
  // seeing the job: the event log, the Prometheus endpoint ([ADDRESS:]PORT) and textfile
  std::string events;
  std::string metrics_port;
  std::string metrics_textfile;
  // the program
  std::string script;
  std::vector<std::string> script_args;
};

/// Facts about the host that resolve() needs; gathered by the effectful shell.
struct HostFacts {
  unsigned cpu_count = 1;
  std::uint64_t memory_bytes = 0;                   // the machine's (MemTotal); 0: unknown
  std::optional<std::string> cuda_visible_devices;  // the launcher's own, if set
  int nvml_gpu_count = 0;                           // 0 when NVML is absent
  std::optional<std::string> python_exec;           // $PYTHON_EXEC
  /// The interpreter that ran `python -m rankrun` (its sys.executable, handed over by the
  /// package's __main__ in RANKRUN_LAUNCHER_PYTHON), if it did.
  std::optional<std::string> launcher_python;
  /// The python3 of the virtual environment (or conda environment) whose bin/ holds the rankrun
  /// that runs, if it does; launcher/host/python_env.hpp finds it.
  std::optional<std::string> environment_python;
  std::string generated_run_id;  // used with --standalone
  /// The path of program `name` (the Python interpreter, or the program of --no-python), found
  /// on PATH as the shell would; throws LaunchError naming `what` when there is none. Default:
  /// the name as it is.
  std::function<std::string(const std::string& name, const std::string& what)> find_program =
      [](const std::string& name, const std::string&) { return name; };
  /// `path` is a regular file (the script). Default: every path is.
  std::function<bool(const std::string& path)> is_file = [](const std::string&) { return true; };
  /// `host`, a name or an address, is this machine: one of its interface addresses or names.
  /// Default: none is.
  std::function<bool(const std::string& host)> is_local = [](const std::string&) { return false; };
};

/// The least --store-memory there is: 1M.
inline constexpr std::uint64_t k_min_store_memory = std::uint64_t{1} << 20;

/// Which of a worker's streams go to a file (redirect) or to file and console (tee).
/// Per-local-rank stream settings parsed from "-r 3" or "-r 0:1,1:2".
struct StreamSpec {
  StreamMask all;
  std::map<int, StreamMask> per_rank;
  StreamMask for_rank(int local_rank) const;
  bool any() const;
};

/// What the GPU check does with GPUs held by other processes or unfit (--gpu-check).
enum class GpuCheck { Warn, Refuse, Off };

/// Where the GPU list came from, for messages.
enum class GpuSource { Flag, CudaVisibleDevices, Nvml, None };

/// Which rendezvous keeps the job's nodes together; resolve() decides it (from --nnodes,
/// --rdzv-backend and --standalone) and rdzv::make_backend picks the backend by it.
enum class RdzvKind {
  Single,  // one node (--nnodes=1, --standalone): nothing to meet
  Static,  // --nnodes=N: node 0 hosts the store, each node claims its --node-rank
  C10d,    // --rdzv-backend=c10d, --nnodes=MIN:MAX: the endpoint's host keeps elastic rounds
  Etcd,    // --rdzv-backend=etcd: the rounds are kept in etcd (always elastic)
};
/// Rounds of MIN to MAX nodes, which the rendezvous forms (c10d, etcd).
constexpr bool is_elastic(RdzvKind kind) { return kind == RdzvKind::C10d || kind == RdzvKind::Etcd; }

/// --rdzv-backend=etcd: where etcd is, under which keys the job meets, and how this node proves
/// itself there.
struct EtcdSettings {
  std::string host;  // --rdzv-endpoint's
  std::uint16_t port = 0;
  std::string prefix;  // every key of the job: /rankrun/<rdzv-id>/
  // https (--rdzv-conf protocol=https, or an https:// endpoint, or a TLS file given): torch's
  // cacert=, cert=, key=; etcd's user authentication: user= with password_file=.
  bool https = false;
  std::string cacert;
  std::string cert;
  std::string key;
  std::string user;
  std::string password_file;
};

/// Validated configuration for one node's launch.
struct LaunchConfig {
  int nproc = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::vector<std::string> gpus;  // device ids as given (indices, UUIDs, MIG names)
  GpuSource gpu_source = GpuSource::None;
  bool pin = false;  // each worker's CUDA_VISIBLE_DEVICES = its one GPU
  bool virtual_local_rank = false;
  std::string master_addr = "127.0.0.1";
  std::optional<std::uint16_t> master_port;
  std::string run_id = "none";
  std::string role = "default";
  int max_restarts = 0;
  double term_timeout = 30.0;
  // Multi-node (nnodes > 1): the rendezvous timeout (--rdzv-conf timeout=), --node-timeout,
  // and the address this node advertises (--local-addr; empty: as the store host sees it).
  double rdzv_timeout = 900.0;
  double node_timeout = 15.0;
  std::string local_addr;
  /// This node hosts the store: node rank 0 of a static job; in an elastic job the node whose
  /// own address is --rdzv-endpoint's (or --rdzv-conf is_host=1).
  bool hosts_store = true;
  /// The rendezvous: the one source of which backend the job has.
  RdzvKind rdzv = RdzvKind::Single;
  int min_nodes = 1;
  double join_timeout = 600.0;
  double last_call_timeout = 30.0;
  std::optional<bool> is_host;  // --rdzv-conf is_host=: decides alone whether this node hosts the store
  /// --rdzv-conf secret_file= (empty: not given); launcher/config/job_secret.hpp.
  std::string secret_file;
  /// The job secret the agents prove in the store's key-space handshake, read after resolve()
  /// by the launch shell (from secret_file, RANKRUN_JOB_SECRET_FILE, systemd's credential, or
  /// MUNGE under Slurm); null: none. `job_secret_origin` says where it came from.
  std::shared_ptr<const rendezvous::JobSecret> job_secret;
  std::string job_secret_origin;
  /// Under Slurm with MUNGE and no secret file (launcher/host/munge.hpp): the store host makes
  /// the secret (job_secret) and hands it out in a fresh MUNGE credential to each node that
  /// asks; the other nodes take it from one (take: returns the secret, or throws saying why
  /// the credential is not taken). Empty: not so.
  std::function<std::string()> issue_secret_credential;
  std::function<std::shared_ptr<const rendezvous::JobSecret>(const std::string& credential)> take_secret_credential;
  /// Why MUNGE could not be used under Slurm (for the warning of a job without a secret).
  std::string munge_unusable;
  /// RdzvKind::Etcd: the rounds are kept in etcd (etcd_settings); the workers' store is hosted by
  /// node rank 0 of each round, on master_port when one is given, else on a port the kernel
  /// chooses.
  EtcdSettings etcd_settings;
  /// etcd's TLS files and password, read and checked by the launch shell from etcd_settings
  /// before anything starts; null: plain http without a user.
  std::shared_ptr<rendezvous::EtcdSecurity> etcd_security;
  // Slurm: the signal that announces preemption, and whether node 0 then requeues the job.
  int preempt_signal = 10;  // SIGUSR1 on Linux
  bool requeue_on_preempt = false;
  /// The signals that stop the job: SIGTERM, SIGINT, SIGHUP and SIGQUIT always, and those of
  /// --signals-to-handle (SIGUSR1 or SIGUSR2 listed there stop it instead of only reaching the
  /// workers). Sorted, once each.
  std::vector<int> stop_signals = {1, 2, 3, 15};  // SIGHUP, SIGINT, SIGQUIT, SIGTERM on Linux
  /// --signals-to-handle as given ("" when not given): TORCHELASTIC_SIGNALS_TO_HANDLE of the workers.
  std::string signals_to_handle;
  /// --numa-binding (nullopt: none) and --numa-memory=preferred; what they place each worker on
  /// is found by the launch shell (launcher/host/numa_topology.hpp), after resolve().
  std::optional<NumaMode> numa_binding;
  bool numa_memory_preferred = false;
  std::vector<std::vector<int>> worker_cpus;  // by local rank; empty: not bound
  std::vector<int> worker_memory_node;        // by local rank; -1: the kernel's default
  std::vector<int> worker_numa_node;          // by local rank: its GPU's node; -1: none known
  std::string slurm_job_id;                   // set inside a Slurm job
  double kill_timeout = k_kill_timeout;       // not a flag: how long after SIGKILL a worker counts as unkillable
  std::string log_dir;                        // empty: a private temporary directory, removed at exit
  StreamSpec redirects;
  StreamSpec tee;
  std::optional<std::set<int>> console_ranks;  // --local-ranks-filter
  std::string line_prefix_template;            // --log-line-prefix-template ("" rankrun's [rank])
  std::vector<std::string> stdout_filters;     // --duplicate-stdout-filters
  std::vector<std::string> stderr_filters;     // --duplicate-stderr-filters
  std::vector<std::string> command;            // argv of every worker, before ${local_rank}
  /// Python workers: where their interpreter (command.front()) came from, for messages:
  /// "PYTHON_EXEC", "python -m rankrun's", "the environment of /opt/venv/bin/rankrun", "PATH".
  std::string python_origin;
  /// Python workers: one line naming the interpreter, where it came from and its torch version,
  /// for the start of the job and the failure report (set by the launch shell); empty otherwise.
  std::string python_line;
  /// What resolve() took differently from how it was typed, for a warning each: a --rdzv-conf
  /// in quotes, its keys that nothing reads.
  std::vector<std::string> warnings;
  std::string entrypoint_name;  // script, module or binary, for messages
  int verbose = 0;
  rendezvous::ProtocolChoice store_protocol = rendezvous::ProtocolChoice::Auto;
  std::uint64_t store_memory = 0;  // the store's memory quota, bytes
  std::size_t store_connections_per_address = rendezvous::Limits{}.max_connections_per_peer;
  HangTimeouts hang;
  bool debug_hangs = false;
  GpuCheck gpu_check = GpuCheck::Warn;
  double gpu_release_timeout = 30;  // seconds a restart waits for the last attempt's GPU memory
  std::string events_path;          // --events: "" none
  bool events_console = false;      // --event-log-handler=console: the events also on stderr
  std::string metrics_host;         // --metrics-port's address; "": this node's own (resolved at start)
  int metrics_port = -1;            // -1: no endpoint; 0: a free port
  std::string metrics_textfile;     // "" none
};

/// Parses "-r"/"-t" values: "0".."3" or "i:v,i:v". Throws LaunchError naming `flag`.
StreamSpec parse_stream_spec(const std::string& flag, const std::string& value);

/// 127.0.0.0/8 or ::1.
inline bool is_loopback_address(const std::string& addr) { return addr.rfind("127.", 0) == 0 || addr == "::1"; }

/// Where the store host listens: --master-addr (the rendezvous endpoint's host), except for an
/// elastic job of several nodes whose endpoint is this machine's loopback (TorchX gives node 0
/// `localhost` and the others its DNS name): every interface then ("::", IPv4 too), as torch's
/// store listens, or no other node could reach it.
std::string store_bind_address(const LaunchConfig& c);

/// torchrun's --rdzv-endpoint default port for the c10d backend.
inline constexpr std::uint16_t k_default_rdzv_port = 29400;
/// etcd's client port, --rdzv-endpoint's default for the etcd backend.
inline constexpr std::uint16_t k_default_etcd_port = 2379;

/// "host", "host:port", "[v6]:port" or a bare IPv6 address -> {host, port (0: none given)}.
/// Throws LaunchError naming `flag` when the port is not 1-65535 or the host is empty.
std::pair<std::string, int> parse_endpoint(const std::string& flag, const std::string& value);

/// Elastic: whether this machine is --rdzv-endpoint's host: the endpoint is one of this
/// machine's names or interface addresses, or resolves to one of its interface addresses
/// (a name resolving to loopback counts only when the endpoint is a loopback name or address).
bool endpoint_is_local(const std::string& endpoint_host, const std::vector<std::string>& endpoint_addresses,
                       const std::vector<std::string>& local_addresses, const std::vector<std::string>& local_names);

/// torchrun's --master-port default, used when a multi-node job gives none.
inline constexpr std::uint16_t k_default_master_port = 29500;

/// "SIGUSR1", "USR1", "10" (and the same for SIGUSR2) -> the signal number; nullopt otherwise.
/// The signals rankrun forwards to the workers unchanged.
std::optional<int> parse_signal_name(const std::string& name);

/// The signals that stop the job, from --signals-to-handle's "SIGTERM,SIGUSR1" (names with or
/// without SIG, any case, or numbers): SIGTERM, SIGINT, SIGHUP and SIGQUIT always, then the
/// listed ones. Throws LaunchError naming the value and what to write instead.
std::vector<int> parse_stop_signals(const std::string& list);

/// torchrun's --duplicate-*-filters: comma-separated strings, ",," for a comma in one; empty
/// entries are none.
std::vector<std::string> parse_filter_list(const std::string& list);

/// "key=value,key=value" from --rdzv-conf; throws LaunchError on an entry without '='.
std::map<std::string, std::string> parse_rdzv_conf(const std::string& conf);

/// `text` without the quotes at its ends ("'a=1,b=2'" -> "a=1,b=2"; a quote at one end only goes
/// too), or nullopt when it has none there.
std::optional<std::string> strip_stray_quotes(const std::string& text);

/// Validates `options` against `host` and resolves every default. Throws LaunchError.
LaunchConfig resolve(const LaunchOptions& options, const HostFacts& host);

/// Replaces every "${local_rank}" in `args` with `local_rank`.
std::vector<std::string> substitute_local_rank(const std::vector<std::string>& args, int local_rank);

}  // namespace rankrun::launcher
