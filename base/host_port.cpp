#include "base/host_port.hpp"

namespace rankrun {

std::string bracketed(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return std::string(host);
  return "[" + std::string(host) + "]";
}

std::string host_port(std::string_view host, std::uint32_t port) {
  return bracketed(host) + ":" + std::to_string(port);
}

SplitHostPort split_host_port(std::string_view text) {
  SplitHostPort out;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) {
      out.problem = SplitHostPort::Problem::NoClosingBracket;
      return out;
    }
    out.host = std::string(text.substr(1, close - 1));
    const auto rest = text.substr(close + 1);
    if (rest.empty()) return out;
    if (rest.front() != ':') {
      out.problem = SplitHostPort::Problem::JunkAfterBracket;
      return out;
    }
    out.port = std::string(rest.substr(1));
    return out;
  }
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || text.find(':') != colon) {
    out.host = std::string(text);
    return out;
  }
  out.host = std::string(text.substr(0, colon));
  out.port = std::string(text.substr(colon + 1));
  return out;
}

std::string without_v4_mapping(std::string_view address) {
  constexpr std::string_view k_mapped = "::ffff:";
  if (address.substr(0, k_mapped.size()) == k_mapped && address.find('.') != std::string_view::npos) {
    return std::string(address.substr(k_mapped.size()));
  }
  return std::string(address);
}

}  // namespace rankrun
