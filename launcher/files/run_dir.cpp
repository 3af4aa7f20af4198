#include "launcher/files/run_dir.hpp"

#include "launcher/processes/exit_order.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>
#include <vector>

namespace rankrun::launcher {

namespace fs = std::filesystem;

namespace {

// How deep remove_below() goes: deeper than anything rankrun or a worker makes on purpose.
constexpr int k_max_depth = 64;

std::vector<std::string> split_rel(std::string_view rel) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at <= rel.size()) {
    auto slash = rel.find('/', at);
    if (slash == std::string_view::npos) slash = rel.size();
    if (slash > at) parts.emplace_back(rel.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

bool plain_name(const std::string& name) { return !name.empty() && name != "." && name != ".."; }

// The directory that holds the last name of `rel`, opened without following a link, and that
// name. `fd` is `dir` itself when `rel` is one name.
struct Parent {
  UniqueFd owned;
  int fd = -1;
  std::string name;
};

std::optional<Parent> open_parent(int dir, std::string_view rel) {
  auto parts = split_rel(rel);
  if (parts.empty() || (!rel.empty() && rel.front() == '/')) {
    errno = EINVAL;
    return std::nullopt;
  }
  for (const auto& p : parts) {
    if (!plain_name(p)) {
      errno = EINVAL;
      return std::nullopt;
    }
  }
  Parent parent;
  parent.fd = dir;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const int next = ::openat(parent.fd, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return std::nullopt;
    parent.owned.reset(next);
    parent.fd = next;
  }
  parent.name = parts.back();
  return parent;
}

std::string owner_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return {};
}

// How many symbolic links the walk to the place follows, as the kernel allows (ELOOP).
constexpr int k_max_links = 40;

[[noreturn]] void cannot(const char* doing, const std::string& path, int error, const RunDirPlace& place) {
  throw PlaceRefused(DirProblem{
      std::string("cannot ") + doing + " " + path + " (on the way to " + place.what + "): " + std::strerror(error),
      place.other});
}

void check(const DirFacts& facts, const RunDirPlace& place) {
  if (auto problem = untrusted_dir(facts, ::geteuid(), place)) throw PlaceRefused(std::move(*problem));
}

// Opens the directory `name` in `at` (a directory already checked) without following a link,
// and checks it.
UniqueFd open_checked(int at, const std::string& name, const std::string& path, bool is_place,
                      const RunDirPlace& place) {
  UniqueFd fd(::openat(at, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) cannot("open", path, errno, place);
  check(DirFacts{path, st.st_uid, owner_name(st.st_uid), st.st_mode, is_place, false}, place);
  return fd;
}

bool nothing_but_dots(const std::deque<std::string>& names) {
  for (const auto& n : names) {
    if (!n.empty() && n != "." && n != "..") return false;
  }
  return true;
}

// The place, walked from / the way the kernel resolves a path, one name at a time, each
// directory opened relative to the one above it, no link followed by the kernel: every
// directory on the way is checked, and every symbolic link on the way must be root's or
// rankrun's user's (the directory that holds it is on the way, so it is checked too). What is
// missing is made when `make` (mode 0755, then checked like the rest). Returns the place's
// descriptor and its path without links: the path the workers are given.
std::pair<UniqueFd, std::string> open_place(const RunDirPlace& place, bool make) {
  std::error_code ec;
  const fs::path wanted = fs::absolute(place.base, ec);
  if (ec) throw PlaceRefused(DirProblem{"cannot find " + place.what + ": " + ec.message(), place.other});
  std::deque<std::string> todo;
  for (const auto& part : wanted.relative_path()) todo.push_back(part.string());
  struct Step {
    UniqueFd fd;
    std::string path;
  };
  std::vector<Step> walked;
  walked.push_back(Step{open_checked(AT_FDCWD, "/", "/", nothing_but_dots(todo), place), "/"});
  int links = 0;
  while (!todo.empty()) {
    const std::string name = todo.front();
    todo.pop_front();
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      if (walked.size() > 1) walked.pop_back();
      continue;
    }
    const int at = walked.back().fd.get();
    const std::string path = walked.back().path == "/" ? "/" + name : walked.back().path + "/" + name;
    const bool last = nothing_but_dots(todo);
    struct stat st {};
    if (::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) cannot("reach", path, errno, place);
      if (!make) return {UniqueFd(), path};  // rankrun would make the rest itself
      if (::mkdirat(at, name.c_str(), 0755) != 0 && errno != EEXIST) cannot("create", path, errno, place);
      walked.push_back(Step{open_checked(at, name, path, last, place), path});
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      check(DirFacts{path, st.st_uid, owner_name(st.st_uid), st.st_mode, last, true}, place);
      if (++links > k_max_links) cannot("follow", path, ELOOP, place);
      std::string target(PATH_MAX, '\0');
      const auto n = ::readlinkat(at, name.c_str(), target.data(), target.size());
      if (n < 0) cannot("read the link", path, errno, place);
      target.resize(static_cast<std::size_t>(n));
      const fs::path to(target);
      if (to.is_absolute()) walked.resize(1);
      std::vector<std::string> parts;
      for (const auto& part : to.relative_path()) parts.push_back(part.string());
      todo.insert(todo.begin(), parts.begin(), parts.end());
      continue;
    }
    walked.push_back(Step{open_checked(at, name, path, last, place), path});
  }
  return {std::move(walked.back().fd), walked.back().path};
}

std::string random_suffix() {
  static constexpr char k_chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device rd;
  std::uniform_int_distribution<std::size_t> pick(0, sizeof k_chars - 2);
  std::string s;
  for (int i = 0; i < 6; ++i) s += k_chars[pick(rd)];
  return s;
}

int remove_entry(int parent, const std::string& name, int depth) {
  if (::unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT) return 0;
  if (errno != EISDIR) return errno;
  if (depth >= k_max_depth) return ELOOP;
  // A directory: what is in it first. Entries made meanwhile (a worker still alive) are taken
  // on the next pass.
  for (int pass = 0; pass < 3; ++pass) {
    const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : errno;
    DIR* d = ::fdopendir(fd);
    if (!d) {
      const int error = errno;
      ::close(fd);
      return error;
    }
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string entry = e->d_name;
      if (plain_name(entry)) names.push_back(entry);
    }
    int error = 0;
    for (const auto& entry : names) {
      if (const int e = remove_entry(::dirfd(d), entry, depth + 1); e != 0 && error == 0) error = e;
    }
    ::closedir(d);
    if (error != 0) return error;
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return errno;
  }
  return ENOTEMPTY;
}

}  // namespace

