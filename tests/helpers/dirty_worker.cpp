// A worker that leaves everything behind, for the cleanup tests. It ignores SIGTERM, creates
// /dev/shm segments named like PyTorch's ("torch_<pid>_<n>_<i>"), listens on a TCP port, and
// starts a daemon (setsid plus double fork, stdio on /dev/null) that does the same. Lines:
//   daemon pid=P port=N shm=NAME      (from the daemon, before it lets go of stdout)
//   dirty pid=P port=N shm=A,B        (from the worker, once the daemon is ready)
// then:
//   dirty_worker exit CODE            exit with CODE (the segments and the daemon stay)
//   dirty_worker exit-if-rank R CODE  rank R exits with CODE, the others sleep
//   dirty_worker sleep                sleep until killed
//   dirty_worker outsider             no daemon, no port: one segment, then sleep (run
//                                     outside any job, to show its segment is left alone)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

namespace {

std::string make_segment(int index) {
  const std::string name = "torch_" + std::to_string(::getpid()) + "_" + std::to_string(::time(nullptr) % 100000) +
                           "_" + std::to_string(index);
  const int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ::ftruncate(fd, 4096) != 0) {
    std::perror("shm_open");
    std::exit(70);
  }
  ::close(fd);
  return name;
}

int listen_somewhere() {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(s, 4) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("listen");
    std::exit(71);
  }
  return ntohs(addr.sin_port);
}

[[noreturn]] void sleep_forever() {
  while (true) ::pause();
}

void start_daemon() {
  int ready[2];
  if (::pipe(ready) != 0) std::exit(72);
  const pid_t middle = ::fork();
  if (middle == 0) {
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    // The daemon: parent is gone, own session, nobody's process group.
    ::close(ready[0]);
    ::signal(SIGTERM, SIG_IGN);
    const int port = listen_somewhere();
    const auto shm = make_segment(0);
    std::printf("daemon pid=%d port=%d shm=%s\n", static_cast<int>(::getpid()), port, shm.c_str());
    std::fflush(stdout);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    [[maybe_unused]] auto n = ::write(ready[1], "r", 1);
    ::close(ready[1]);
    sleep_forever();
  }
  ::close(ready[1]);
  ::waitpid(middle, nullptr, 0);
  char c = 0;
  if (::read(ready[0], &c, 1) != 1) std::exit(73);
  ::close(ready[0]);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sleep";
  if (mode == "outsider") {
    std::printf("outsider pid=%d shm=%s\n", static_cast<int>(::getpid()), make_segment(0).c_str());
    std::fflush(stdout);
    sleep_forever();
  }
  ::signal(SIGTERM, SIG_IGN);
  start_daemon();
  const int port = listen_somewhere();
  const auto a = make_segment(0);
  const auto b = make_segment(1);
  std::printf("dirty pid=%d port=%d shm=%s,%s\n", static_cast<int>(::getpid()), port, a.c_str(), b.c_str());
  std::fflush(stdout);
  if (mode == "exit" && argc > 2) return std::atoi(argv[2]);
  if (mode == "exit-if-rank" && argc > 3) {
    const char* rank = std::getenv("RANK");
    if (rank && std::atoi(rank) == std::atoi(argv[2])) {
      ::usleep(200000);  // let the other ranks report first
      return std::atoi(argv[3]);
    }
  }
  sleep_forever();
}
