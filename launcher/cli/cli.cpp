#include "launcher/cli/cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <spdlog/spdlog.h>
#include <string_view>

#include "base/parse_number.hpp"
#include "launcher/types/exit_code.hpp"
#include "launcher/types/launch_error.hpp"

#ifndef RANKRUN_VERSION
#define RANKRUN_VERSION "0.0.0"
#endif

namespace rankrun::launcher {
namespace {

constexpr const char* k_torchrun = "torchrun options (same spelling, dashes or underscores, PET_* fallback)";
constexpr const char* k_rankrun = "rankrun options";

// "nproc-per-node" -> "--nproc-per-node,--nproc_per_node"
std::string spellings(const std::string& dashed, const std::string& short_name = "") {
  std::string underscored = dashed;
  for (auto& c : underscored) c = c == '-' ? '_' : c;
  std::string names = short_name.empty() ? "" : short_name + ",";
  names += "--" + dashed;
  if (underscored != dashed) names += ",--" + underscored;
  return names;
}

std::string env_name(const std::string& prefix, const std::string& dashed) {
  std::string name = prefix;
  for (char c : dashed) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

// One usage line, rankrun's own (CLI11's would say "rankrun [OPTIONS]" and miss the script).
class Help : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: rankrun [options] SCRIPT [script args...]   (options go before SCRIPT; all after it is the script's)\n";
  }
};

struct FlagBinding {
  CLI::Option* option;
  bool* target;
  std::string env;
};

// Boolean flags read their environment fallback as torchrun's check_env does: an integer,
// non-zero meaning true.
void apply_flag_env(const FlagBinding& f, const EnvMap& env) {
  if (f.option->count() > 0) return;
  const auto it = env.find(f.env);
  if (it == env.end() || it->second.empty()) return;
  const auto& s = it->second;
  const auto v = parse_number<int>(s);
  if (!v) throw LaunchError(f.env + "='" + s + "' is not an integer; set it to 1 (on) or 0 (off)");
  *f.target = *v != 0;
}

// A long option given by an unambiguous prefix of its name, as argparse (torchrun's parser) takes
// it: "--redirect=3" is --redirects=3, "--nproc_per=2" --nproc_per_node=2. Rewritten in place up
// to the script (the first argument that is neither an option nor an option's value); a prefix of
// several options is refused naming them. Both spellings of one option are one option.
void expand_long_prefixes(std::vector<std::string>& args, const CLI::App& app) {
  struct Name {
    std::string name;  // without the dashes
    const CLI::Option* option;
  };
  std::vector<Name> names;
  for (const auto* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) names.push_back({name, option});
  }
  const auto takes_value = [](const CLI::Option* option) { return option->get_items_expected_min() > 0; };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') return;  // the script, or the end of the options
    if (arg[1] != '-') {
      // a short option: -r VALUE, -t VALUE take the next argument (-r3 holds its own)
      const auto* option = arg.size() == 2 ? app.get_option_no_throw(arg) : nullptr;
      if (option && takes_value(option)) ++i;
      continue;
    }
    const auto eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const CLI::Option* exact = nullptr;
    std::vector<const CLI::Option*> matches;
    for (const auto& n : names) {
      if (n.name == name) exact = n.option;
      if (!name.empty() && n.name.compare(0, name.size(), name) == 0 &&
          std::find(matches.begin(), matches.end(), n.option) == matches.end()) {
        matches.push_back(n.option);
      }
    }
    const CLI::Option* option = exact;
    if (!option && matches.size() == 1) {
      option = matches.front();
      std::string full;
      for (const auto& n : names) {
        // the spelling the prefix was written in: with an underscore if it has one
        if (n.option == option && n.name.compare(0, name.size(), name) == 0) {
          full = n.name;
          break;
        }
      }
      args[i] = "--" + full + (eq == std::string::npos ? "" : arg.substr(eq));
    } else if (!option && matches.size() > 1) {
      std::string listed;
      for (const auto* m : matches) listed += (listed.empty() ? "--" : ", --") + m->get_lnames().front();
      throw LaunchError("ambiguous option: --" + name + " could match " + listed + "; write more of its name");
    }
    if (option && takes_value(option) && eq == std::string::npos) ++i;  // its value is the next argument
  }
}

