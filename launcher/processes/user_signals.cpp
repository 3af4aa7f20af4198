#include "launcher/processes/user_signals.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/read.hpp>
#include <cerrno>
#include <stdexcept>

namespace rankrun::launcher {
namespace {

std::atomic<int> g_write_fd{-1};

void on_signal(int signo, siginfo_t* info, void*) {
  const int saved = errno;
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    struct {
      int signo;
      pid_t sender;
    } record{signo, info ? info->si_pid : 0};
    // A full pipe (a flood of signals) drops the record: the same signal again adds nothing.
    [[maybe_unused]] const auto n = ::write(fd, &record, sizeof(record));
  }
  errno = saved;
}

}  // namespace

UserSignals::UserSignals(boost::asio::io_context& io, std::vector<int> signals, Handler handler)
    : m_signals(std::move(signals)), m_handler(std::move(handler)), m_read(io) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("pipe2 failed");
  m_write_fd = fds[1];
  m_read.assign(fds[0]);
  g_write_fd = m_write_fd;
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : m_signals) ::sigaction(s, &sa, nullptr);
  read();
}

UserSignals::~UserSignals() {
  stop();
  if (m_write_fd >= 0) ::close(m_write_fd);
}

void UserSignals::stop(bool ignore) {
  if (m_stopped) return;
  m_stopped = true;
  struct sigaction sa {};
  sa.sa_handler = ignore ? SIG_IGN : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int s : m_signals) ::sigaction(s, &sa, nullptr);
  g_write_fd = -1;
  boost::system::error_code ignored;
  m_read.cancel(ignored);
  m_read.close(ignored);
}

void UserSignals::read() {
  boost::asio::async_read(m_read, boost::asio::buffer(&m_record, sizeof(m_record)),
                          [this](boost::system::error_code ec, std::size_t) {
                            if (ec || m_stopped) return;
                            m_handler(m_record.signo, m_record.sender);
                            if (!m_stopped) read();
                          });
}

void ignore_broken_pipes() { ::signal(SIGPIPE, SIG_IGN); }

void block_continue_signal() noexcept {
  sigset_t cont;
  sigemptyset(&cont);
  sigaddset(&cont, SIGCONT);
  ::pthread_sigmask(SIG_BLOCK, &cont, nullptr);
}

void ignore_terminal_signals() {
  for (int sig : {SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) ::signal(sig, SIG_IGN);
}

void default_signals_for_exec() noexcept {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
}

}  // namespace rankrun::launcher
