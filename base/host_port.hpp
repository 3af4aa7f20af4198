#pragma once
// An endpoint as text, the way messages, flags and URLs write it: "10.0.0.1:29500",
// "[fd00::1]:29500" (an IPv6 address in brackets), both ways: printed and split. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rankrun {

/// `host` in brackets when it is an IPv6 address (it holds a ':'), else as it is.
std::string bracketed(std::string_view host);

/// "host:port", the host bracketed where it must be.
std::string host_port(std::string_view host, std::uint32_t port);

/// What HOST[:PORT] text holds, not yet checked as a host or a port.
struct SplitHostPort {
  enum class Problem {
    None,
    NoClosingBracket,  // "[fd00::1:29400"
    JunkAfterBracket,  // "[fd00::1]x"
  };
  std::string host;                 // without its brackets
  std::optional<std::string> port;  // the text after the port's ':' ("" for "host:"); none without one
  Problem problem = Problem::None;
};

/// "host", "host:port", "[v6]", "[v6]:port"; an IPv6 address without brackets ("fd00::1", more
/// than one ':') is a host without a port.
SplitHostPort split_host_port(std::string_view text);

/// An IPv4 address as a dual-stack socket shows it ("::ffff:10.0.0.1") as IPv4 ("10.0.0.1"); any
/// other address as it is.
std::string without_v4_mapping(std::string_view address);

}  // namespace rankrun
