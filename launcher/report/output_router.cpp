#include "launcher/report/output_router.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/base/launch_error.hpp"

namespace rankrun::launcher {
namespace {

int open_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw LaunchError("cannot create log file " + path + ": " + std::strerror(errno) + "; check --log-dir");
  return fd;
}

}  // namespace

OutputRouter::OutputRouter(Console& console, std::size_t workers) : m_console(console), m_workers(workers) {}

OutputRouter::~OutputRouter() {
  for (auto& w : m_workers) {
    close_file(w.out);
    close_file(w.err);
  }
}

void OutputRouter::open(int slot, const OutputTargets& t) {
  auto& w = m_workers.at(static_cast<std::size_t>(slot));
  close_file(w.out);
  close_file(w.err);
  w.rank = t.rank;
  w.tail.clear();
  w.out = Stream();
  w.err = Stream();
  w.out.console_fd = (t.console && (!t.redirect.out || t.tee.out)) ? 1 : -1;
  w.err.console_fd = (t.console && (!t.redirect.err || t.tee.err)) ? 2 : -1;
  if (t.redirect.out || t.tee.out) w.out.file_fd = open_log(t.rank_dir + "/stdout.log");
  if (t.redirect.err || t.tee.err) w.err.file_fd = open_log(t.rank_dir + "/stderr.log");
  w.out.open = w.err.open = true;
}

void OutputRouter::feed(int slot, StreamId id, std::string_view bytes) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = m_workers[static_cast<std::size_t>(slot)];
  auto& s = id == StreamId::Out ? w.out : w.err;
  if (s.file_fd >= 0) Console::write_all(s.file_fd, bytes);
  s.splitter.feed(bytes, [&](std::string_view line) { emit(w, id, line); });
}

void OutputRouter::close(int slot, StreamId id) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= m_workers.size()) return;
  auto& w = m_workers[static_cast<std::size_t>(slot)];
  auto& s = id == StreamId::Out ? w.out : w.err;
  s.splitter.finish([&](std::string_view line) { emit(w, id, line); });
  s.open = false;
  close_file(s);
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

void OutputRouter::emit(Worker& w, StreamId id, std::string_view line) {
  const auto& s = id == StreamId::Out ? w.out : w.err;
  if (s.console_fd >= 0) m_console.write_line(s.console_fd, w.rank, line);
  if (id == StreamId::Err) {
    w.tail.emplace_back(line.substr(0, k_tail_line_bytes));
    if (w.tail.size() > k_tail_lines) w.tail.pop_front();
  }
}

void OutputRouter::close_file(Stream& s) {
  if (s.file_fd >= 0) {
    ::close(s.file_fd);
    s.file_fd = -1;
  }
}

}  // namespace rankrun::launcher
