#pragma once
// The launcher's owned file descriptor: the store layer's (rendezvous/unique_fd.hpp).

#include "rendezvous/unique_fd.hpp"

namespace rankrun::launcher {

using rankrun::UniqueFd;

}  // namespace rankrun::launcher
