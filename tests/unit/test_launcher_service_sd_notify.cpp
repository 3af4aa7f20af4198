// The notify protocol against real AF_UNIX datagram sockets: a path in a temp dir and an
// abstract one, as systemd gives them in $NOTIFY_SOCKET.

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "launcher/service/sd_notify.hpp"

using namespace rankrun::launcher;

namespace {

// A bound datagram socket; `address` is what NOTIFY_SOCKET would hold.
struct Receiver {
  explicit Receiver(const std::string& addr) : address(addr) {
    fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, addr.data(), addr.size());
    const bool abstract = addr[0] == '@';
    if (abstract) sa.sun_path[0] = '\0';
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + addr.size() + (abstract ? 0 : 1));
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0);
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Receiver() { ::close(fd); }
  std::string receive() const {
    char buf[4096];
    const auto n = ::recv(fd, buf, sizeof(buf), 0);
    return n < 0 ? std::string("<nothing>") : std::string(buf, static_cast<std::size_t>(n));
  }
  std::string address;
  int fd = -1;
};

struct EnvVar {
  EnvVar(const char* n, const char* v) : name(n) {
    if (const char* old = std::getenv(n)) saved = old;
    if (v) {
      ::setenv(n, v, 1);
    } else {
      ::unsetenv(n);
    }
  }
  ~EnvVar() {
    if (saved) {
      ::setenv(name, saved->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  const char* name;
  std::optional<std::string> saved;
};

}  // namespace

TEST_CASE("sd_notify: a socket path from NOTIFY_SOCKET") {
  std::string dir = (std::filesystem::temp_directory_path() / "rankrun-notify-XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  {
    Receiver r(dir + "/notify");
    EnvVar socket("NOTIFY_SOCKET", r.address.c_str());
    EnvVar usec("WATCHDOG_USEC", "4000000");
    EnvVar pid("WATCHDOG_PID", std::to_string(::getpid()).c_str());
    auto n = SdNotifier::from_environment();
    CHECK(n.enabled());
    CHECK(n.watchdog_interval() == std::chrono::microseconds(2000000));
    CHECK(n.send("READY=1\nSTATUS=running"));
    CHECK(r.receive() == "READY=1\nSTATUS=running");
    CHECK(n.send("WATCHDOG=1"));
    CHECK(r.receive() == "WATCHDOG=1");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("sd_notify: an abstract socket ('@')") {
  const std::string name = "@rankrun-notify-test-" + std::to_string(::getpid());
  Receiver r(name);
  EnvVar socket("NOTIFY_SOCKET", name.c_str());
  EnvVar usec("WATCHDOG_USEC", "4000000");
  EnvVar pid("WATCHDOG_PID", "1");  // another process's watchdog
  auto n = SdNotifier::from_environment();
  CHECK(n.enabled());
  CHECK(n.watchdog_interval() == std::nullopt);
  CHECK(n.send("STOPPING=1"));
  CHECK(r.receive() == "STOPPING=1");
}

TEST_CASE("sd_notify: nothing without NOTIFY_SOCKET, a failure for a socket nobody binds") {
  {
    EnvVar socket("NOTIFY_SOCKET", nullptr);
    auto n = SdNotifier::from_environment();
    CHECK_FALSE(n.enabled());
    CHECK(n.send("READY=1"));
  }
  SdNotifier missing("/nonexistent-dir-rankrun/notify");
  CHECK_FALSE(missing.send("READY=1"));
  SdNotifier relative("relative/path");
  CHECK_FALSE(relative.send("READY=1"));
}
