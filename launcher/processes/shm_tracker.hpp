#pragma once
// Remembers the /dev/shm segments the job's processes create, and removes the ones still there
// when the job is over.
//
// A segment belongs to the job when the pid in its name (shm_names.hpp) is, at the moment the
// segment appears, a live process of the job. inotify reports each creation while the job
// runs; the check runs then, while the creator is most likely alive, and a name is remembered
// with its inode so that a file of the same name made later by someone else is never removed.
// A creator once confirmed is remembered with its start time: its later segments still count
// after it has exited (a DataLoader worker shut down right after making a batch), as long as
// its pid has not been taken by another process since. Segments whose creator cannot be
// confirmed are left alone.

#include <sys/types.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <map>
#include <string>

namespace rankrun::launcher {

/// Where shm_open() puts POSIX shared memory on Linux.
inline constexpr const char* k_shm_dir = "/dev/shm";

class ShmTracker {
 public:
  using Belongs = std::function<bool(pid_t)>;
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
  bool attributable(pid_t creator);

  std::string m_dir;
  Belongs m_belongs;
  OnRemembered m_on_remembered;
  boost::asio::posix::stream_descriptor m_inotify;
  std::array<char, 16384> m_buffer{};
  std::map<std::string, ino_t> m_names;
  std::map<pid_t, unsigned long long> m_creators;  // confirmed job processes -> start time
};

/// The segment names in `dir` whose creator is alive and `belongs`, with their inodes.
std::map<std::string, ino_t> attributable_segments(const std::string& dir, const ShmTracker::Belongs& belongs);
/// Unlinks `name` in `dir` if it is still the file with `inode`.
bool remove_segment(const std::string& dir, const std::string& name, ino_t inode);

}  // namespace rankrun::launcher