// Nothing to run: the exit code, after --help, --version or an error.
CliResult ended(int code) { return {std::nullopt, code, std::nullopt}; }

// `rankrun status`'s usage, for its --help and its usage errors.
constexpr const char* k_status_usage =
    "usage: rankrun status [--json] [DIR]\n"
    "  Shows the running job of this machine's rankrun: its state, nodes and every rank.\n"
    "  DIR: the job's run directory, or the --log-dir it was given; without it rankrun looks\n"
    "  for run directories in $TMPDIR (else /tmp).\n"
    "  --json   one JSON object (schema in docs), for scripts\n";

// The command line as CLI11 reads it: the options (torchrun's, then rankrun's own) and the
// `rankrun status` subcommand, each step of parse_cli one function.
class CommandLine {
 public:
  CommandLine(int argc, const char* const* argv, const EnvMap& env)
      : m_argc(argc),
        m_argv(argv),
        m_env(env),
        m_app("rankrun: launch and supervise one worker per GPU, as torchrun does.", "rankrun"),
        m_status_first(argc >= 2 && std::string_view(argv[1]) == "status") {
    if (argc >= 1 && argv[0]) o.invoked_as = argv[0];
    m_app.formatter(std::make_shared<Help>());
    m_app.prefix_command();
    m_app.set_version_flag("--version", "rankrun " RANKRUN_VERSION);
    m_app.get_formatter()->column_width(34);
    // A value from the environment is parsed as if it came first on the command line, so the
    // command line wins (TakeLast) and the same validation applies.
    m_app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }

  void add_torchrun_options();
  void add_rankrun_options();
  void add_status_subcommand();
  /// CLI11's parse of argv (and of the environment's values); an exit code when it ends there.
  std::optional<CliResult> parse_arguments();
  bool is_status() const { return m_status_first; }
  /// `rankrun status`'s request, or its usage error.
  CliResult status_result();
  /// Variables set but empty: not given, with a warning.
  void warn_of_empty_variables() const;
  std::optional<CliResult> print_completion() const;
  /// --term-timeout and --shutdown-timeout (and TORCH_ELASTIC_SHUTDOWN_TIMEOUT): one value.
  std::optional<CliResult> settle_term_timeout();
  void take_log_prefix_from_environment();
  /// The script and its arguments: what CLI11 left, after the options.
  std::optional<CliResult> take_script();
  /// What the user gave, by its dashed name, and the values kept apart until now.
  CliResult finished();

 private:
  CLI::Option* opt(const std::string& name, auto& target, const std::string& help, const char* group = k_torchrun,
                   const std::string& short_name = "") {
    auto* option = m_app.add_option(spellings(name, short_name), target, help)->group(group);
    const auto var = env_name(group == k_torchrun ? "PET_" : "RANKRUN_", name);
    if (const auto it = m_env.find(var); it != m_env.end()) {
      if (it->second.empty()) {
        m_empty_vars.push_back({var, option});
      } else {
        m_env_args.push_back("--" + name + "=" + it->second);
      }
    }
    return option;
  }
  CLI::Option* flag(const std::string& name, bool& target, const std::string& help, const char* group = k_torchrun,
                    const std::string& short_name = "") {
    auto* f = m_app.add_flag(spellings(name, short_name), target, help)->group(group);
    const auto var = env_name(group == k_torchrun ? "PET_" : "RANKRUN_", name);
    m_flags.push_back({f, &target, var});
    if (const auto it = m_env.find(var); it != m_env.end() && it->second.empty()) m_empty_vars.push_back({var, f});
    return f;
  }
  static CliResult usage_error() { return ended(exit_code(JobEnding::ended_early(EarlyEnd::Usage))); }
  static CliResult status_usage_error(const std::string& what) {
    spdlog::error("status: {}\n{}", what, k_status_usage);
    return usage_error();
  }

