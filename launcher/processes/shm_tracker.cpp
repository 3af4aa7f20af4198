#include "launcher/processes/shm_tracker.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/buffer.hpp>
#include <cstring>
#include <memory>
#include <spdlog/spdlog.h>

#include "launcher/processes/proc_scan.hpp"
#include "launcher/processes/shm_names.hpp"

namespace rankrun::launcher {

namespace {

std::optional<ino_t> inode_of(const std::string& dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(AT_FDCWD, (dir + "/" + name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
    return std::nullopt;
  }
  return st.st_ino;
}

}  // namespace

std::map<std::string, ino_t> attributable_segments(const std::string& dir, const ShmTracker::Belongs& belongs) {
  std::map<std::string, ino_t> found;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return found;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    const auto pid = shm_creator_pid(name);
    if (!pid || !belongs(*pid)) continue;
    if (const auto ino = inode_of(dir, name)) found.emplace(name, *ino);
  }
  return found;
}

bool remove_segment(const std::string& dir, const std::string& name, ino_t inode) {
  const auto now = inode_of(dir, name);
  if (!now || *now != inode) return false;
  return ::unlink((dir + "/" + name).c_str()) == 0;
}

int ShmTracker::open_watch(const std::string& dir) {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    spdlog::debug("inotify unavailable ({}); shared-memory segments are found at exit only", std::strerror(errno));
    return -1;
  }
  if (::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO) < 0) {
    spdlog::debug("cannot watch {} ({}); shared-memory segments are found at exit only", dir, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

ShmTracker::ShmTracker(boost::asio::io_context& io, std::string dir, int watch_fd, Belongs belongs, OnRemembered on_remembered)
    : m_dir(std::move(dir)), m_belongs(std::move(belongs)), m_on_remembered(std::move(on_remembered)), m_inotify(io) {
  if (watch_fd < 0) return;
  m_inotify.assign(watch_fd);
  read_events();
}

ShmTracker::~ShmTracker() { stop(); }

void ShmTracker::stop() {
  boost::system::error_code ignored;
  m_inotify.close(ignored);
}

void ShmTracker::read_events() {
  m_inotify.async_read_some(boost::asio::buffer(m_buffer), [this](boost::system::error_code ec, std::size_t n) {
    if (ec) return;
    handle_events(m_buffer.data(), n);
    read_events();
  });
}

void ShmTracker::drain() {
  if (!m_inotify.is_open()) return;
  alignas(inotify_event) std::array<char, 16384> buffer;
  while (true) {
    const ssize_t n = ::read(m_inotify.native_handle(), buffer.data(), buffer.size());
    if (n <= 0) return;  // EAGAIN: nothing queued
    handle_events(buffer.data(), static_cast<std::size_t>(n));
  }
}

void ShmTracker::handle_events(const char* data, std::size_t n) {
  for (std::size_t off = 0; off + sizeof(inotify_event) <= n;) {
    inotify_event ev{};
    std::memcpy(&ev, data + off, sizeof ev);
    if (ev.mask & IN_Q_OVERFLOW) spdlog::debug("inotify queue overflowed; {} is scanned again at exit", m_dir);
    if (ev.len > 0 && !(ev.mask & IN_ISDIR)) {
      consider(std::string(data + off + sizeof ev, ::strnlen(data + off + sizeof ev, ev.len)));
    }
    off += sizeof ev + ev.len;
  }
}

void ShmTracker::consider(const std::string& name) {
  if (m_names.count(name)) return;
  const auto pid = shm_creator_pid(name);
  if (!pid || !attributable(*pid)) return;
  const auto ino = inode_of(m_dir, name);
  if (!ino) return;  // already unlinked
  m_names.emplace(name, *ino);
  if (m_on_remembered) m_on_remembered(name, *ino);
}

bool ShmTracker::attributable(pid_t creator) {
  const auto now = read_proc_stat(creator);
  const auto known = m_creators.find(creator);
  if (known != m_creators.end()) {
    // Gone since it was confirmed, or still the same process: the job's. A different start
    // time means the pid now names someone else, who must be checked afresh.
    if (!now || now->start_time == known->second) return true;
    m_creators.erase(known);
  }
  // A zombie still has its parent: rankrun's ancestry check confirms it (see drain()).
  if (!now || !m_belongs(creator)) return false;
  m_creators.emplace(creator, now->start_time);
  return true;
}

void ShmTracker::scan_existing() {
  for (const auto& [name, ino] : attributable_segments(m_dir, [this](pid_t pid) { return attributable(pid); })) {
    if (m_names.emplace(name, ino).second && m_on_remembered) m_on_remembered(name, ino);
  }
}

std::size_t ShmTracker::remove_remembered() {
  std::size_t removed = 0;
  for (const auto& [name, ino] : m_names) removed += remove_segment(m_dir, name, ino) ? 1 : 0;
  m_names.clear();
  return removed;
}

}  // namespace rankrun::launcher
