#include "base/read_file.hpp"
#include "launcher/check/probe.hpp"

#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "launcher/files/run_dir.hpp"
#include "launcher/gpu/gpu_guard.hpp"
#include "launcher/host/host_facts.hpp"
#include "launcher/processes/job_cgroup.hpp"
#include "launcher/processes/proc_scan.hpp"
#include "launcher/report/console_writer.hpp"
#include "rendezvous/store_client.hpp"

namespace rankrun::launcher::check {
namespace fs = std::filesystem;
namespace {

constexpr int k_connect_timeout_ms = 3000;

std::string numeric(const sockaddr* sa, socklen_t len) {
  char text[NI_MAXHOST] = {};
  if (::getnameinfo(sa, len, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return text;
}

// The store: listening here (node 0) or connecting from here, on every address the name has.
std::optional<std::string> probe_store(const LaunchConfig& c, bool local) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = local ? AI_PASSIVE : 0;
  const std::string port = std::to_string(c.master_port.value_or(0));
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(c.master_addr.c_str(), port.c_str(), &hints, &res); rc != 0)
    return std::string(::gai_strerror(rc));
  std::optional<std::string> error = std::string("no address");
  for (auto* ai = res; ai && error; ai = ai->ai_next) {
    const int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (s < 0) {
      error = std::strerror(errno);
      continue;
    }
    if (local) {
      const int one = 1;
      ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s, 1) == 0) {
        error.reset();
      } else {
        error = std::string(std::strerror(errno)) + " (" + numeric(ai->ai_addr, ai->ai_addrlen) + ")";
      }
    } else {
      int err = 0;
      if (::connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
        err = errno;
        if (err == EINPROGRESS) {
          pollfd p{s, POLLOUT, 0};
          if (::poll(&p, 1, k_connect_timeout_ms) <= 0) {
            err = ETIMEDOUT;
          } else {
            socklen_t len = sizeof(err);
            ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
          }
        }
      }
      if (err == 0) {
        error.reset();
      } else {
        error = std::string(std::strerror(err)) + (err == ETIMEDOUT ? " after 3 s" : "");
      }
    }
    ::close(s);
  }
  ::freeaddrinfo(res);
  if (!local && !error) {
    // Something listens there; a store must also answer as one (not an HTTP server on the port).
    try {
      rendezvous::ClientOptions options;
      options.connect_timeout = std::chrono::milliseconds(k_connect_timeout_ms);
      options.timeout = std::chrono::milliseconds(k_connect_timeout_ms);
      rendezvous::StoreClient(c.master_addr, *c.master_port, options).ping();
    } catch (const rendezvous::StoreError& e) {
      error = e.what();
    }
  }
  return error;
}

