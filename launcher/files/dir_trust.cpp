#include "launcher/files/dir_trust.hpp"

#include <sys/stat.h>

namespace rankrun::launcher {

namespace {

std::string user_label(uid_t uid, const std::string& name) {
  return name.empty() ? "uid " + std::to_string(uid) : name + " (uid " + std::to_string(uid) + ")";
}

// "--log-dir /shared/logs is", "--log-dir /shared/logs: /shared, a directory above it, is",
// "--log-dir /shared/logs: /shared/logs, a symbolic link on the way to it, is".
std::string subject(const DirFacts& dir, const RunDirPlace& place) {
  if (dir.link) return place.what + ": " + dir.path + ", a symbolic link on the way to it, is";
  if (dir.is_place) return place.what + " is";
  return place.what + ": " + dir.path + ", a directory above it, is";
}

}  // namespace

RunDirPlace run_dir_place(const std::string& log_dir, const std::optional<std::string>& tmpdir) {
  if (!log_dir.empty()) return {log_dir, "--log-dir " + log_dir, "give another --log-dir"};
  if (tmpdir && !tmpdir->empty()) return {*tmpdir, "TMPDIR=" + *tmpdir, "set TMPDIR to another directory"};
  return {"/tmp", "/tmp", "set TMPDIR to a directory of your own"};
}

std::optional<DirProblem> untrusted_dir(const DirFacts& dir, uid_t euid, const RunDirPlace& place) {
  const std::string consequence =
      "another user could rename rankrun's run directory and put their own files (the workers' Python start-up "
      "hook) in its place";
  if (dir.owner != 0 && dir.owner != euid) {
    const std::string what = dir.link ? "its owner may point it elsewhere at any time and so choose where rankrun's "
                                        "run directory goes"
                                      : consequence;
    return DirProblem{subject(dir, place) + " owned by " + user_label(dir.owner, dir.owner_name) +
                          ", who is neither root nor the user rankrun runs as (uid " + std::to_string(euid) +
                          "): " + what,
                      place.other + ", in directories owned by root or by you"};
  }
  // A link's own mode means nothing; what holds it is checked as a directory on the way.
  if (dir.link) return std::nullopt;
  const bool group = (dir.mode & S_IWGRP) != 0;
  const bool others = (dir.mode & S_IWOTH) != 0;
  if ((group || others) && (dir.mode & S_ISVTX) == 0) {
    const std::string by = group && others ? "its group and by others" : group ? "its group" : "others";
    return DirProblem{subject(dir, place) + " writable by " + by + " and has no sticky bit: " + consequence,
                      "run `chmod o-w,g-w " + dir.path + "` or `chmod +t " + dir.path + "`, or " + place.other};
  }
  return std::nullopt;
}

}  // namespace rankrun::launcher
