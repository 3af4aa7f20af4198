#pragma once
// An endpoint as text, the way messages, flags and URLs write it: "10.0.0.1:29500",
// "[fd00::1]:29500" (an IPv6 address in brackets). Pure.

#include <cstdint>
#include <string>
#include <string_view>

namespace rankrun::rendezvous {

/// `host` in brackets when it is an IPv6 address (it holds a ':'), else as it is.
std::string bracketed(std::string_view host);

/// "host:port", the host bracketed where it must be.
std::string host_port(std::string_view host, std::uint32_t port);

}  // namespace rankrun::rendezvous
