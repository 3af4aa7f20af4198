// The run directory's file operations, on real directories under the system's temporary
// directory (nothing outside the test's own directory is touched).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/types/launch_error.hpp"
#include "launcher/files/run_dir.hpp"

using namespace rankrun::launcher;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "rankrun-run-dir-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = fs::canonical(pattern).string();
  }
  ~Scratch() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  RunDirPlace place(const std::string& sub) const {
    return {path + "/" + sub, "--log-dir " + path + "/" + sub, "give another --log-dir"};
  }
  std::string path;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("the run directory is made private in its place, and removed unless kept") {
  Scratch s;
  std::string path;
  {
    auto dir = RunDir::create(s.place("logs"), "job_");
    path = dir->path();
    CHECK(path.rfind(s.path + "/logs/job_", 0) == 0);
    CHECK(path.size() == (s.path + "/logs/job_").size() + 6);
    CHECK(mode_of(path) == 0700);
    CHECK(mode_of(s.path + "/logs") == 0755);  // made by rankrun
    CHECK(make_dirs_below(dir->fd(), "attempt_0/1", 0755) == 0);
    CHECK(write_new_below(dir->fd(), "attempt_0/1/error.json", "{}", 0644) == 0);
    CHECK(slurp(path + "/attempt_0/1/error.json") == "{}");
  }
  CHECK_FALSE(fs::exists(path));
  {
    auto dir = RunDir::create(s.place("logs"), "job_");
    dir->keep(true);
    path = dir->path();
  }
  CHECK(fs::is_directory(path));
}

TEST_CASE("new directories of the place are not group-writable whatever the umask") {
  Scratch s;
  const mode_t old = ::umask(0);
  auto dir = RunDir::create(s.place("a/b"), "r-");
  ::umask(old);
  CHECK(mode_of(s.path + "/a") == 0755);
  CHECK(mode_of(s.path + "/a/b") == 0755);
  CHECK(mode_of(dir->path()) == 0700);
}

TEST_CASE("a place others may write without the sticky bit is refused, and nothing is made in it") {
  Scratch s;
  fs::create_directory(s.path + "/shared");
  ::chmod((s.path + "/shared").c_str(), 0775);
  CHECK_THROWS_WITH_AS(RunDir::create(s.place("shared"), "job_"),
                       doctest::Contains("is writable by its group and has no sticky bit"), LaunchError);
  CHECK(fs::is_empty(s.path + "/shared"));
  // Below it, even a directory rankrun would make itself: the one above could be renamed.
  CHECK_THROWS_WITH_AS(RunDir::create(s.place("shared/logs"), "job_"),
                       doctest::Contains("/shared, a directory above it, is writable by its group"), LaunchError);
  CHECK(fs::is_empty(s.path + "/shared"));
  CHECK(check_run_dir_place(s.place("shared/logs")));
  // Sticky: only an entry's owner may rename it.
  ::chmod((s.path + "/shared").c_str(), 01777);
  CHECK_FALSE(check_run_dir_place(s.place("shared/logs")));
  CHECK(RunDir::create(s.place("shared/logs"), "job_"));
}

TEST_CASE("a place reached through a link gives the workers the path without it") {
  Scratch s;
  fs::create_directory(s.path + "/real");
  fs::create_directory_symlink(s.path + "/real", s.path + "/link");
  auto dir = RunDir::create(s.place("link"), "job_");
  CHECK(dir->path().rfind(s.path + "/real/job_", 0) == 0);
}

TEST_CASE("a link on the way that another user owns is refused: they choose where it points") {
  Scratch s;
  fs::create_directory(s.path + "/shared");
  ::chmod((s.path + "/shared").c_str(), 01777);
  fs::create_directory(s.path + "/elsewhere");
  fs::create_directory_symlink(s.path + "/elsewhere", s.path + "/shared/logs");
  REQUIRE(::lchown((s.path + "/shared/logs").c_str(), 54321, 54321) == 0);
  CHECK_THROWS_WITH_AS(RunDir::create(s.place("shared/logs"), "job_"),
                       doctest::Contains("/shared/logs, a symbolic link on the way to it, is owned by uid 54321"),
                       LaunchError);
  CHECK(fs::is_empty(s.path + "/elsewhere"));
  // The same link, the user's own: followed, and the workers get the path without it.
  REQUIRE(::lchown((s.path + "/shared/logs").c_str(), ::geteuid(), ::getegid()) == 0);
  auto dir = RunDir::create(s.place("shared/logs/./sub/../sub"), "job_");
  CHECK(dir->path().rfind(s.path + "/elsewhere/sub/job_", 0) == 0);
}

