#pragma once
// The numeric address of a socket's own end, as text. Effects.

#include <optional>
#include <string>

namespace rankrun {

/// The address the connected socket `fd` has on this host ("10.0.0.1", "fd00::1"; an IPv4 address
/// of a dual-stack socket as IPv4), or nullopt with `why` set.
std::optional<std::string> local_address_of(int fd, std::string& why);

}  // namespace rankrun
