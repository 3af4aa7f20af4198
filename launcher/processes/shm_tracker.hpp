#pragma once
// Remembers the /dev/shm segments the job's processes create, and removes the ones still there
// when the job is over.
//
// A segment belongs to the job when the pid in its name (shm_names.hpp) is, at the moment the
// segment appears, a live process of the job that lives in rankrun's pid namespace, and the
// file is owned by the uid that process creates files as (judge_segment()). inotify reports
// each creation while the job runs; the check runs then, while the creator is most likely
// alive, and a name is remembered with its inode so that a file of the same name made later by
// someone else is never removed. A creator once confirmed is remembered with its start time
// and what was read about it: its later segments still count after it has exited (a DataLoader
// worker shut down right after making a batch), as long as its pid has not been taken by
// another process since. Segments whose creator cannot be confirmed are left alone; those that
// name a process of the job but fail the other checks (another user's file) are left and said
// at debug level, once each.

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "launcher/processes/shm_names.hpp"

namespace rankrun::launcher {

/// Where shm_open() puts POSIX shared memory on Linux.
inline constexpr const char* k_shm_dir = "/dev/shm";

class ShmTracker {
 public:
  using Belongs = std::function<bool(pid_t)>;
  /// What is known of the process a name points to; nullopt: no such process.
  using CreatorOf = std::function<std::optional<ShmCreator>(pid_t)>;
  using OnRemembered = std::function<void(const std::string& name, ino_t inode)>;

  /// An inotify instance watching `dir` for new files; -1 (logged at debug level) when inotify
  /// is unavailable. Made before the guardian is forked, so that the guardian can hold a copy.
  static int open_watch(const std::string& dir);

  /// Reads `watch_fd` (from open_watch(), owned from now on; -1: none) on `io`. Without inotify
  /// it still works from scan_existing().
  ShmTracker(boost::asio::io_context& io, std::string dir, int watch_fd, Belongs belongs, OnRemembered on_remembered);
  ~ShmTracker();
  ShmTracker(const ShmTracker&) = delete;
  ShmTracker& operator=(const ShmTracker&) = delete;

  /// Attributes the segments in `dir` now whose creator is alive and in the job: catches what
  /// inotify missed (queue overflow). Call before the job's processes are killed.
  void scan_existing();
  /// Unlinks every remembered segment that is still the same file; returns how many.
  std::size_t remove_remembered();
  /// Handles the creations already queued, at once. Called before rankrun reaps a child: a
  /// creator that has exited is then still a zombie in /proc, so it can still be confirmed.
  void drain();
  /// Stops watching (so that io_context::run() can return); what is remembered stays.
  void stop();

 private:
  void read_events();
  void handle_events(const char* data, std::size_t n);
  void consider(const std::string& name);
  std::optional<ShmCreator> creator_of(pid_t pid);
  void left(const std::string& name, uid_t owner, ShmVerdict verdict, const ShmCreator& creator);

  std::string m_dir;
  std::optional<std::uint64_t> m_pid_ns;  // rankrun's own pid namespace
  Belongs m_belongs;
  OnRemembered m_on_remembered;
  boost::asio::posix::stream_descriptor m_inotify;
  std::array<char, 16384> m_buffer{};
  std::map<std::string, ino_t> m_names;
  struct Confirmed {
    unsigned long long start_time = 0;
    ShmCreator facts;
  };
  std::map<pid_t, Confirmed> m_creators;  // confirmed job processes
  std::set<std::string> m_left;           // segments left and said so
};

/// rankrun's own pid namespace (the inode of /proc/self/ns/pid); nullopt when unreadable.
std::optional<std::uint64_t> own_pid_namespace();

/// What /proc says now of `pid`, named by a segment: whether it `belongs` to the job, the uid it
/// creates files as, its own pid and its pid namespace. nullopt: no such process.
std::optional<ShmCreator> read_shm_creator(pid_t pid, const ShmTracker::Belongs& belongs);

/// The segment names in `dir` that are the job's (judge_segment(), with `creator_of` and rankrun's
/// pid namespace `pid_ns`), with their inodes. `on_left`, if set, hears of each segment that
/// names a process of the job but is left.
std::map<std::string, ino_t> attributable_segments(
    const std::string& dir, const ShmTracker::CreatorOf& creator_of, std::optional<std::uint64_t> pid_ns,
    const std::function<void(const std::string& name, uid_t owner, ShmVerdict, const ShmCreator&)>& on_left = {});
/// Unlinks `name` in `dir` if it is still the file with `inode`.
bool remove_segment(const std::string& dir, const std::string& name, ino_t inode);

}  // namespace rankrun::launcher
