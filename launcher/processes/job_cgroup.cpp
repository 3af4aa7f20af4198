#include "launcher/processes/job_cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <spdlog/spdlog.h>
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

}  // namespace

std::unique_ptr<JobCgroup> JobCgroup::create(const std::string& job_id) {
  const auto mounts = read_text_file("/proc/self/mounts");
  const auto mount = mounts ? cgroup2_mount_point(*mounts) : std::nullopt;
  if (!mount) {
    spdlog::debug("no cgroup2 mount; cleanup walks the process tree");
    return nullptr;
  }
  const auto own = read_text_file("/proc/self/cgroup");
  const auto own_path = own ? cgroup2_path(*own) : std::nullopt;
  if (!own_path) {
    spdlog::debug("rankrun is in no cgroup v2; cleanup walks the process tree");
    return nullptr;
  }
  const std::string parent = *own_path == "/" ? std::string() : *own_path;
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

bool cgroup_populated(const std::string& dir) {
  const auto events = read_text_file(dir + "/cgroup.events", 4096);
  return events && events->find("populated 1") != std::string::npos;
}

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