TEST_CASE("a relative link is followed from the directory that holds it") {
  Scratch s;
  fs::create_directories(s.path + "/a/real");
  fs::create_directory(s.path + "/b");
  fs::create_directory_symlink("../a/real", s.path + "/b/logs");
  auto dir = RunDir::create(s.place("b/logs"), "job_");
  CHECK(dir->path().rfind(s.path + "/a/real/job_", 0) == 0);
}

TEST_CASE("no link in the run directory is followed") {
  Scratch s;
  auto dir = RunDir::create(s.place("logs"), "job_");
  const std::string outside = s.path + "/outside";
  fs::create_directory(outside);
  { std::ofstream(outside + "/victim") << "precious"; }
  fs::create_directory_symlink(outside, dir->path() + "/attempt_0");
  fs::create_symlink(outside + "/victim", dir->path() + "/victim.log");

  // A directory on the way is a link: nothing is made, opened or read through it.
  CHECK_FALSE(open_below(dir->fd(), "attempt_0/stdout.log", O_WRONLY | O_CREAT | O_EXCL, 0644));
  CHECK(make_dirs_below(dir->fd(), "attempt_0/0", 0755) != 0);
  CHECK_FALSE(read_below(dir->fd(), "attempt_0/victim"));
  CHECK(write_new_below(dir->fd(), "attempt_0/new", "x", 0644) != 0);
  CHECK_FALSE(fs::exists(outside + "/stdout.log"));
  CHECK_FALSE(fs::exists(outside + "/0"));
  CHECK_FALSE(fs::exists(outside + "/new"));

  // The last name is a link: not written through, not read through, not truncated.
  CHECK(write_new_below(dir->fd(), "victim.log", "evil", 0644) == EEXIST);
  CHECK_FALSE(open_below(dir->fd(), "victim.log", O_WRONLY | O_TRUNC));
  CHECK_FALSE(read_below(dir->fd(), "victim.log"));
  CHECK(exists_below(dir->fd(), "victim.log"));
  CHECK(slurp(outside + "/victim") == "precious");

  // Removing what is there removes the links, never what they point to.
  CHECK(remove_below(dir->fd(), "attempt_0") == 0);
  CHECK(remove_below(dir->fd(), "victim.log") == 0);
  CHECK_FALSE(exists_below(dir->fd(), "attempt_0"));
  CHECK(slurp(outside + "/victim") == "precious");
}

TEST_CASE("a file rankrun creates is never one already there, and a FIFO is not waited on") {
  Scratch s;
  auto dir = RunDir::create(s.place("logs"), "job_");
  CHECK(write_new_below(dir->fd(), "a.txt", "one", 0644) == 0);
  CHECK(write_new_below(dir->fd(), "a.txt", "two", 0644) == EEXIST);
  CHECK(read_below(dir->fd(), "a.txt") == "one");
  CHECK(read_below(dir->fd(), "a.txt", 2) == "on");
  REQUIRE(::mkfifo((dir->path() + "/fifo").c_str(), 0600) == 0);
  CHECK_FALSE(read_below(dir->fd(), "fifo"));
}

TEST_CASE("a path below the run directory is plain names only") {
  Scratch s;
  auto dir = RunDir::create(s.place("logs"), "job_");
  CHECK(make_dirs_below(dir->fd(), "../escape", 0755) == EINVAL);
  CHECK(make_dirs_below(dir->fd(), "/abs", 0755) == EINVAL);
  CHECK_FALSE(open_below(dir->fd(), "a/../../x", O_WRONLY | O_CREAT, 0644));
  CHECK(write_new_below(dir->fd(), "..", "x", 0644) == EINVAL);
  CHECK_FALSE(fs::exists(s.path + "/logs/escape"));
  CHECK_FALSE(fs::exists(s.path + "/escape"));
  CHECK(remove_below(dir->fd(), "gone/never") == 0);
  // Nested removal.
  CHECK(make_dirs_below(dir->fd(), "t/a/b/c", 0755) == 0);
  CHECK(write_new_below(dir->fd(), "t/a/b/c/f", "x", 0644) == 0);
  CHECK(remove_below(dir->fd(), "t") == 0);
  CHECK_FALSE(exists_below(dir->fd(), "t"));
}