  const int m_argc;
  const char* const* m_argv;
  const EnvMap& m_env;
  CLI::App m_app;
  const bool m_status_first;
  LaunchOptions o;
  std::vector<std::string> m_env_args;  // the environment's values, as arguments before argv's
  std::vector<FlagBinding> m_flags;
  // Variables that are set but empty (Kubeflow's `standalone: true` is PET_STANDALONE=""): not
  // given, with a warning. torchrun would take "" as the value, or die of it on a switch.
  std::vector<std::pair<std::string, const CLI::Option*>> m_empty_vars;
  // Values that are not LaunchOptions' own type, or whose count matters.
  std::string master_addr;
  int master_port = -1;
  double shutdown_timeout = 30;
  std::string completion;
  std::string gpus;
  CLI::Option* addr_opt = nullptr;
  CLI::Option* port_opt = nullptr;
  CLI::Option* shutdown_opt = nullptr;
  CLI::Option* completion_opt = nullptr;
  CLI::Option* gpus_opt = nullptr;
  CLI::Option* term_opt = nullptr;
  // rankrun status
  CLI::App* m_status = nullptr;
  observe::StatusRequest m_status_request;
  bool m_status_help = false;
  std::string m_status_log_dir, m_status_dir;
  CLI::Option* m_status_log_dir_opt = nullptr;
  CLI::Option* m_status_dir_opt = nullptr;
};

void CommandLine::add_torchrun_options() {
  opt("nproc-per-node", o.nproc_per_node, "workers on this node: N, gpu, cpu or auto (default 1)");
  opt("nnodes", o.nnodes,
      "number of nodes (default 1), or MIN:MAX with --rdzv-backend=c10d or etcd (elastic); node 0 hosts the store");
  opt("node-rank", o.node_rank, "rank of this node, 0 to nnodes-1 (static rendezvous)");
  addr_opt = opt("master-addr", master_addr,
                 "address of node 0, which hosts the store (default 127.0.0.1; required with --nnodes > 1)");
  port_opt = opt("master-port", master_port, "port of the store (default: a free one on one node, 29500 on several)");
  flag("standalone", o.standalone, "single-node job with its own store on a free port");
  flag("module", o.module, "run SCRIPT as a Python module (python -m)", k_torchrun, "-m");
  flag("no-python", o.no_python, "run SCRIPT as a program, without the Python interpreter");
  flag("run-path", o.run_path, "run SCRIPT with runpy.run_path");
  opt("role", o.role, "role name of the workers (default 'default')");
  opt("max-restarts", o.max_restarts, "restart the worker group up to N times on failure (default 0)");
  opt("monitor-interval", o.monitor_interval, "accepted for compatibility; rankrun reacts to exits at once");
  opt("start-method", o.start_method, "accepted for compatibility (spawn, fork, forkserver)")
      ->check(CLI::IsMember({"spawn", "fork", "forkserver"}));
  opt("log-dir", o.log_dir, "directory for per-rank logs and error files");
  opt("redirects", o.redirects, "send stdout/stderr to files in --log-dir: 0 none, 1 out, 2 err, 3 both, or 0:3,1:2",
      k_torchrun, "-r");
  opt("tee", o.tee, "like --redirects, and also to the console", k_torchrun, "-t");
  opt("local-ranks-filter", o.local_ranks_filter, "only these local ranks' output reaches the console, e.g. 0,3");
  opt("rdzv-backend", o.rdzv_backend,
      "rendezvous backend: static (default), c10d (dynamic, elastic) or etcd (the same, kept in etcd)");
  opt("rdzv-endpoint", o.rdzv_endpoint,
      "c10d: the rendezvous host[:port] (port 29400 by default), whose node hosts the store; etcd: etcd's host[:port] (2379); static: node 0's store, host:port (instead of --master-addr/--master-port)");
  opt("rdzv-id", o.rdzv_id, "job id (TORCHELASTIC_RUN_ID)");
  opt("rdzv-conf", o.rdzv_conf,
      "rendezvous settings, key=value,...: timeout, join_timeout, last_call_timeout, is_host, secret_file; etcd: "
      "protocol=https, cacert, cert, key, user, password_file");
  opt("local-addr", o.local_addr, "address this node advertises");
  flag("virtual-local-rank", o.virtual_local_rank, "set LOCAL_RANK=0 in every worker (each sees only its own GPU)");
  shutdown_opt = opt("shutdown-timeout", shutdown_timeout,
                     "the same as --term-timeout (the last given wins; also TORCH_ELASTIC_SHUTDOWN_TIMEOUT)");
  opt("signals-to-handle", o.signals_to_handle,
      "signals that stop the job, forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT, which rankrun "
      "always handles; add SIGUSR1 or SIGUSR2 to stop on them too)");
  opt("log-line-prefix-template", o.log_line_prefix_template,
      "the prefix of each worker line on the console: ${role_name}, ${rank}, ${local_rank}, ${hostname} (default "
      "[rank]; also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)");
  opt("duplicate-stdout-filters", o.duplicate_stdout_filters,
      "lines of the teed stdout that contain one of these comma-separated strings also go to filtered_stdout.log");
  opt("duplicate-stderr-filters", o.duplicate_stderr_filters,
      "lines of the teed stderr that contain one of these comma-separated strings also go to filtered_stderr.log");
  opt("event-log-handler", o.event_log_handler,
      "torchrun's agent events: null (default) or console (rankrun's events on stderr; see --events)");
  opt("logs-specs", o.logs_specs, "torchrun's LogsSpecs plugin: not supported (see --log-dir, --tee)");
  opt("numa-binding", o.numa_binding,
      "run each worker on the CPUs of its own GPU's NUMA node: node, socket, exclusive (cores split among the "
      "node's workers) or core-complex (one last-level cache)");
  completion_opt = opt("print-completion", completion, "print the completion script of a shell and exit")
                       ->check(CLI::IsMember({"bash", "zsh", "tcsh"}));
}