// NCCL_SOCKET_IFNAME: comma-separated prefixes, "^" excludes, "=" asks for exact names.
// GLOO_SOCKET_IFNAME: comma-separated exact names.
HostProbe::Ifname probe_ifname(const std::string& variable, const std::string& value,
                               const std::map<std::string, bool>& interfaces) {
  HostProbe::Ifname out{variable, value, {}, {}};
  for (const auto& [name, up] : interfaces) out.all.push_back(name);
  std::string spec = value;
  bool exclude = false;
  bool exact = variable.rfind("GLOO", 0) == 0;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec = spec.substr(1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec = spec.substr(1);
  }
  std::vector<std::string> items;
  for (std::size_t start = 0; start <= spec.size();) {
    auto end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    if (end > start) items.push_back(spec.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& [name, up] : interfaces) {
    bool match = false;
    for (const auto& item : items) match = match || (exact ? name == item : name.rfind(item, 0) == 0);
    if (match != exclude && up) out.up.push_back(name);
  }
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool logind_remove_ipc() {
  // logind's default is yes; a "RemoveIPC=no" in logind.conf or a drop-in turns it off.
  bool on = true;
  std::vector<std::string> files{"/etc/systemd/logind.conf"};
  std::error_code ec;
  for (const auto* dir : {"/etc/systemd/logind.conf.d", "/usr/lib/systemd/logind.conf.d"}) {
    for (const auto& e : fs::directory_iterator(dir, ec)) files.push_back(e.path().string());
  }
  for (const auto& f : files) {
    const auto text = read_file_head(f, 1 << 20);
    if (!text) continue;
    std::size_t start = 0;
    while (start < text->size()) {
      auto end = text->find('\n', start);
      if (end == std::string::npos) end = text->size();
      auto line = text->substr(start, end - start);
      if (line.rfind("RemoveIPC=", 0) == 0)
        on = line.substr(10) != "no" && line.substr(10) != "false" && line.substr(10) != "0";
      start = end + 1;
    }
  }
  return on;
}

}  // namespace

HostProbe probe_host(const LaunchConfig& c, const EnvMap& env, bool python, bool store) {
  HostProbe p;
  p.store_local = c.node_rank == 0;
  if (store) p.store_error = probe_store(c, p.store_local);
  if (auto addr = resolve_address(c.master_addr, p.master_error); !addr.empty()) p.master_resolved = std::move(addr);

  struct statvfs shm {};
  if (::statvfs("/dev/shm", &shm) == 0) {
    p.shm_size = static_cast<std::uint64_t>(shm.f_blocks) * shm.f_frsize;
    p.shm_free = static_cast<std::uint64_t>(shm.f_bavail) * shm.f_frsize;
  }
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    p.nofile_soft = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
    p.nofile_hard = rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max;
  }

  const auto sysctl = [](const char* path) -> std::optional<std::uint64_t> {
    std::ifstream in(path);
    std::uint64_t v = 0;
    if (in >> v) return v;
    return std::nullopt;
  };
  p.somaxconn = sysctl("/proc/sys/net/core/somaxconn");
  p.syn_backlog = sysctl("/proc/sys/net/ipv4/tcp_max_syn_backlog");

  std::map<std::string, bool> interfaces;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i; i = i->ifa_next) {
      if (i->ifa_name) interfaces[i->ifa_name] = interfaces[i->ifa_name] || (i->ifa_flags & IFF_UP) != 0;
    }
    ::freeifaddrs(ifs);
  }
  for (const char* var : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    if (const auto it = env.find(var); it != env.end() && !it->second.empty())
      p.ifnames.push_back(probe_ifname(var, it->second, interfaces));
  }

  if (c.gpu_check != GpuCheck::Off && !c.gpus.empty()) {
    std::string why;
    if (const auto nvml = gpu::Nvml::open(env, &why)) {
      const auto gpus = nvml->read(c.gpus);
      p.gpus_read = gpus.size();
      p.gpu_findings = gpu::unfit(gpus, !c.pin && c.nproc > 1, true);
      const auto facts = [](pid_t pid) { return gpu::read_process_facts(pid, nullptr); };
      for (auto& f : gpu::held_by_others(gpus, facts, gpu::current_user())) p.gpu_findings.push_back(std::move(f));
    } else {
      p.gpu_unread = why;
    }
  }

  p.python = python;
  if (python) {
    p.interpreter = c.command.front();
    ConsoleWriter::write(2,
                         "rankrun --check: importing torch with " + p.interpreter + " (this takes a few seconds)...\n",
                         ConsoleOrigin::Rankrun);
    // A torch built without libuv refuses use_libuv=True at once; 1.13 has no such argument.
    const auto command = shell_quote(p.interpreter) +
                         " -c 'import sys, torch\n"
                         "try:\n"
                         "    import torch.distributed as d\n"
                         "    d.TCPStore(\"127.0.0.1\", 0, None, True, use_libuv=True, wait_for_workers=False)\n"
                         "    uv = \"yes\"\n"
                         "except Exception as e:\n"
                         "    uv = \"no\" if \"without libuv\" in str(e) else \"unknown\"\n"
                         "sys.stdout.write(\"libuv:\" + uv + \" version:\" + torch.__version__)' 2>&1";
    auto out = run_shell(command, 1 << 16).output;
    if (const auto at = out.rfind("version:"); at != std::string::npos) {
      p.torch_version = out.substr(at + 8);
      if (out.find("libuv:yes") != std::string::npos) p.torch_libuv = true;
      if (out.find("libuv:no") != std::string::npos) p.torch_libuv = false;
    } else {
      // The last line says why (ModuleNotFoundError: No module named 'torch').
      while (!out.empty() && out.back() == '\n') out.pop_back();
      p.python_error = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
      if (p.python_error.empty()) p.python_error = "it did not run";
    }
  }

  const uid_t uid = ::geteuid();
  if (const passwd* pw = ::getpwuid(uid)) p.user = pw->pw_name;
  if (p.user.empty()) p.user = std::to_string(uid);
  p.system_user = uid < 1000;
  p.linger = fs::exists("/var/lib/systemd/linger/" + p.user);
  p.remove_ipc = logind_remove_ipc();

  const auto mounts = read_file_head("/proc/self/mounts");
  p.cgroup_available = mounts && mounts->find(" cgroup2 ") != std::string::npos;
  if (p.cgroup_available) {
    // Make the job's cgroup once, empty, and remove it again.
    if (const auto cg = JobCgroup::create("check-" + std::to_string(::getpid()))) {
      p.cgroup_error.reset();
    } else {
      p.cgroup_error = "no permission below rankrun's own cgroup";
    }
  }
  // A place another user could change is refused at launch; nothing is made in it here either.
  // A --log-dir that does not exist yet is made as the launch would make it (mode 0755).
  const auto tmpdir = env.find("TMPDIR");
  p.run_dir_place = check_run_dir_place(
      run_dir_place(c.log_dir, tmpdir != env.end() ? std::optional(tmpdir->second) : std::nullopt), !c.log_dir.empty());
  if (!c.log_dir.empty() && !p.run_dir_place) {
    std::string probe_file = c.log_dir + "/.rankrun-check-XXXXXX";
    const int fd = ::mkstemp(probe_file.data());
    if (fd < 0) {
      p.log_dir_error = std::strerror(errno);
    } else {
      ::close(fd);
      ::unlink(probe_file.c_str());
    }
  }
  return p;
}

std::string node_start_failures(const LaunchConfig& config, const EnvMap& env) {
  const auto probe = probe_host(config, env, false, false);
  std::vector<CheckLine> failed;
  for (auto& line : evaluate(config, probe)) {
    // Nodes on one host (a test, a workstation) may rendezvous on loopback: at start only an
    // address that does not resolve at all stops the job; --check says more.
    if (line.what == "master address" && probe.master_resolved) continue;
    // The GPUs stop the job only under --gpu-check=refuse (launch() warns of them otherwise).
    if (line.what.rfind("GPU ", 0) == 0 && config.gpu_check != GpuCheck::Refuse) continue;
    if (line.verdict == Verdict::Fail) failed.push_back(std::move(line));
  }
  std::string out;
  for (const auto& l : failed) out += (out.empty() ? "" : "; ") + l.what + ": " + l.detail + " (fix: " + l.fix + ")";
  return out;
}

int run_checks(const LaunchConfig& config, const EnvMap& env, bool python) {
  const auto lines = evaluate(config, probe_host(config, env, python));
  const bool fancy = ::isatty(1) == 1;
  const auto text = format_checks(lines, fancy);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return exit_code_of(lines);
}

}  // namespace rankrun::launcher::check
