// resolve(): the options as typed and the host's facts -> a finished LaunchConfig, one function
// per concern. The flags' own value parsers are in options.cpp.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include "base/parse_number.hpp"
#include "base/text.hpp"
#include "launcher/types/exit_status.hpp"
#include "launcher/types/launch_error.hpp"
#include "launcher/config/gpu_list.hpp"
#include "launcher/config/options.hpp"
#include "base/host_port.hpp"

namespace rankrun::launcher {
namespace {

// Where the GPUs came from, with the list: "--gpus=0,1", "CUDA_VISIBLE_DEVICES=GPU-8f1c...", or
// "found by the NVIDIA driver: 0" (/proc/driver/nvidia/gpus, else NVML).
std::string gpu_source_text(GpuSource source, const std::string& gpus) {
  switch (source) {
    case GpuSource::Flag: return "--gpus=" + gpus;
    case GpuSource::CudaVisibleDevices: return "CUDA_VISIBLE_DEVICES=" + gpus;
    case GpuSource::Nvml: return "found by the NVIDIA driver: " + gpus;
    case GpuSource::None: break;
  }
  return "none";
}

// "--nnodes 2" or "--nnodes 1:4" -> {min, max}.
std::pair<int, int> parse_nnodes(const std::string& value) {
  const auto parts = split_at(value, ':');
  int lo = 0;
  int hi = 0;
  const bool ok = (parts.size() == 1 && parse_number(parts[0], lo) && (hi = lo, true)) ||
                  (parts.size() == 2 && parse_number(parts[0], lo) && parse_number(parts[1], hi));
  if (!ok || lo <= 0 || hi < lo) {
    throw LaunchError("--nnodes='" + value +
                      "' is not a node count; write N or MIN:MAX with 0 < MIN <= MAX, e.g. --nnodes=1");
  }
  return {lo, hi};
}

int resolve_nproc(const std::string& value, const HostFacts& host, const std::vector<std::string>& gpus) {
  if (value == "gpu") {
    if (gpus.empty()) {
      throw LaunchError("--nproc-per-node=gpu but no GPU is visible (no --gpus, CUDA_VISIBLE_DEVICES " +
                        std::string(host.cuda_visible_devices ? "is empty" : "is unset") +
                        ", NVML found none); pass a number, or list the GPUs with --gpus");
    }
    return static_cast<int>(gpus.size());
  }
  if (value == "cpu") return static_cast<int>(host.cpu_count);
  if (value == "auto") return gpus.empty() ? static_cast<int>(host.cpu_count) : static_cast<int>(gpus.size());
  int n = 0;
  if (!parse_number(value, n) || n <= 0) {
    throw LaunchError("--nproc-per-node='" + value + "' is not valid; use a positive number, gpu, cpu or auto");
  }
  return n;
}

bool parse_seconds(const std::string& s, double& out) {
  const auto v = parse_decimal(s);
  if (v) out = *v;
  return v.has_value();
}

// resolve(), by concern. Each fills its part of `c` and throws LaunchError naming the value and
// the fix; they run in this order, each seeing what the ones before decided.

// --nnodes, --node-rank, --standalone, --rdzv-backend, --rdzv-id: how many nodes, which one this
// is, and the rendezvous's kind.
void resolve_nodes(const LaunchOptions& o, const HostFacts& host, LaunchConfig& c) {
  const auto [min_nodes, max_nodes] = parse_nnodes(o.nnodes);
  c.nnodes = max_nodes;
  c.min_nodes = min_nodes;
  // etcd's rendezvous is always dynamic, as torchrun's: --nnodes=N is N:N.
  if (!o.standalone && o.rdzv_backend == "etcd") {
    c.rdzv = RdzvKind::Etcd;
  } else if (!o.standalone && o.rdzv_backend == "c10d" && max_nodes > 1) {
    c.rdzv = RdzvKind::C10d;
  } else {
    c.rdzv = max_nodes > 1 ? RdzvKind::Static : RdzvKind::Single;
  }
  const bool elastic = is_elastic(c.rdzv);
  if (max_nodes != min_nodes && !elastic) {
    throw LaunchError(
        "--nnodes=" + o.nnodes +
        ": a range of nodes needs the dynamic rendezvous; add --rdzv-backend=c10d "
        "--rdzv-endpoint=HOST:PORT (or --rdzv-backend=etcd --rdzv-endpoint=ETCD_HOST:2379), or give one number, "
        "e.g. --nnodes=" +
        std::to_string(max_nodes));
  }
  if (elastic) c.node_rank = 0;  // decided by the rendezvous; --node-rank is ignored, as torchrun does
  if (!elastic && (o.node_rank < 0 || o.node_rank >= c.nnodes)) {
    throw LaunchError("--node-rank=" + std::to_string(o.node_rank) + " but --nnodes=" + std::to_string(c.nnodes) +
                      "; use a node rank from 0 to " + std::to_string(c.nnodes - 1) + ", a different one on each node");
  }
  if (!elastic) c.node_rank = o.node_rank;
  c.hosts_store = c.node_rank == 0;

  if (o.standalone) {
    if (c.nnodes > 1)
      throw LaunchError("--standalone is a single-node job but --nnodes=" + std::to_string(c.nnodes) +
                        "; drop one of them");
    c.run_id = host.generated_run_id;
  } else {
    if (o.rdzv_backend != "static" && o.rdzv_backend != "c10d" && o.rdzv_backend != "etcd") {
      throw LaunchError("--rdzv-backend=" + o.rdzv_backend +
                        " is not a rendezvous backend rankrun has; use static (the "
                        "default), c10d or etcd" +
                        (o.rdzv_backend == "etcd-v2" ? " (etcd speaks etcd's v3 API)" : ""));
    }
    c.run_id = o.rdzv_id;
  }
}

// --rdzv-conf keys for etcd: torch's etcd rendezvous's protocol=, cacert=, cert=, key= (and its
// etcd-v2 backend's names for the same: ssl_cert=, ssl_cert_key=, ca_cert=), and etcd's users.
void resolve_etcd_access(const std::map<std::string, std::string>& conf, LaunchConfig& c) {
  const auto value = [&](const char* key, const char* alias, std::string& out) {
    const auto a = conf.find(key);
    const auto b = alias ? conf.find(alias) : conf.end();
    if (a != conf.end() && b != conf.end() && a->second != b->second) {
      throw LaunchError(std::string("--rdzv-conf ") + key + "=" + a->second + " and " + alias + "=" + b->second +
                        " name different files; give one of them");
    }
    if (a != conf.end()) out = a->second;
    if (b != conf.end()) out = b->second;
    return a != conf.end() || b != conf.end();
  };
  std::string protocol;
  bool given = value("protocol", nullptr, protocol);
  auto& etcd = c.etcd_settings;
  given |= value("cacert", "ca_cert", etcd.cacert);
  given |= value("cert", "ssl_cert", etcd.cert);
  given |= value("key", "ssl_cert_key", etcd.key);
  given |= value("user", nullptr, etcd.user);
  given |= value("password_file", nullptr, etcd.password_file);
  if (conf.count("password") != 0) {
    throw LaunchError(
        "--rdzv-conf password= would show etcd's password to every user of this machine (ps, /proc); put it "
        "in a file only you can read (chmod 600) and give --rdzv-conf password_file=PATH");
  }
  if (!given) return;
  if (c.rdzv != RdzvKind::Etcd) {
    throw LaunchError(
        "--rdzv-conf protocol=, cacert=, cert=, key=, user= and password_file= are for --rdzv-backend=etcd");
  }
  std::string lower = protocol;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (!protocol.empty() && lower != "http" && lower != "https") {
    throw LaunchError("--rdzv-conf protocol=" + protocol + " is not valid; use http or https");
  }
  const bool files = !etcd.cacert.empty() || !etcd.cert.empty() || !etcd.key.empty();
  if (files && lower == "http") {
    throw LaunchError("--rdzv-conf cacert=, cert= and key= are for https, but protocol=http; use protocol=https");
  }
  // torch's default is http, and it would drop the certificates silently; rankrun takes them as https.
  etcd.https = lower == "https" || files;
  if (etcd.cert.empty() != etcd.key.empty()) {
    throw LaunchError(etcd.cert.empty() ? "--rdzv-conf key=" + etcd.key + " needs cert=PATH, its client certificate"
                                        : "--rdzv-conf cert=" + etcd.cert + " needs key=PATH, its private key");
  }
  if (etcd.user.empty() != etcd.password_file.empty()) {
    throw LaunchError(
        etcd.user.empty()
            ? "--rdzv-conf password_file=" + etcd.password_file + " needs user=NAME, the etcd user it is for"
            : "--rdzv-conf user=" + etcd.user +
                  " needs password_file=PATH, a file only you can read (chmod 600) that holds its password");
  }
}

// The --rdzv-conf keys rankrun reads (torch's, and rankrun's own).
const std::set<std::string, std::less<>> k_rdzv_conf_keys = {
    "timeout",  "join_timeout",  "last_call_timeout", "close_timeout", "read_timeout", "is_host", "secret_file",
    "protocol", "cacert",        "ca_cert",           "cert",          "ssl_cert",     "key",     "ssl_cert_key",
    "user",     "password_file", "password"};

// --rdzv-conf: torch's keys. A value in quotes (a shell line pasted into a config leaves them) is
// read without them, and keys that nothing reads are ignored, as torch ignores them: both with a
// warning.
void resolve_rdzv_conf(const LaunchOptions& o, LaunchConfig& c) {
  std::string text = o.rdzv_conf;
  if (const auto unquoted = strip_stray_quotes(text)) {
    c.warnings.push_back("--rdzv-conf=" + text + " is in quotes; read as " + *unquoted +
                         " (in a shell line, quote the whole option or nothing)");
    text = *unquoted;
  }
  const auto conf = parse_rdzv_conf(text);
  std::string ignored;
  for (const auto& [key, value] : conf) {
    if (k_rdzv_conf_keys.count(key) > 0) continue;
    ignored += (ignored.empty() ? "" : ", ") + key + "=" + value;
  }
  if (!ignored.empty()) {
    c.warnings.push_back("--rdzv-conf: ignored " + ignored +
                         ": not a key rankrun reads (timeout, join_timeout, last_call_timeout, is_host, secret_file, "
                         "and etcd's protocol, cacert, cert, key, user, password_file)");
  }
  if (const auto it = conf.find("timeout"); it != conf.end()) {
    if (!parse_seconds(it->second, c.rdzv_timeout) || c.rdzv_timeout <= 0) {
      throw LaunchError("--rdzv-conf timeout=" + it->second + " is not valid; use seconds > 0 (default 900)");
    }
  }
  const auto conf_seconds = [&](const char* key, double& out, const char* fallback) {
    if (const auto it = conf.find(key); it != conf.end()) {
      if (!parse_seconds(it->second, out) || out <= 0) {
        throw LaunchError(std::string("--rdzv-conf ") + key + "=" + it->second +
                          " is not valid; use seconds > 0 (default " + fallback + ")");
      }
    }
  };
  conf_seconds("join_timeout", c.join_timeout, "600");
  conf_seconds("last_call_timeout", c.last_call_timeout, "30");
  double unused_seconds = 0;
  conf_seconds("close_timeout", unused_seconds, "none");  // torch's own; rankrun's rounds close at once
  conf_seconds("read_timeout", unused_seconds, "60");     // torch's own; rankrun's links use --node-timeout
  resolve_etcd_access(conf, c);
  if (const auto it = conf.find("is_host"); it != conf.end()) {
    const auto& v = it->second;
    if (v == "1" || v == "true" || v == "True" || v == "yes") {
      c.is_host = true;
    } else if (v == "0" || v == "false" || v == "False" || v == "no") {
      c.is_host = false;
    } else {
      throw LaunchError("--rdzv-conf is_host=" + v + " is not valid; use 1 (this node hosts the store) or 0");
    }
  }
  if (const auto it = conf.find("secret_file"); it != conf.end()) c.secret_file = it->second;
}

// --rdzv-endpoint, --master-addr, --master-port: where the rendezvous and the workers' store are,
// and whether this node hosts the store.
void resolve_endpoints(const LaunchOptions& o, const HostFacts& host, LaunchConfig& c) {
  const bool elastic = is_elastic(c.rdzv);
  if (c.rdzv == RdzvKind::Etcd) {
    auto& etcd = c.etcd_settings;
    if (o.rdzv_endpoint.empty()) {
      throw LaunchError(
          "--rdzv-backend=etcd needs --rdzv-endpoint=HOST[:PORT]: etcd's client address, the same on every "
          "node (default port " +
          std::to_string(k_default_etcd_port) + ")");
    }
    if (o.rdzv_endpoint.find(',') != std::string::npos) {
      throw LaunchError("--rdzv-endpoint=" + o.rdzv_endpoint +
                        ": rankrun talks to one etcd endpoint; give one HOST[:PORT]");
    }
    // etcd's own spelling of an endpoint, a URL, says the protocol too.
    std::string endpoint = o.rdzv_endpoint;
    for (const char* scheme : {"http://", "https://"}) {
      if (endpoint.rfind(scheme, 0) != 0) continue;
      const bool https = scheme[4] == 's';
      if (!https && etcd.https) {
        throw LaunchError("--rdzv-endpoint=" + o.rdzv_endpoint +
                          " is http, but --rdzv-conf asks for https (protocol=https, "
                          "cacert=, cert=, key=); make them agree");
      }
      etcd.https = etcd.https || https;
      endpoint = endpoint.substr(std::string_view(scheme).size());
      if (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    }
    const auto [etcd_host, etcd_port] = parse_endpoint("--rdzv-endpoint", endpoint);
    etcd.host = etcd_host;
    etcd.port = static_cast<std::uint16_t>(etcd_port ? etcd_port : k_default_etcd_port);
    etcd.prefix = "/rankrun/" + c.run_id + "/";
    c.hosts_store = false;  // node rank 0 of each round hosts the workers' store
    if (c.is_host)
      throw LaunchError("--rdzv-conf is_host= is for the c10d backend; with etcd no node hosts the rendezvous");
    if (o.master_port) {
      if (*o.master_port < 0 || *o.master_port > 65535) {
        throw LaunchError("--master-port=" + std::to_string(*o.master_port) +
                          " is not a TCP port; use 1-65535, or leave it out");
      }
      if (*o.master_port != 0) c.master_port = static_cast<std::uint16_t>(*o.master_port);
    }
  } else if (elastic) {
    if (o.rdzv_endpoint.empty()) {
      throw LaunchError(
          "--rdzv-backend=c10d with --nnodes=" + o.nnodes +
          " needs --rdzv-endpoint=HOST[:PORT]: the node that hosts the rendezvous, the same on every node "
          "(default port " +
          std::to_string(k_default_rdzv_port) + ")");
    }
    const auto [endpoint_host, endpoint_port] = parse_endpoint("--rdzv-endpoint", o.rdzv_endpoint);
    c.master_addr = endpoint_host;
    c.master_port = static_cast<std::uint16_t>(endpoint_port ? endpoint_port : k_default_rdzv_port);
  }
  // The static backend: as torchrun, the endpoint (when given) is node 0's store, HOST:PORT.
  std::optional<std::pair<std::string, int>> static_endpoint;
  if (o.rdzv_backend == "static" && !o.rdzv_endpoint.empty()) {
    const auto [h, p] = parse_endpoint("--rdzv-endpoint", o.rdzv_endpoint);
    if (p == 0) {
      throw LaunchError("--rdzv-endpoint=" + o.rdzv_endpoint +
                        " needs a port with the static backend: node 0's store, " +
                        "e.g. --rdzv-endpoint=" + host_port(h, 29500));
    }
    if (o.master_addr && *o.master_addr != h) {
      throw LaunchError("--rdzv-endpoint=" + o.rdzv_endpoint + " and --master-addr=" + *o.master_addr +
                        " name different hosts for node 0's store; give one of them");
    }
    if (o.master_port && *o.master_port != p) {
      throw LaunchError("--rdzv-endpoint=" + o.rdzv_endpoint + " and --master-port=" + std::to_string(*o.master_port) +
                        " name different ports for node 0's store; give one of them");
    }
    static_endpoint = std::pair<std::string, int>{h, p};
  }
  if (elastic) {
    // Until MIN nodes came, join_timeout bounds every wait for the rendezvous.
    c.rdzv_timeout = c.join_timeout;
    if (o.max_restarts > 999) {  // cluster::k_max_attempts_per_round
      throw LaunchError("--max-restarts=" + std::to_string(o.max_restarts) +
                        " is more than an elastic job allows (999)");
    }
  }
  if (o.master_addr && o.master_addr->empty()) {
    throw LaunchError("--master-addr is empty; give a host name or address, e.g. 127.0.0.1");
  }
  if (c.nnodes > 1 && !o.master_addr && !static_endpoint && !elastic) {
    throw LaunchError(
        "--nnodes=" + std::to_string(c.nnodes) +
        " needs --master-addr (or PET_MASTER_ADDR): the address of node 0, which hosts the store, the same on "
        "every node; rankrun does not fall back to 127.0.0.1 for a multi-node job");
  }
  if (!elastic) c.master_addr = o.master_addr.value_or(static_endpoint ? static_endpoint->first : "127.0.0.1");
  if (c.rdzv == RdzvKind::Etcd) c.master_addr = {};  // node rank 0 of each round
  if (c.nnodes > 1 && !elastic) c.master_port = k_default_master_port;
  if (static_endpoint) c.master_port = static_cast<std::uint16_t>(static_endpoint->second);
  if (o.master_port && !elastic) {
    if (*o.master_port < 0 || *o.master_port > 65535) {
      throw LaunchError("--master-port=" + std::to_string(*o.master_port) +
                        " is not a TCP port; use 1-65535, or 0 to let the kernel choose");
    }
    if (*o.master_port != 0) c.master_port = static_cast<std::uint16_t>(*o.master_port);
    if (*o.master_port == 0 && c.nnodes > 1) {
      throw LaunchError(
          "--master-port=0 in a multi-node job: every node must know the port; give one, e.g. --master-port=29500");
    }
  }
  if (c.rdzv == RdzvKind::C10d) {
    // The node whose own address (or name) is the endpoint's hosts the store, unless is_host=
    // decides; torch compares only host names, which fails where a name resolves elsewhere
    // (containers, namespaces).
    c.hosts_store = c.is_host ? *c.is_host : host.is_local(c.master_addr);
  }
}

// --node-timeout, --local-addr: this node among the others.
void resolve_node_link(const LaunchOptions& o, LaunchConfig& c) {
  if (!(o.node_timeout > 0) || !std::isfinite(o.node_timeout)) {
    throw LaunchError("--node-timeout=" + std::to_string(o.node_timeout) +
                      " is not valid; use seconds > 0 (default 15)");
  }
  c.node_timeout = o.node_timeout;
  c.local_addr = o.local_addr;
}

// --preempt-signal, --requeue-on-preempt, --signals-to-handle: the signals that stop the job.
void resolve_signals(const LaunchOptions& o, LaunchConfig& c) {
  const auto preempt = parse_signal_name(o.preempt_signal);
  if (!preempt) {
    throw LaunchError("--preempt-signal=" + o.preempt_signal +
                      " is not a signal rankrun can forward; use SIGUSR1 or SIGUSR2 (or USR1, USR2, 10, 12)");
  }
  c.preempt_signal = *preempt;
  c.requeue_on_preempt = o.requeue_on_preempt;
  c.slurm_job_id = o.slurm_job_id;  // what the requeue names
  c.stop_signals = parse_stop_signals(o.signals_to_handle);
  if (o.given.count("signals-to-handle") > 0) c.signals_to_handle = o.signals_to_handle;
}

// --module/--no-python, --max-restarts, --term-timeout, --monitor-interval, --role: how the
// workers run, restart and stop.
void resolve_workers(const LaunchOptions& o, LaunchConfig& c) {
  if (o.module && o.no_python) {
    throw LaunchError(
        "--module and --no-python cannot be used together: --module runs 'python -m SCRIPT', --no-python runs SCRIPT as a binary");
  }
  if (o.max_restarts < 0) {
    throw LaunchError("--max-restarts=" + std::to_string(o.max_restarts) + " is negative; use 0 or more");
  }
  if (!(o.term_timeout >= 0) || !std::isfinite(o.term_timeout)) {
    throw LaunchError(o.term_timeout_from + "=" + std::to_string(o.term_timeout) + " is not valid; use seconds >= 0");
  }
  if (!(o.monitor_interval > 0)) {
    throw LaunchError("--monitor-interval=" + std::to_string(o.monitor_interval) + " is not valid; use seconds > 0");
  }
  // An empty role is torchrun's too (TorchX passes --role ''): ROLE_NAME is empty.
  c.role = o.role;
  c.max_restarts = o.max_restarts;
  c.term_timeout = o.term_timeout;
}

// --store-protocol, --store-memory, --store-connections-per-address: the workers' store.
void resolve_store(const LaunchOptions& o, const HostFacts& host, LaunchConfig& c) {
  const auto protocol = rendezvous::parse_protocol_choice(o.store_protocol);
  if (!protocol) {
    throw LaunchError("--store-protocol=" + o.store_protocol +
                      " is not known; use auto, 1.13 (also 2.0), 2.1, or 2.2 (also every later version)");
  }
  c.store_protocol = *protocol;
  if (o.store_memory) {
    const auto bytes = parse_byte_size(*o.store_memory);
    if (!bytes || *bytes < k_min_store_memory) {
      throw LaunchError("--store-memory=" + *o.store_memory + " is not a size of 1M or more; write e.g. 512M or 4G");
    }
    c.store_memory = *bytes;
  } else {
    c.store_memory = std::max<std::uint64_t>(host.memory_bytes / 16, std::uint64_t{256} << 20);
  }
  if (o.store_connections_per_address) {
    const auto n = *o.store_connections_per_address;
    if (n < 1 || n > 1000000) {
      throw LaunchError("--store-connections-per-address=" + std::to_string(n) +
                        " is not a number of connections from 1 to 1000000; a node behind NAT opens about as many as "
                        "its workers and their DataLoader processes, e.g. 4096");
    }
    c.store_connections_per_address = static_cast<std::size_t>(n);
  }
}

// --gpu-check, --gpu-release-timeout: the node's GPUs before each attempt.
void resolve_gpu_checks(const LaunchOptions& o, LaunchConfig& c) {
  if (o.gpu_check == "warn")
    c.gpu_check = GpuCheck::Warn;
  else if (o.gpu_check == "refuse")
    c.gpu_check = GpuCheck::Refuse;
  else if (o.gpu_check == "off")
    c.gpu_check = GpuCheck::Off;
  else
    throw LaunchError("--gpu-check=" + o.gpu_check + " is not one of warn, refuse or off");
  if (!(o.gpu_release_timeout > 0) || !std::isfinite(o.gpu_release_timeout) || o.gpu_release_timeout > 86400) {
    throw LaunchError("--gpu-release-timeout=" + std::to_string(o.gpu_release_timeout) +
                      " is not valid; use seconds above 0 and at most 86400, e.g. 30");
  }
  c.gpu_release_timeout = o.gpu_release_timeout;
}

// --numa-binding, --numa-memory: each worker's CPUs and memory.
void resolve_numa(const LaunchOptions& o, LaunchConfig& c) {
  if (o.numa_binding) {
    c.numa_binding = parse_numa_mode(*o.numa_binding);
    if (!c.numa_binding) {
      throw LaunchError("--numa-binding=" + *o.numa_binding + " is not one of node, socket, exclusive or core-complex");
    }
  }
  if (o.numa_memory == "preferred") {
    c.numa_memory_preferred = true;
  } else if (o.numa_memory != "none") {
    throw LaunchError("--numa-memory=" + o.numa_memory + " is not none or preferred");
  }
  if (c.numa_memory_preferred && !c.numa_binding) {
    throw LaunchError("--numa-memory=preferred needs --numa-binding: the node it prefers is the worker's GPU's");
  }
}

// --events, --event-log-handler, --logs-specs, --metrics-textfile, --metrics-port: what the job
// tells the world.
void resolve_observation(const LaunchOptions& o, LaunchConfig& c) {
  c.events_path = o.events;
  // torchrun's agent event handlers: null (its default: none) and console; rankrun's own event
  // log is --events.
  if (o.event_log_handler == "console") {
    c.events_console = true;
  } else if (o.event_log_handler != "null") {
    throw LaunchError("--event-log-handler=" + o.event_log_handler +
                      " is not one rankrun has; use null (none, the default) or console (the events on stderr), or "
                      "--events=PATH for rankrun's event log");
  }
  // torchrun's built-in LogsSpecs is "default": what rankrun does anyway.
  if (o.logs_specs && *o.logs_specs != "default") {
    throw LaunchError("--logs-specs=" + *o.logs_specs +
                      ": rankrun does not load torchrun's LogsSpecs plugins (Python entry points); where each rank's "
                      "output goes is set with --log-dir, --redirects, --tee, --local-ranks-filter and "
                      "--duplicate-stdout-filters/--duplicate-stderr-filters");
  }
  c.metrics_textfile = o.metrics_textfile;
  if (!o.metrics_port.empty()) {
    // PORT, or ADDRESS:PORT ([ADDRESS]:PORT for IPv6).
    const auto& v = o.metrics_port;
    auto split = split_host_port(v);
    if (!split.port && split.problem == SplitHostPort::Problem::None) {
      split = SplitHostPort{"", v, SplitHostPort::Problem::None};  // a port alone: every address
    } else if (split.problem != SplitHostPort::Problem::None || split.host.empty()) {
      throw LaunchError("--metrics-port=" + v + " has " + (split.host.empty() ? "an empty" : "no valid") +
                        " address; give PORT or ADDRESS:PORT ([ADDRESS]:PORT for IPv6), e.g. 9400 or 127.0.0.1:9400");
    }
    int n = -1;
    if (!parse_number(*split.port, n) || n < 0 || n > 65535) {
      throw LaunchError("--metrics-port=" + v +
                        " is not a port from 0 to 65535 (or ADDRESS:PORT, [ADDRESS]:PORT for IPv6); e.g. 9400");
    }
    c.metrics_host = split.host;
    c.metrics_port = n;
  }
}

// --exit-timeout, --heartbeat-timeout, --straggler-timeout, --progress-timeout, --init-timeout,
// --debug-hangs: the hang detector.
void resolve_hang_detection(const LaunchOptions& o, LaunchConfig& c) {
  const auto timeout = [](const char* flag, double v) -> std::optional<Seconds> {
    if (!(v >= 0) || !std::isfinite(v)) {
      throw LaunchError(std::string(flag) + "=" + std::to_string(v) +
                        " is not valid; use seconds > 0, or 0 to turn it off");
    }
    if (v == 0) return std::nullopt;
    return Seconds(v);
  };
  c.hang.exit_timeout = timeout("--exit-timeout", o.exit_timeout);
  c.hang.heartbeat_timeout = timeout("--heartbeat-timeout", o.heartbeat_timeout);
  c.hang.straggler_timeout = timeout("--straggler-timeout", o.straggler_timeout);
  // The same default on several nodes as on one: node rank 0 decides on every rank of the job.
  c.hang.progress_timeout = o.progress_timeout ? timeout("--progress-timeout", *o.progress_timeout)
                                               : std::optional<Seconds>(Seconds(k_default_progress_timeout));
  c.hang.init_timeout = timeout("--init-timeout", o.init_timeout);
  c.debug_hangs = o.debug_hangs;
}

// What supervises the workers, one concern a step.
void resolve_supervision(const LaunchOptions& o, const HostFacts& host, LaunchConfig& c) {
  resolve_node_link(o, c);
  resolve_signals(o, c);
  resolve_workers(o, c);
  resolve_store(o, host, c);
  resolve_gpu_checks(o, c);
  resolve_numa(o, c);
  resolve_observation(o, c);
  resolve_hang_detection(o, c);
}

// --gpus, --nproc-per-node, --no-pin: the workers of this node and their GPUs.
void resolve_gpus(const LaunchOptions& o, const HostFacts& host, LaunchConfig& c) {
  // GPUs: --gpus, else the launcher's CUDA_VISIBLE_DEVICES, else NVML, else none (CPU job).
  if (o.gpus) {
    c.gpus = parse_gpu_flag(*o.gpus);
    c.gpu_source = GpuSource::Flag;
  } else if (host.cuda_visible_devices) {
    c.gpus = parse_cuda_visible_devices(*host.cuda_visible_devices);
    c.gpu_source = GpuSource::CudaVisibleDevices;
  } else if (host.nvml_gpu_count > 0) {
    for (int i = 0; i < host.nvml_gpu_count; ++i) c.gpus.push_back(std::to_string(i));
    c.gpu_source = GpuSource::Nvml;
  }
  c.nproc = resolve_nproc(o.nproc_per_node, host, c.gpus);
  c.pin = !o.no_pin && !c.gpus.empty();
  if (c.pin && c.nproc > static_cast<int>(c.gpus.size())) {
    throw LaunchError("--nproc-per-node=" + std::to_string(c.nproc) + " but " + std::to_string(c.gpus.size()) +
                      (c.gpus.size() == 1 ? " GPU is" : " GPUs are") + " visible (" +
                      gpu_source_text(c.gpu_source, join_gpus(c.gpus)) +
                      "); lower it, pass --gpus, or --no-pin to share GPUs");
  }
  c.virtual_local_rank = o.virtual_local_rank;
}

// --redirects, --tee, --local-ranks-filter, --log-dir: where the workers' output goes.
void resolve_output(const LaunchOptions& o, LaunchConfig& c) {
  c.redirects = parse_stream_spec("--redirects", o.redirects);
  c.tee = parse_stream_spec("--tee", o.tee);
  if (!o.local_ranks_filter.empty()) {
    std::set<int> ranks;
    for (const auto& item : split_at(o.local_ranks_filter, ',')) {
      int r = 0;
      if (!parse_number(item, r) || r < 0 || r >= c.nproc) {
        throw LaunchError("--local-ranks-filter='" + o.local_ranks_filter + "': '" + item +
                          "' is not a local rank; use comma-separated ranks from 0 to " + std::to_string(c.nproc - 1));
      }
      ranks.insert(r);
    }
    c.console_ranks = ranks;
  }

  c.line_prefix_template = o.log_line_prefix_template;
  c.stdout_filters = parse_filter_list(o.duplicate_stdout_filters);
  c.stderr_filters = parse_filter_list(o.duplicate_stderr_filters);
  c.log_dir = o.log_dir;
  c.verbose = o.verbose;
}

// The worker's command line, as torchrun builds it, with the program found as the shell would.
void resolve_command(const LaunchOptions& o, const HostFacts& host, LaunchConfig& c) {
  // The interpreter, as torchrun's is its own (sys.executable): PYTHON_EXEC, else the one that
  // ran `python -m rankrun`, else the environment rankrun itself is in, else python3 on PATH.
  std::string python = "python3";
  c.python_origin = "PATH";
  if (host.python_exec) {
    python = *host.python_exec;
    c.python_origin = "PYTHON_EXEC";
  } else if (host.launcher_python) {
    python = *host.launcher_python;
    c.python_origin = "the interpreter of python -m rankrun";
  } else if (host.environment_python) {
    python = *host.environment_python;
    c.python_origin = "the environment rankrun is installed in";
  }
  if (o.run_path) {
    c.command = {python, "-u", "-c",
                 "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
                 o.script};
  } else if (o.no_python) {
    c.command = {o.script};
  } else {
    c.command = {python, "-u"};
    if (o.module) c.command.push_back("-m");
    c.command.push_back(o.script);
  }
  c.command.insert(c.command.end(), o.script_args.begin(), o.script_args.end());
  c.entrypoint_name = o.script;

  const bool runs_python = !o.no_python;
  if (!runs_python) c.python_origin.clear();
  c.command.front() = host.find_program(c.command.front(), runs_python ? "Python interpreter" : "program");
  if (runs_python && !o.module && !host.is_file(o.script)) {
    throw LaunchError(
        "script '" + o.script + "' does not exist; check the path" +
        (o.script.find('.') == std::string::npos ? " (for a module, pass -m; for a program, --no-python)" : ""));
  }
}

}  // namespace

LaunchConfig resolve(const LaunchOptions& o, const HostFacts& host) {
  if (o.script.empty()) {
    throw LaunchError(
        "no training script given; usage: rankrun [options] SCRIPT [script args...] (see rankrun --help)");
  }
  LaunchConfig c;
  resolve_nodes(o, host, c);
  resolve_rdzv_conf(o, c);
  resolve_endpoints(o, host, c);
  resolve_supervision(o, host, c);
  resolve_gpus(o, host, c);
  resolve_output(o, c);
  resolve_command(o, host, c);
  return c;
}

}  // namespace rankrun::launcher