void CommandLine::add_rankrun_options() {
  gpus_opt =
      opt("gpus", gpus, "GPUs to use, e.g. 0,1,2,3 or 0-3 (default: CUDA_VISIBLE_DEVICES, else all found)", k_rankrun);
  flag("no-pin", o.no_pin, "don't pin one GPU per worker; every worker sees every GPU, as with torchrun", k_rankrun);
  opt("numa-memory", o.numa_memory,
      "with --numa-binding: none (default), or preferred: memory from the GPU's NUMA node first (CPUs only, with a "
      "warning, where the kernel refuses it)",
      k_rankrun);
  term_opt = opt("term-timeout", o.term_timeout,
                 "seconds between SIGTERM and SIGKILL when stopping workers (default 30)", k_rankrun);
  opt("node-timeout", o.node_timeout, "multi-node: a node silent this long is lost and the job stops (default 15)",
      k_rankrun);
  opt("store-protocol", o.store_protocol, "TCPStore protocol of the workers' PyTorch: auto (default), 1.13, 2.1, 2.2",
      k_rankrun);
  opt("exit-timeout", o.exit_timeout,
      "after a rank exits 0, the others' time to finish before rankrun calls the job hung (default 300; 0: off)",
      k_rankrun);
  opt("heartbeat-timeout", o.heartbeat_timeout,
      "silence allowed to a rank that heartbeats through the worker runtime (default 60; 0: off)", k_rankrun);
  opt("progress-timeout", o.progress_timeout,
      "every running rank of the job blocked in collectives for this long is a hang (default 180, on one node or many; "
      "0: off)",
      k_rankrun);
  opt("store-memory", o.store_memory,
      "bytes the store may hold for the workers, e.g. 512M or 4G; a request past it closes its connection (default "
      "a sixteenth of the machine's memory, at least 256M)",
      k_rankrun);
  opt("store-connections-per-address", o.store_connections_per_address,
      "connections the store takes from one address; raise it when nodes reach it through NAT, as one address "
      "(default 1024)",
      k_rankrun);
  opt("straggler-timeout", o.straggler_timeout,
      "ranks blocked in collectives waiting this long for a rank outside them is a hang (default 1800; 0: off)",
      k_rankrun);
  opt("init-timeout", o.init_timeout,
      "time for every rank to reach the store rendezvous once one has (default 600; 0: off)", k_rankrun);
  opt("gpu-check", o.gpu_check,
      "GPUs held by other processes or failing (read through NVML before each attempt): warn (default), refuse "
      "(exit 2 before anything starts) or off",
      k_rankrun);
  opt("gpu-release-timeout", o.gpu_release_timeout,
      "before a restart, how long to wait for the last attempt's GPU memory to be released (default 30)", k_rankrun);
  opt("events", o.events, "append one JSON object per line to PATH for every event of the job's life", k_rankrun);
  opt("metrics-port", o.metrics_port,
      "serve Prometheus metrics on [ADDRESS:]PORT/metrics (default address: this node's own)", k_rankrun);
  opt("metrics-textfile", o.metrics_textfile, "write the same metrics to PATH (a .prom file for node_exporter)",
      k_rankrun);
  flag("debug-hangs", o.debug_hangs, "set NCCL_DEBUG=WARN, TORCH_DISTRIBUTED_DEBUG=DETAIL and friends in the workers",
       k_rankrun);
  opt("preempt-signal", o.preempt_signal,
      "Slurm: the signal announcing preemption; the SIGTERM after it exits 120 (default SIGUSR1)", k_rankrun);
  flag("requeue-on-preempt", o.requeue_on_preempt,
       "Slurm: on --preempt-signal, node 0 runs 'scontrol requeue' for the job once", k_rankrun);
  flag("slurm-tasks-per-node-ok", o.slurm_tasks_per_node_ok,
       "Slurm: allow several rankrun tasks per node, each a node of the job", k_rankrun);
  flag("check", o.check,
       "start nothing: check that this launch would work here (GPUs, store, /dev/shm, limits, Python...)", k_rankrun);
  m_app.add_flag("-v,--verbose", o.verbose, "more detail from rankrun itself (repeat for more)")->group(k_rankrun);
}