std::unique_ptr<RunDir> RunDir::create(const RunDirPlace& place, const std::string& prefix) {
  auto [base, base_path] = open_place(place, true);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string name = prefix + random_suffix();
    if (::mkdirat(base.get(), name.c_str(), 0700) != 0) {
      const int error = errno;
      if (error == EEXIST) continue;
      throw LaunchError("cannot create a run directory in " + base_path + ": " + std::strerror(error) + "; " +
                        place.other);
    }
    UniqueFd fd(::openat(base.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    // Made a moment ago by rankrun in a directory no one else may change: anything else here
    // is a bug or an attack, never used.
    errno = 0;
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
        ::fchmod(fd.get(), 0700) != 0) {
      const int error = errno ? errno : EPERM;
      throw LaunchError("the run directory " + base_path + "/" + name + " rankrun just made is not its own (" +
                        std::strerror(error) + "); " + place.other);
    }
    return std::unique_ptr<RunDir>(new RunDir(std::move(base), name, std::move(fd), base_path + "/" + name));
  }
  throw LaunchError("cannot create a run directory in " + base_path + ": every name tried was taken; " + place.other);
}

RunDir::~RunDir() {
  if (m_keep || !m_parent) return;
  remove_entry(m_parent.get(), m_name, 0);
}

std::optional<DirProblem> check_run_dir_place(const RunDirPlace& place, bool make_missing) {
  try {
    open_place(place, make_missing);
  } catch (const PlaceRefused& e) {
    return e.problem;
  }
  return std::nullopt;
}

UniqueFd open_below(int dir, std::string_view rel, int flags, mode_t mode) {
  const auto parent = open_parent(dir, rel);
  if (!parent) return UniqueFd();
  return UniqueFd(::openat(parent->fd, parent->name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode));
}

int make_dirs_below(int dir, std::string_view rel, mode_t mode) {
  const auto parts = split_rel(rel);
  if (parts.empty() || rel.front() == '/') return EINVAL;
  UniqueFd owned;
  int at = dir;
  for (const auto& part : parts) {
    if (!plain_name(part)) return EINVAL;
    if (::mkdirat(at, part.c_str(), mode) != 0 && errno != EEXIST) return errno;
    const int next = ::openat(at, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return errno;
    owned.reset(next);
    at = next;
  }
  return 0;
}

int remove_below(int dir, std::string_view rel) {
  const auto parent = open_parent(dir, rel);
  if (!parent) return errno == ENOENT ? 0 : errno;
  return remove_entry(parent->fd, parent->name, 0);
}

std::optional<std::string> read_below(int dir, std::string_view rel, std::size_t max_bytes) {
  // O_NONBLOCK: a FIFO at the name is opened without waiting for a writer, then refused.
  const UniqueFd fd = open_below(dir, rel, O_RDONLY | O_NONBLOCK);
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::string text;
  char buffer[8192];
  while (text.size() < max_bytes) {
    const auto n = ::read(fd.get(), buffer, std::min(sizeof buffer, max_bytes - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

bool exists_below(int dir, std::string_view rel) {
  const auto parent = open_parent(dir, rel);
  struct stat st {};
  return parent && ::fstatat(parent->fd, parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

int write_new_below(int dir, std::string_view rel, std::string_view text, mode_t mode) {
  UniqueFd fd = open_below(dir, rel, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (!fd) return errno;
  for (std::string_view rest = text; !rest.empty();) {
    const auto n = ::write(fd.get(), rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  // A file system that defers its errors (NFS) reports them here.
  if (::close(fd.release()) != 0 && errno != EINTR) return errno;
  return 0;
}

std::optional<std::int64_t> read_failure_record(int dir, std::string_view stacks, pid_t pid) {
  if (dir < 0) return std::nullopt;
  const auto text = read_below(dir, std::string(stacks) + std::to_string(pid) + ".failed", 64);
  return text ? parse_failure_time(*text) : std::nullopt;
}

}  // namespace rankrun::launcher
