#include "launcher/host/host_facts.hpp"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <random>

#include "launcher/host/python_env.hpp"
#include "launcher/processes/posix_spawner.hpp"

extern char** environ;

namespace rankrun::launcher {

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

std::string random_run_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> byte(0, 255);
  unsigned char b[16];
  for (auto& x : b) x = static_cast<unsigned char>(byte(rd));
  b[6] = static_cast<unsigned char>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3F) | 0x80);
  return fmt::format(
      "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[0],
      b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

HostFacts gather_host_facts(const EnvMap& env, const std::function<int()>& count_gpus, const std::string& invoked_as) {
  HostFacts h;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  h.cpu_count = cpus > 0 ? static_cast<unsigned>(cpus) : 1U;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0)
    h.memory_bytes = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  if (const auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) h.cuda_visible_devices = it->second;
  if (count_gpus && !h.cuda_visible_devices) h.nvml_gpu_count = count_gpus();
  if (const auto it = env.find("PYTHON_EXEC"); it != env.end() && !it->second.empty()) h.python_exec = it->second;
  if (const auto it = env.find(std::string(k_launcher_python_var)); it != env.end() && !it->second.empty()) {
    h.launcher_python = it->second;
  }
  // The environment rankrun is in: the folder it was run from (a link named torchrun in a venv's
  // bin/ counts), then the folder of its executable.
  std::vector<std::string> dirs;
  if (invoked_as.find('/') != std::string::npos) dirs.push_back(std::filesystem::path(invoked_as).parent_path());
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(self.parent_path());
  h.environment_python = environment_python(dirs);
  h.generated_run_id = random_run_id();
  const auto path = env.count("PATH") ? env.at("PATH") : std::string("/usr/local/bin:/usr/bin:/bin");
  h.find_program = [path](const std::string& name, const std::string& what) {
    return resolve_executable(name, path, what);
  };
  h.is_file = [](const std::string& file) { return std::filesystem::is_regular_file(file); };
  h.is_local = [](const std::string& host) {
    return endpoint_is_local(host, resolve_all(host), local_interface_addresses(), local_host_names());
  };
  return h;
}

CommandResult run_shell(const std::string& command, std::size_t max_output) {
  CommandResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  while (const auto n = std::fread(buffer, 1, sizeof(buffer), pipe)) {
    if (r.output.size() < max_output) r.output.append(buffer, std::min(n, max_output - r.output.size()));
  }
  r.status = ::pclose(pipe);
  return r;
}

std::string resolve_address(const std::string& name, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res); rc != 0) {
    why = ::gai_strerror(rc);
    return {};
  }
  std::string best;
  for (auto* ai = res; ai; ai = ai->ai_next) {
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) continue;
    if (best.empty() || (ai->ai_family == AF_INET && best.find(':') != std::string::npos)) best = text;
  }
  ::freeaddrinfo(res);
  if (best.empty()) why = "no usable address";
  return best;
}

std::string this_machine_address() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    std::string why;
    if (auto address = resolve_address(name, why); !address.empty() && !is_loopback_address(address)) return address;
  }
  for (auto& address : local_interface_addresses()) {
    if (!is_loopback_address(address) && address.rfind("fe80:", 0) != 0) return address;
  }
  return {};
}

std::string this_machine_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return this_machine_address();
  const auto addresses = resolve_all(name);
  if (addresses.empty() || std::all_of(addresses.begin(), addresses.end(), is_loopback_address)) {
    return this_machine_address();
  }
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0) return name;
  std::string canonical = res->ai_canonname ? res->ai_canonname : name;
  ::freeaddrinfo(res);
  return canonical;
}

std::vector<std::string> resolve_all(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return {};
  std::vector<std::string> out;
  for (auto* ai = res; ai; ai = ai->ai_next) {
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) continue;
    if (std::find(out.begin(), out.end(), text) == out.end()) out.emplace_back(text);
  }
  ::freeaddrinfo(res);
  return out;
}

std::vector<std::string> local_interface_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (auto* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    const socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(i->ifa_addr, len, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) continue;
    std::string a = text;
    if (const auto zone = a.find('%'); zone != std::string::npos) a.erase(zone);
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<std::string> local_host_names() {
  std::vector<std::string> out{"localhost"};
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    out.emplace_back(name);
    addrinfo hints{};
    hints.ai_flags = AI_CANONNAME;
    addrinfo* res = nullptr;
    if (::getaddrinfo(name, nullptr, &hints, &res) == 0) {
      if (res && res->ai_canonname && out[1] != res->ai_canonname) out.emplace_back(res->ai_canonname);
      ::freeaddrinfo(res);
    }
  }
  return out;
}

}  // namespace rankrun::launcher