void CommandLine::add_status_subcommand() {
  // `rankrun status [--json] [DIR]`: a question to a running job, not a launch. It is the
  // subcommand only as the first argument: anywhere else "status" is a script's name (rankrun
  // --no-python status), and so is ./status or status.py. Not listed in --help (its usage is its
  // own --help's), and it reads no PET_*/RANKRUN_* variable.
  m_status = m_app.add_subcommand("status", "show the running job of this machine's rankrun")->group("");
  m_status->disabled(!m_status_first);
  m_status->prefix_command(false);
  m_status->set_help_flag();  // its help is k_status_usage
  m_status->allow_extras();   // what it does not know is named with the usage
  m_status->add_flag("-h,--help", m_status_help);
  m_status->add_flag("--json", m_status_request.json);
  m_status_log_dir_opt = m_status->add_option("--log-dir,--log_dir", m_status_log_dir);
  m_status_dir_opt = m_status->add_option("DIR", m_status_dir);
}

std::optional<CliResult> CommandLine::parse_arguments() {
  try {
    // CLI11 wants the arguments reversed when given as a vector.
    std::vector<std::string> args(m_argv + 1, m_argv + std::max(m_argc, 1));
    if (!m_status_first) expand_long_prefixes(args, m_app);
    std::reverse(args.begin(), args.end());
    if (!m_status_first) args.insert(args.end(), m_env_args.rbegin(), m_env_args.rend());
    m_app.parse(args);
    if (!m_status_first) {
      for (const auto& f : m_flags) apply_flag_env(f, m_env);
    }
  } catch (const CLI::CallForHelp& e) {
    return ended(m_app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return ended(m_app.exit(e));
  } catch (const CLI::ParseError& e) {
    if (m_status_first) {
      // its one option with a value: --log-dir at the end
      return status_usage_error(dynamic_cast<const CLI::ArgumentMismatch*>(&e) ? "--log-dir needs a directory"
                                                                               : e.what());
    }
    spdlog::error("{}\nRun 'rankrun --help' for the options.", e.what());
    return usage_error();
  } catch (const LaunchError& e) {
    spdlog::error("{}", e.what());
    return usage_error();
  }
  return std::nullopt;
}

CliResult CommandLine::status_result() {
  if (m_status_help) {
    std::fputs(k_status_usage, stdout);
    return ended(0);
  }
  if (const auto extra = m_status->remaining(); !extra.empty())
    return status_usage_error("unknown argument '" + extra.front() + "'");
  // DIR: one argument that is not an option, and not after --log-dir (which wins when it
  // comes later).
  bool log_dir_seen = false;
  for (const auto* given : m_status->parse_order()) {
    if (given == m_status_log_dir_opt) {
      log_dir_seen = true;
      m_status_request.dir = m_status_log_dir;
    } else if (given == m_status_dir_opt) {
      if (log_dir_seen || m_status_dir.empty() || m_status_dir[0] == '-') {
        return status_usage_error("unknown argument '" + m_status_dir + "'");
      }
      m_status_request.dir = m_status_dir;
    }
  }
  return {std::nullopt, 0, m_status_request};
}

void CommandLine::warn_of_empty_variables() const {
  for (const auto& [var, option] : m_empty_vars) {
    if (option->count() > 0) continue;  // the command line gave it
    spdlog::warn("{} is set but empty: taken as not given (--{} keeps its default); give it a value or unset it", var,
                 option->get_lnames().front());
  }
}

std::optional<CliResult> CommandLine::print_completion() const {
  if (completion_opt->count() > 0) {
    std::fputs(completion_script(completion).c_str(), stdout);
    return ended(0);
  }
  return std::nullopt;
}

std::optional<CliResult> CommandLine::settle_term_timeout() {
  // --term-timeout and --shutdown-timeout are one value: the last given wins (the environment's
  // come first); with neither, torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
  for (const auto* given : m_app.parse_order()) {
    if (given == shutdown_opt) {
      o.term_timeout = shutdown_timeout;
      o.term_timeout_from = "--shutdown-timeout";
    } else if (given == term_opt) {
      o.term_timeout = term_opt->as<double>();
      o.term_timeout_from = "--term-timeout";
    }
  }
  if (shutdown_opt->count() == 0 && term_opt->count() == 0) {
    if (const auto it = m_env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"); it != m_env.end() && !it->second.empty()) {
      const auto& v = it->second;
      const auto seconds = parse_decimal(v);
      if (!seconds) {
        spdlog::error("TORCH_ELASTIC_SHUTDOWN_TIMEOUT='{}' is not a number of seconds; set it to e.g. 30", v);
        return usage_error();
      }
      o.term_timeout = *seconds;
      o.term_timeout_from = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
    }
  }
  return std::nullopt;
}

void CommandLine::take_log_prefix_from_environment() {
  if (o.log_line_prefix_template.empty()) {
    if (const auto it = m_env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != m_env.end()) {
      o.log_line_prefix_template = it->second;
    }
  }
}

std::optional<CliResult> CommandLine::take_script() {
  auto rest = m_app.remaining();
  if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    spdlog::error("unknown option '{}'; options go before the script (run 'rankrun --help' for the list)",
                  rest.front());
    return usage_error();
  }
  if (!rest.empty()) {
    o.script = rest.front();
    o.script_args.assign(rest.begin() + 1, rest.end());
  }
  return std::nullopt;
}

