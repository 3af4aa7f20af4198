#include "launcher/report/output_router.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>
#include <utility>

#include "launcher/types/launch_error.hpp"
#include "launcher/report/line_splitter.hpp"

namespace rankrun::launcher {
namespace {

// A new file (O_EXCL) in the rank's directory, reached without following a link.
int open_log(int dir, const char* name, const std::string& path) {
  const int fd = ::openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    throw LaunchError("cannot create log file " + path + ": " + std::strerror(error) + "; check --log-dir");
  }
  return fd;
}

}  // namespace

OutputRouter::OutputRouter(Console& console, std::size_t workers) : m_console(console), m_workers(workers) {}

OutputRouter::~OutputRouter() {
  for (auto& w : m_workers) {
    close_file(w, StreamId::Out, w.out);
    close_file(w, StreamId::Err, w.err);
  }
  close_filtered(m_filtered_out);
  close_filtered(m_filtered_err);
}

void OutputRouter::set_filters(std::vector<std::string> out, std::vector<std::string> err) {
  m_filtered_out.filters = std::move(out);
  m_filtered_err.filters = std::move(err);
}

void OutputRouter::open_filtered(int attempt_dir_fd, const std::string& attempt_dir) {
  for (auto* f : {&m_filtered_out, &m_filtered_err}) {
    close_filtered(*f);
    if (f->filters.empty()) continue;
    const char* name = f == &m_filtered_out ? "filtered_stdout.log" : "filtered_stderr.log";
    f->file = attempt_dir + "/" + name;
    f->fd = open_log(attempt_dir_fd, name, f->file);
  }
}

void OutputRouter::close_filtered(Filtered& f) {
  if (f.fd >= 0) ::close(std::exchange(f.fd, -1));
}

void OutputRouter::filter(const Worker& w, Filtered& f, std::string_view line) {
  if (f.fd < 0) return;
  bool match = false;
  for (const auto& needle : f.filters) match = match || line.find(needle) != std::string_view::npos;
  if (!match) return;
  std::string text = w.prefix.empty() ? m_console.plain_prefix(w.rank) : w.prefix;
  text.append(line);
  text += '\n';
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto n = ::write(f.fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      spdlog::warn("cannot write {}: {}; its filtered lines are written no more", f.file,
                   std::strerror(n < 0 ? errno : EIO));
      close_filtered(f);
      return;
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

void OutputRouter::open(int slot, const OutputTargets& t) {
  auto& w = m_workers.at(static_cast<std::size_t>(slot));
  close_file(w, StreamId::Out, w.out);
  close_file(w, StreamId::Err, w.err);
  w.rank = t.rank;
  w.prefix = t.prefix;
  w.teed_out = t.tee.out;
  w.teed_err = t.tee.err;
  w.tail.clear();
  w.out = Stream();
  w.err = Stream();
  w.out.console_fd = (t.console && (!t.redirect.out || t.tee.out)) ? 1 : -1;
  w.err.console_fd = (t.console && (!t.redirect.err || t.tee.err)) ? 2 : -1;
  if (t.redirect.out || t.tee.out) {
    w.out.file = t.rank_dir + "/stdout.log";
    w.out.file_fd = open_log(t.rank_dir_fd, "stdout.log", w.out.file);
  }
  if (t.redirect.err || t.tee.err) {
    w.err.file = t.rank_dir + "/stderr.log";
    w.err.file_fd = open_log(t.rank_dir_fd, "stderr.log", w.err.file);
  }
  w.out.open = w.err.open = true;
}

void OutputRouter::feed(int slot, StreamId id, std::string_view bytes) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = m_workers[static_cast<std::size_t>(slot)];
  auto& s = id == StreamId::Out ? w.out : w.err;
  if (s.file_fd >= 0) write_file(w, id, s, bytes);
  s.splitter.feed(
      bytes, [&](std::string_view line) { emit(w, id, line); },
      [&](std::string_view update) { progress(w, s, update); });
}

void OutputRouter::close(int slot, StreamId id) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = m_workers[static_cast<std::size_t>(slot)];
  auto& s = id == StreamId::Out ? w.out : w.err;
  s.splitter.finish([&](std::string_view line) { emit(w, id, line); });
  s.open = false;
  close_file(w, id, s);
}

bool OutputRouter::any_open() const {
  for (const auto& w : m_workers) {
    if (w.out.open || w.err.open) return true;
  }
  return false;
}

bool OutputRouter::is_open(int slot, StreamId id) const {
  const auto& w = m_workers.at(static_cast<std::size_t>(slot));
  return (id == StreamId::Out ? w.out : w.err).open;
}

void OutputRouter::progress(Worker& w, Stream& s, std::string_view update) {
  if (s.console_fd < 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (s.progress_shown != std::chrono::steady_clock::time_point{} && now - s.progress_shown < k_progress_every) return;
  s.progress_shown = now;
  m_console.write_line(s.console_fd, w.rank, update, ConsoleOrigin::Worker, w.prefix);
}

void OutputRouter::emit(Worker& w, StreamId id, std::string_view line) {
  auto& s = id == StreamId::Out ? w.out : w.err;
  s.progress_shown = {};
  if (s.console_fd >= 0) m_console.write_line(s.console_fd, w.rank, line, ConsoleOrigin::Worker, w.prefix);
  if (id == StreamId::Out ? w.teed_out : w.teed_err)
    filter(w, id == StreamId::Out ? m_filtered_out : m_filtered_err, line);
  if (id == StreamId::Err) {
    w.tail.emplace_back(without_own_rank_tag(line, w.rank).substr(0, k_tail_line_bytes));
    if (w.tail.size() > k_tail_lines) w.tail.pop_front();
  }
}

void OutputRouter::write_file(const Worker& w, StreamId id, Stream& s, std::string_view bytes) {
  while (!bytes.empty()) {
    const auto n = ::write(s.file_fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      file_failed(w, id, s, n < 0 ? errno : EIO);
      return;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void OutputRouter::close_file(const Worker& w, StreamId id, Stream& s) {
  if (s.file_fd < 0) return;
  const int fd = std::exchange(s.file_fd, -1);
  // A file system that defers its errors (NFS) reports them here. EINTR: closed all the same.
  if (::close(fd) != 0 && errno != EINTR) file_failed(w, id, s, errno);
}

// Once per file: the rest of the stream would fail the same way, and the worker must not
// notice (the console goes on; with --redirects the rest of the stream is lost).
void OutputRouter::file_failed(const Worker& w, StreamId id, Stream& s, int error) {
  spdlog::error("cannot write {}: {}; rank {}'s {} is no longer written to it", s.file, std::strerror(error), w.rank,
                id == StreamId::Out ? "stdout" : "stderr");
  if (s.file_fd >= 0) ::close(std::exchange(s.file_fd, -1));
}

}  // namespace rankrun::launcher
