#include "base/read_file.hpp"
#include "launcher/processes/job_cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <spdlog/spdlog.h>
#include <string_view>
#include <thread>

#include "launcher/processes/proc_parse.hpp"
#include "launcher/processes/proc_scan.hpp"

namespace rankrun::launcher {

namespace {

bool write_file(const std::string& path, const char* text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return false;
  const auto n = ::write(fd.get(), text, std::strlen(text));
  return n == static_cast<ssize_t>(std::strlen(text));
}

// The named systemd hierarchy (cgroup v1, "name=systemd") of a hybrid layout, from
// /proc/self/mounts: there systemd marks delegated cgroups.
std::optional<std::string> systemd_v1_mount(const std::string& mounts) {
  std::size_t start = 0;
  while (start < mounts.size()) {
    auto end = mounts.find('\n', start);
    if (end == std::string::npos) end = mounts.size();
    const std::string line = mounts.substr(start, end - start);
    start = end + 1;
    // device mountpoint type options ...
    const auto a = line.find(' ');
    const auto b = a == std::string::npos ? a : line.find(' ', a + 1);
    const auto c = b == std::string::npos ? b : line.find(' ', b + 1);
    const auto d = c == std::string::npos ? c : line.find(' ', c + 1);
    if (d == std::string::npos) continue;
    if (line.substr(b + 1, c - b - 1) != "cgroup") continue;
    const std::string options = "," + line.substr(c + 1, d - c - 1) + ",";
    if (options.find(",name=systemd,") != std::string::npos) return line.substr(a + 1, b - a - 1);
  }
  return std::nullopt;
}

bool has_delegate_xattr(const std::string& dir) {
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    char value[8] = {};
    const auto n = ::getxattr(dir.c_str(), name, value, sizeof(value) - 1);
    if (n > 0 && value[0] == '1') return true;
  }
  return false;
}

// rankrun's cgroup is a systemd service's with Delegate=yes, and rankrun can write it. systemd
// 253 and later mark a delegated cgroup with the trusted.delegate (user.delegate) xattr, in the
// unified hierarchy or, in a hybrid layout, in the named systemd one. Older ones (Debian 12's
// 252) mark nothing: there a writable "*.service" cgroup of a process that systemd started
// ($INVOCATION_ID) counts as delegated.
bool delegated_to_us(const std::string& mount, const std::string& own_path, const std::string& mounts) {
  if (own_path.empty() || own_path == "/") return false;
  const std::string dir = mount + own_path;
  if (::access((dir + "/cgroup.procs").c_str(), W_OK) != 0 || ::access(dir.c_str(), W_OK) != 0) return false;
  if (has_delegate_xattr(dir)) return true;
  const auto v1 = systemd_v1_mount(mounts);
  if (v1 && has_delegate_xattr(*v1 + own_path)) return true;
  static constexpr std::string_view k_service = ".service";
  const char* invocation = std::getenv("INVOCATION_ID");
  return invocation != nullptr && *invocation != '\0' && own_path.size() > k_service.size() &&
         own_path.compare(own_path.size() - k_service.size(), k_service.size(), k_service) == 0;
}

}  // namespace

std::unique_ptr<JobCgroup> JobCgroup::create(const std::string& job_id) {
  const auto mounts = read_file_head("/proc/self/mounts");
  const auto mount = mounts ? cgroup2_mount_point(*mounts) : std::nullopt;
  if (!mount) {
    spdlog::debug("no cgroup2 mount; cleanup walks the process tree");
    return nullptr;
  }
  const auto own = read_file_head("/proc/self/cgroup");
  const auto own_path = own ? cgroup2_path(*own) : std::nullopt;
  if (!own_path) {
    spdlog::debug("rankrun is in no cgroup v2; cleanup walks the process tree");
    return nullptr;
  }
  std::string parent = *own_path == "/" ? std::string() : *own_path;
  // Under systemd with Delegate=yes the job's cgroup goes below the service's, and cgroup v2
  // allows no process in a cgroup that has children with controllers: rankrun first moves
  // itself into a leaf, <own>/supervisor. (A rankrun already in that leaf keeps it.)
  static constexpr std::string_view k_leaf = "/supervisor";
  if (parent.size() > k_leaf.size() && parent.compare(parent.size() - k_leaf.size(), k_leaf.size(), k_leaf) == 0 &&
      delegated_to_us(*mount, parent.substr(0, parent.size() - k_leaf.size()), *mounts)) {
    parent.resize(parent.size() - k_leaf.size());
  } else if (delegated_to_us(*mount, parent, *mounts)) {
    const std::string leaf = *mount + parent + std::string(k_leaf);
    if ((::mkdir(leaf.c_str(), 0755) == 0 || errno == EEXIST) && write_file(leaf + "/cgroup.procs", "0")) {
      spdlog::debug("delegated cgroup {}: rankrun moved into {}", *mount + parent, leaf);
    } else {
      spdlog::debug("delegated cgroup {}: cannot move rankrun into {} ({})", *mount + parent, leaf,
                    std::strerror(errno));
    }
  }
  const std::string path = parent + "/rankrun-" + job_id;
  const std::string dir = *mount + path;
  if (::mkdir(dir.c_str(), 0755) != 0) {
    spdlog::debug("cannot create cgroup {} ({}); cleanup walks the process tree", dir, std::strerror(errno));
    return nullptr;
  }
  UniqueFd procs(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs || ::access((dir + "/cgroup.kill").c_str(), W_OK) != 0) {
    spdlog::debug("cgroup {} is not usable ({}); cleanup walks the process tree", dir, std::strerror(errno));
    ::rmdir(dir.c_str());
    return nullptr;
  }
  spdlog::debug("job cgroup {}", dir);
  return std::unique_ptr<JobCgroup>(new JobCgroup(dir, path, std::move(procs)));
}

JobCgroup::~JobCgroup() {
  m_procs.reset();
  if (!cgroup_remove(m_dir, 1.0)) spdlog::warn("cannot remove cgroup {}: {}", m_dir, std::strerror(errno));
}

bool JobCgroup::kill() const { return cgroup_kill(m_dir); }

bool cgroup_kill(const std::string& dir) { return write_file(dir + "/cgroup.kill", "1"); }

bool cgroup_remove(const std::string& dir, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (::rmdir(dir.c_str()) != 0) {
    if (errno == ENOENT) return true;
    if (errno != EBUSY || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace rankrun::launcher