CliResult CommandLine::finished() {
  // What the user gave, by the dashed name (spellings() registers it first): options counted by
  // CLI11 (command line and the environment values passed in as arguments), and flags set
  // through their environment variable.
  const auto mark_given = [this](const CLI::Option* option) {
    if (!option->get_lnames().empty()) o.given.insert(option->get_lnames().front());
  };
  for (const auto* option : m_app.get_options()) {
    if (option->count() > 0) mark_given(option);
  }
  for (const auto& f : m_flags) {
    if (const auto it = m_env.find(f.env); it != m_env.end() && !it->second.empty()) mark_given(f.option);
  }
  if (port_opt->count() > 0) o.master_port = master_port;
  if (addr_opt->count() > 0) o.master_addr = master_addr;
  if (gpus_opt->count() > 0) o.gpus = gpus;
  return {o, 0, std::nullopt};
}

}  // namespace

CliResult parse_cli(int argc, const char* const* argv, const EnvMap& env) {
  CommandLine cli(argc, argv, env);
  cli.add_torchrun_options();
  cli.add_rankrun_options();
  cli.add_status_subcommand();
  if (auto ended = cli.parse_arguments()) return *ended;
  if (cli.is_status()) return cli.status_result();
  cli.warn_of_empty_variables();
  if (auto ended = cli.print_completion()) return *ended;
  if (auto ended = cli.settle_term_timeout()) return *ended;
  cli.take_log_prefix_from_environment();
  if (auto ended = cli.take_script()) return *ended;
  return cli.finished();
}

}  // namespace rankrun::launcher
