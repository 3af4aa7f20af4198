#include "base/read_file.hpp"
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

struct SegmentFile {
  ino_t inode = 0;
  uid_t owner = 0;
};

std::optional<SegmentFile> stat_segment(const std::string& dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(AT_FDCWD, (dir + "/" + name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
    return std::nullopt;
  }
  return SegmentFile{st.st_ino, st.st_uid};
}

std::optional<std::uint64_t> pid_namespace_of(const std::string& proc_dir) {
  struct stat st {};
  if (::stat((proc_dir + "/ns/pid").c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_ino);
}

}  // namespace

std::optional<std::uint64_t> own_pid_namespace() { return pid_namespace_of("/proc/self"); }

std::optional<ShmCreator> read_shm_creator(pid_t pid, const ShmTracker::Belongs& belongs) {
  ShmCreator c;
  c.in_job = belongs(pid);
  if (!c.in_job) return c;  // most segments on a shared host: read nothing more
  const std::string proc_dir = "/proc/" + std::to_string(pid);
  const auto status = read_file_head(proc_dir + "/status", 1 << 16);
  if (!status) return std::nullopt;  // gone meanwhile
  const auto id = parse_proc_status(*status);
  c.uid = id.fsuid;
  c.own_pid = id.own_pid;
  c.pid_ns = pid_namespace_of(proc_dir);
  return c;
}

std::map<std::string, ino_t> attributable_segments(
    const std::string& dir, const ShmTracker::CreatorOf& creator_of, std::optional<std::uint64_t> pid_ns,
    const std::function<void(const std::string&, uid_t, ShmVerdict, const ShmCreator&)>& on_left) {
  std::map<std::string, ino_t> found;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return found;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    const auto pid = shm_creator_pid(name);
    if (!pid) continue;
    const auto creator = creator_of(*pid);
    if (!creator || !creator->in_job) continue;
    const auto file = stat_segment(dir, name);
    if (!file) continue;
    const auto verdict = judge_segment(name, file->owner, creator, pid_ns);
    if (verdict == ShmVerdict::Remove) {
      found.emplace(name, file->inode);
    } else if (on_left) {
      on_left(name, file->owner, verdict, *creator);
    }
  }
  return found;
}

bool remove_segment(const std::string& dir, const std::string& name, ino_t inode) {
  const auto now = stat_segment(dir, name);
  if (!now || now->inode != inode) return false;
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

ShmTracker::ShmTracker(boost::asio::io_context& io, std::string dir, int watch_fd, Belongs belongs,
                       OnRemembered on_remembered)
    : m_dir(std::move(dir)),
      m_pid_ns(own_pid_namespace()),
      m_belongs(std::move(belongs)),
      m_on_remembered(std::move(on_remembered)),
      m_inotify(io) {
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
  if (!pid) return;
  const auto creator = creator_of(*pid);
  if (!creator || !creator->in_job) return;
  const auto file = stat_segment(m_dir, name);
  if (!file) return;  // already unlinked
  const auto verdict = judge_segment(name, file->owner, creator, m_pid_ns);
  if (verdict != ShmVerdict::Remove) {
    left(name, file->owner, verdict, *creator);
    return;
  }
  m_names.emplace(name, file->inode);
  if (m_on_remembered) m_on_remembered(name, file->inode);
}

std::optional<ShmCreator> ShmTracker::creator_of(pid_t pid) {
  const auto now = read_proc_stat(pid);
  const auto known = m_creators.find(pid);
  if (known != m_creators.end()) {
    // Gone since it was confirmed, or still the same process: the job's. A different start
    // time means the pid now names someone else, who must be checked afresh.
    if (!now || now->start_time == known->second.start_time) return known->second.facts;
    m_creators.erase(known);
  }
  // A zombie still has its parent: rankrun's ancestry check confirms it (see drain()).
  if (!now) return std::nullopt;
  auto facts = read_shm_creator(pid, m_belongs);
  if (facts && facts->in_job) m_creators.emplace(pid, Confirmed{now->start_time, *facts});
  return facts;
}

void ShmTracker::left(const std::string& name, uid_t owner, ShmVerdict verdict, const ShmCreator& creator) {
  if (!m_left.insert(name).second) return;
  spdlog::debug("{}", describe_left_segment(m_dir, name, owner, verdict, creator));
}

void ShmTracker::scan_existing() {
  const auto found = attributable_segments(
      m_dir, [this](pid_t pid) { return creator_of(pid); }, m_pid_ns,
      [this](const std::string& name, uid_t owner, ShmVerdict verdict, const ShmCreator& creator) {
        left(name, owner, verdict, creator);
      });
  for (const auto& [name, ino] : found) {
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
