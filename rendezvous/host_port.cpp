#include "rendezvous/host_port.hpp"

namespace rankrun::rendezvous {

std::string bracketed(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return std::string(host);
  return "[" + std::string(host) + "]";
}

std::string host_port(std::string_view host, std::uint32_t port) {
  return bracketed(host) + ":" + std::to_string(port);
}

}  // namespace rankrun::rendezvous
