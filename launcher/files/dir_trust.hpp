#pragma once
// Whether a directory on the way to rankrun's run directory keeps other users out. Pure: the
// caller stats the directories (files/run_dir.hpp).
//
// Workers reach what rankrun puts in the run directory by path: PYTHONPATH names its
// python/sitecustomize.py, which every Python worker runs at start, on every restart. A path
// names whatever is at that name when it is opened, so whoever may rename the run directory,
// or any directory above it, can put a directory of their own at the path the workers were
// given, long after rankrun checked it, and a root worker runs their code. Nobody but root and
// rankrun's own user can do that when every directory from / down to the place of the run
// directory
// - is owned by root or by rankrun's (effective) user: an owner may rename what its directory
//   holds, and chmod it;
// - and is writable by no one else (its group, others), unless it has the sticky bit: in a
//   sticky directory (/tmp) only an entry's owner, the directory's owner or root may rename or
//   remove the entry;
// and every symbolic link on the way is root's or rankrun's user's: in a sticky directory a
// link's owner may replace it, and so choose where the run directory goes (the kernel's
// fs.protected_symlinks guards this case only where it is switched on).
// The run directory itself is rankrun's, mode 0700: nothing in it is anyone else's to touch.

#include <sys/types.h>

#include <optional>
#include <string>

namespace rankrun::launcher {

/// One directory (or symbolic link) on the way to the run directory, as lstat() shows it.
struct DirFacts {
  std::string path;
  uid_t owner = 0;
  std::string owner_name;  // "" when the uid has no name
  mode_t mode = 0;         // st_mode: permissions and the sticky bit
  bool is_place = false;   // the place itself (the last on the way), not one above it
  bool link = false;       // a symbolic link the way follows
};

/// Where the run directory goes, as the user chose it.
struct RunDirPlace {
  std::string base;   // the directory the run directory is made in (--log-dir, $TMPDIR or /tmp)
  std::string what;   // how the user named it, for the messages: "--log-dir /shared/logs", "TMPDIR=/scratch"
  std::string other;  // the way out that needs no chmod: "give another --log-dir"
};

/// The place of the run directory: --log-dir when given, else $TMPDIR when set, else /tmp.
RunDirPlace run_dir_place(const std::string& log_dir, const std::optional<std::string>& tmpdir);

/// Why rankrun refuses a place, and the fix.
struct DirProblem {
  std::string what;  // "--log-dir /shared/logs is writable by its group and has no sticky bit: ..."
  std::string fix;   // "run `chmod o-w,g-w /shared/logs` or `chmod +t /shared/logs`, or give another --log-dir"
  std::string message() const { return what + "; " + fix; }
};

/// nullopt when `dir` keeps every user but root and `euid` out; else why rankrun refuses to
/// make its run directory there, naming the directory (or link), and the fix. Its message():
/// "--log-dir /shared/logs is writable by its group and has no sticky bit: another user could
/// rename rankrun's run directory and put their own files (the workers' Python start-up hook)
/// in its place; run `chmod o-w,g-w /shared/logs` or `chmod +t /shared/logs`, or give another
/// --log-dir".
std::optional<DirProblem> untrusted_dir(const DirFacts& dir, uid_t euid, const RunDirPlace& place);

}  // namespace rankrun::launcher
