#pragma once
// Which process created a shared-memory segment, read from its name, and whether the segment
// is the job's to remove. Pure: the tracker (shm_tracker.hpp) gathers the facts.
//
// PyTorch names the segments of its file_system sharing strategy "torch_<pid>_<random>_<n>"
// after the process that called shm_open(), so a name attributes a segment to a process
// without trusting its size or age. Names without a creator pid are never attributed.
//
// A name is only a claim: anyone may create /dev/shm/torch_<a worker's pid>_x, and rankrun
// (root, often) must not remove another user's file on its word. A segment is the job's when
// - the pid in its name is a process of the job, as rankrun sees pids;
// - that process knows itself by that pid: it lives in rankrun's pid namespace, so the name is
//   one it could have chosen (a process in a nested namespace, or in a container that shares
//   /dev/shm, names its segments after a pid that means another process here);
// - and the file is owned by the uid that process creates files as (the workers' uid): a file
//   another user made is theirs, whatever its name says.
// A process of another pid namespace, running as the same uid and with the same pid number as
// one of the job's, cannot be told apart by name: containers avoid meeting it with a /dev/shm of
// their own (their default).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rankrun::launcher {

/// The creator's pid encoded in a /dev/shm entry name, or nullopt when the name follows no
/// known pattern.
std::optional<pid_t> shm_creator_pid(std::string_view name);

/// What rankrun found about the process a segment's name points to (by its pid as rankrun
/// sees pids), while it was alive or a zombie.
struct ShmCreator {
  bool in_job = false;                  // a process of the job
  std::optional<uid_t> uid;             // the uid the files it creates get (its fsuid)
  std::optional<pid_t> own_pid;         // its pid as it sees it itself (in its own pid namespace)
  std::optional<std::uint64_t> pid_ns;  // its pid namespace (the inode of /proc/PID/ns/pid)
};

enum class ShmVerdict {
  Remove,             // the job's: removed when the job is over
  NoCreatorPid,       // the name follows no known pattern
  NotTheJobs,         // its pid is no process of the job
  OtherPidNamespace,  // that process lives in another pid namespace: the name's pid is not its own
  OtherOwner,         // the file is owned by another uid than the one that process creates files as
  Unknown,            // that process's uid could not be read
};

/// The verdict on the segment `name`, owned by `owner`, whose named creator is `creator`
/// (nullopt: no such process); `launcher_pid_ns`: rankrun's own pid namespace, if known.
ShmVerdict judge_segment(std::string_view name, uid_t owner, const std::optional<ShmCreator>& creator,
                         std::optional<std::uint64_t> launcher_pid_ns);

/// Why a segment that names a process of the job is left, for the debug log:
/// "left /dev/shm/torch_4242_x: it is owned by uid 65534, but pid 4242 of the job creates files as uid 0".
std::string describe_left_segment(std::string_view dir, std::string_view name, uid_t owner, ShmVerdict verdict,
                                  const ShmCreator& creator);

}  // namespace rankrun::launcher
