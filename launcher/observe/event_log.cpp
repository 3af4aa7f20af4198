#include "launcher/observe/event_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "launcher/types/launch_error.hpp"
#include "launcher/observe/job_status.hpp"

namespace rankrun::launcher::observe {

namespace {

// The queue's bounds: a job's events are a few per worker and attempt; a log that cannot keep
// up loses the newest, counted.
constexpr std::size_t k_max_queued_lines = 4096;
constexpr std::size_t k_max_queued_bytes = 4u << 20;

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

FileWriter::FileWriter(const std::string& events, const std::string& textfile, bool console) {
  auto& st = *m_state;
  st.textfile = textfile;
  if (console) st.console_fd = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  if (!events.empty()) {
    st.events_fd = ::open(events.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (st.events_fd < 0) {
      throw LaunchError(
          fmt::format("--events={}: cannot open it for appending: {}; give a file in a writable directory", events,
                      std::strerror(errno)));
    }
  }
  if (!textfile.empty()) {
    const auto parent = std::filesystem::path(textfile).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0) {
      throw LaunchError(
          fmt::format("--metrics-textfile={}: {} is not a writable directory; give a path in "
                      "node_exporter's --collector.textfile.directory",
                      textfile, dir));
    }
  }
  if (st.events_fd >= 0 || st.console_fd >= 0 || !st.textfile.empty())
    m_thread = std::thread([state = m_state] { state->run(); });
}

FileWriter::~FileWriter() { close(0); }

FileWriter::State::~State() {
  if (events_fd >= 0) ::close(events_fd);
  if (console_fd >= 0) ::close(console_fd);
}

void FileWriter::event(std::string line) {
  auto& st = *m_state;
  if (st.events_fd < 0 && st.console_fd < 0) return;
  {
    std::lock_guard lock(st.mutex);
    if (st.stopping || st.queue.size() >= k_max_queued_lines ||
        st.queued_bytes + line.size() + 1 > k_max_queued_bytes) {
      ++st.dropped;
      return;
    }
    line += '\n';
    st.queued_bytes += line.size();
    st.queue.push_back(std::move(line));
  }
  st.cv.notify_all();
}

void FileWriter::textfile(std::string content) {
  auto& st = *m_state;
  if (st.textfile.empty()) return;
  {
    std::lock_guard lock(st.mutex);
    if (st.stopping) return;
    st.next_textfile = std::make_unique<std::string>(std::move(content));
  }
  st.cv.notify_all();
}

std::uint64_t FileWriter::close(double seconds) {
  auto& st = *m_state;
  if (!m_thread.joinable()) {
    std::lock_guard lock(st.mutex);
    return st.dropped;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t dropped = 0;
  {
    std::unique_lock lock(st.mutex);
    // Time for the queue to empty; then whatever is left is dropped.
    st.cv.wait_until(lock, deadline, [&st] { return st.queue.empty() && !st.next_textfile; });
    st.stopping = true;
    st.dropped += st.queue.size();
    st.queue.clear();
    st.queued_bytes = 0;
    dropped = st.dropped;
  }
  st.cv.notify_all();
  // A write blocked on a stuck file system is not waited for: the thread finishes alone.
  m_thread.detach();
  return dropped;
}

void FileWriter::State::write_textfile(const std::string& content) {
  // node_exporter reads *.prom files: written whole beside it, then renamed over it.
  const std::string part = textfile + ".part";
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return;
  const bool ok = write_all(fd, content);
  ::close(fd);
  if (ok)
    ::rename(part.c_str(), textfile.c_str());
  else
    ::unlink(part.c_str());
}

void FileWriter::State::run() {
  std::unique_lock lock(mutex);
  for (;;) {
    cv.wait(lock, [this] { return stopping || !queue.empty() || next_textfile; });
    if (stopping) return;
    if (next_textfile) {
      auto content = std::move(next_textfile);
      lock.unlock();
      write_textfile(*content);
      lock.lock();
      cv.notify_all();
      continue;
    }
    std::string batch;
    std::size_t lines = 0;
    // Lines that could not be written before: said once there is room again.
    if (dropped > dropped_told) {
      batch = json_text({{"schema", k_schema}, {"type", "dropped"}, {"events", dropped - dropped_told}}) + "\n";
    }
    while (!queue.empty()) {
      batch += queue.front();
      queued_bytes -= queue.front().size();
      queue.pop_front();
      ++lines;
    }
    const std::uint64_t told = dropped;
    lock.unlock();
    // The console is a courtesy copy: only the file's failures count as lost events.
    if (console_fd >= 0) write_all(console_fd, batch);
    const bool ok = events_fd < 0 || write_all(events_fd, batch);
    lock.lock();
    if (ok)
      dropped_told = told;
    else
      dropped += lines;  // a full disk: counted, and said when there is room
    cv.notify_all();
  }
}

}  // namespace rankrun::launcher::observe
