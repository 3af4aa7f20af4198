#pragma once
// Which process created a shared-memory segment, read from its name. Pure.
//
// PyTorch names the segments of its file_system sharing strategy "torch_<pid>_<random>_<n>"
// after the process that called shm_open(), so a name attributes a segment to a process
// without trusting its owner, size or age. Names without a creator pid are never attributed.

#include <sys/types.h>

#include <optional>
#include <string_view>

namespace rankrun::launcher {

/// The creator's pid encoded in a /dev/shm entry name, or nullopt when the name follows no
/// known pattern.
std::optional<pid_t> shm_creator_pid(std::string_view name);

}  // namespace rankrun::launcher
