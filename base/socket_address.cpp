#include "base/socket_address.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "base/host_port.hpp"

namespace rankrun {

std::optional<std::string> local_address_of(int fd, std::string& why) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    why = std::string("getsockname failed: ") + std::strerror(errno);
    return std::nullopt;
  }
  char text[NI_MAXHOST] = {};
  if (const int rc =
          ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, text, sizeof(text), nullptr, 0, NI_NUMERICHOST);
      rc != 0) {
    why = std::string("getnameinfo failed on the local address: ") + ::gai_strerror(rc);
    return std::nullopt;
  }
  return without_v4_mapping(text);
}

}  // namespace rankrun
