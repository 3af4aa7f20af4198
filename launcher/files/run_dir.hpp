#pragma once
// The run directory of a job on this node and everything rankrun does in it:
//   attempt_<N>/<local rank>/{stdout.log, stderr.log, error.json, stacks.txt}
//   stacks/<pid>.{where, ask, pystack, stack, gdb}   the workers' stacks (hang diagnosis)
//   stacks/<pid>.failed   when the worker recorded its failure (Unix ns; rankrun's Python hook, the runtime)
//   python/sitecustomize.py                          the Python workers' start-up hook
// rankrun makes it fresh (a random name, mode 0700) in a place that keeps other users out
// (files/dir_trust.hpp: every directory from / down is root's or rankrun's user's, and none is
// writable by others without the sticky bit), keeps it open, and makes, opens, reads and removes
// everything in it relative to that descriptor: no symbolic link is followed at any step
// (O_NOFOLLOW), and a file rankrun means to create is never one already there (O_EXCL), so a
// link or a hard link planted in it is an error, never written through.
//
// The workers get paths into it (PYTHONPATH, RANKRUN_STACK_DIR, TORCHELASTIC_ERROR_FILE) and
// open them by path, at start and on every restart. Those paths stay rankrun's for the whole
// job because no other user may rename the run directory or any directory above it: that is
// what the check of the place guarantees, and why a place that fails it is refused rather than
// worked around.

#include <sys/types.h>

#include <cstdint>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/types/launch_error.hpp"
#include "launcher/files/dir_trust.hpp"
#include "base/unique_fd.hpp"

namespace rankrun::launcher {

/// RunDir::create()'s refusal of a place (a LaunchError: exit 2), with its parts.
struct PlaceRefused : LaunchError {
  explicit PlaceRefused(DirProblem p) : LaunchError(p.message()), problem(std::move(p)) {}
  DirProblem problem;
};

class RunDir {
 public:
  /// Checks `place.base` and every directory above it, makes what is missing of it (mode
  /// 0755, each new directory checked in turn), then makes a fresh `<prefix>XXXXXX` below it,
  /// mode 0700. Throws LaunchError, naming the directory and the fix, when a directory on the
  /// way lets another user in (untrusted_dir(); nothing is made below it then), or when the run
  /// directory cannot be made.
  static std::unique_ptr<RunDir> create(const RunDirPlace& place, const std::string& prefix);
  /// Removes the run directory and everything in it, unless kept.
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  /// Absolute, with no symbolic link in it: the path the workers are given.
  const std::string& path() const { return m_path; }
  /// The open run directory, for the *_below() functions.
  int fd() const { return m_fd.get(); }
  /// Whether the directory stays when rankrun exits (--log-dir, --redirects, --tee).
  void keep(bool keep) { m_keep = keep; }
  bool kept() const { return m_keep; }

 private:
  RunDir(UniqueFd parent, std::string name, UniqueFd fd, std::string path)
      : m_parent(std::move(parent)), m_name(std::move(name)), m_fd(std::move(fd)), m_path(std::move(path)) {}

  UniqueFd m_parent;  // the place it was made in, for its removal
  std::string m_name;
  UniqueFd m_fd;
  std::string m_path;
  bool m_keep = false;
};

/// The check of RunDir::create() (rankrun --check): the refusal, or nullopt. Directories that do
/// not exist yet pass (rankrun would make them itself); with `make_missing` they are made, as
/// RunDir::create() makes them (mode 0755), and checked.
std::optional<DirProblem> check_run_dir_place(const RunDirPlace& place, bool make_missing = false);

// Below an open directory `dir`, `rel` is a relative path of plain names ("attempt_0/1/stdout.log";
// no "..", no leading "/"). Each directory on the way and the last name are opened without
// following a symbolic link: a link anywhere fails (ELOOP or ENOTDIR).

/// openat() of `rel` with `flags` (O_NOFOLLOW and O_CLOEXEC added); an empty UniqueFd with
/// errno set when it cannot be opened.
UniqueFd open_below(int dir, std::string_view rel, int flags, mode_t mode = 0);
/// mkdir -p of `rel` (each new directory `mode`): 0, or the errno that stopped it.
int make_dirs_below(int dir, std::string_view rel, mode_t mode);
/// Removes `rel` and everything below it (links are removed, never followed): 0 (also when
/// there was nothing to remove), or the errno that stopped it.
int remove_below(int dir, std::string_view rel);
/// The regular file `rel`, at most `max_bytes` of it; nullopt when it is missing, unreadable or
/// not a regular file (a FIFO planted there is not waited on).
std::optional<std::string> read_below(int dir, std::string_view rel, std::size_t max_bytes = 1 << 20);

/// Worker `pid`'s record of when it failed (Unix ns), from `<stacks>/<pid>.failed` below `dir`
/// (`stacks`: "stacks/" from the run directory, "" from the stacks directory itself).
std::optional<std::int64_t> read_failure_record(int dir, std::string_view stacks, pid_t pid);
/// Whether `rel` exists (a link there counts, and is not followed).
bool exists_below(int dir, std::string_view rel);
/// Creates `rel`, which must not exist yet (O_EXCL), and writes `text` to it whole: 0, or the
/// errno that stopped it.
int write_new_below(int dir, std::string_view rel, std::string_view text, mode_t mode);

}  // namespace rankrun::launcher
