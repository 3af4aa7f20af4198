#include <doctest/doctest.h>
#include <sys/stat.h>

#include "launcher/files/dir_trust.hpp"

using namespace rankrun::launcher;

namespace {

const RunDirPlace k_log_dir{"/shared/logs", "--log-dir /shared/logs", "give another --log-dir"};

// The place itself, /shared/logs; any other path is a directory above it.
DirFacts dir(const std::string& path, uid_t owner, mode_t mode, std::string name = {}) {
  return DirFacts{path, owner, std::move(name), static_cast<mode_t>(S_IFDIR | mode), path == "/shared/logs", false};
}

DirFacts link(const std::string& path, uid_t owner, std::string name = {}) {
  return DirFacts{path, owner, std::move(name), static_cast<mode_t>(S_IFLNK | 0777), path == "/shared/logs", true};
}

std::string said(const std::optional<DirProblem>& problem) { return problem ? problem->message() : std::string(); }

}  // namespace

TEST_CASE("directories only root and rankrun's user may change are trusted") {
  CHECK_FALSE(untrusted_dir(dir("/shared/logs", 0, 0755), 0, k_log_dir));
  CHECK_FALSE(untrusted_dir(dir("/shared/logs", 1000, 0700), 1000, k_log_dir));
  CHECK_FALSE(untrusted_dir(dir("/shared", 0, 0755), 1000, k_log_dir));
}

TEST_CASE("a sticky directory writable by everyone (/tmp) is trusted when root or the user owns it") {
  CHECK_FALSE(untrusted_dir(dir("/tmp", 0, 01777), 0, {"/tmp", "/tmp", "set TMPDIR"}));
  CHECK_FALSE(untrusted_dir(dir("/shared", 0, 01777), 0, k_log_dir));
  CHECK_FALSE(untrusted_dir(dir("/shared/logs", 1000, 01777), 1000, k_log_dir));
  CHECK_FALSE(untrusted_dir(dir("/shared/logs", 0, 01775), 1000, k_log_dir));
}

TEST_CASE("a directory others may write without the sticky bit is refused, naming it and the fix") {
  CHECK(
      said(untrusted_dir(dir("/shared/logs", 0, 0775), 0, k_log_dir)) ==
      "--log-dir /shared/logs is writable by its group and has no sticky bit: another user could rename rankrun's run "
      "directory and put their own files (the workers' Python start-up hook) in its place; run `chmod o-w,g-w "
      "/shared/logs` or `chmod +t /shared/logs`, or give another --log-dir");
  const auto others = untrusted_dir(dir("/shared/logs", 0, 0757), 0, k_log_dir);
  REQUIRE(others);
  CHECK(others->message().find("is writable by others and has no sticky bit") != std::string::npos);
  const auto both = untrusted_dir(dir("/shared/logs", 0, 0777), 0, k_log_dir);
  REQUIRE(both);
  CHECK(both->message().find("is writable by its group and by others") != std::string::npos);
}

TEST_CASE("a directory above the place counts as much as the place itself") {
  const auto above = untrusted_dir(dir("/shared", 0, 0770), 0, k_log_dir);
  REQUIRE(above);
  CHECK(above->message().rfind("--log-dir /shared/logs: /shared, a directory above it, is writable by its group", 0) ==
        0);
  CHECK(above->message().find("`chmod o-w,g-w /shared`") != std::string::npos);
}

TEST_CASE("a directory another user owns is refused: its owner may rename what it holds") {
  CHECK(said(untrusted_dir(dir("/home/alice", 1001, 0755, "alice"), 0, k_log_dir)) ==
        "--log-dir /shared/logs: /home/alice, a directory above it, is owned by alice (uid 1001), who is neither root "
        "nor the user rankrun runs as (uid 0): another user could rename rankrun's run directory and put their own "
        "files (the workers' Python start-up hook) in its place; give another --log-dir, in directories owned by root "
        "or by you");
  // Sticky does not help: the directory's owner may still rename its entries.
  const auto sticky = untrusted_dir(dir("/shared/logs", 1001, 01777), 0, k_log_dir);
  REQUIRE(sticky);
  CHECK(sticky->message().find("owned by uid 1001,") != std::string::npos);
}

TEST_CASE("TMPDIR is named as the user gave it, with its own way out") {
  const RunDirPlace tmp{"/scratch", "TMPDIR=/scratch", "set TMPDIR to another directory"};
  auto scratch = dir("/scratch", 0, 0777);
  scratch.is_place = true;
  const auto problem = untrusted_dir(scratch, 0, tmp);
  REQUIRE(problem);
  CHECK(problem->message().rfind("TMPDIR=/scratch is writable", 0) == 0);
  CHECK(problem->message().find(", or set TMPDIR to another directory") != std::string::npos);
}

TEST_CASE("a symbolic link on the way must be root's or the user's, whatever its mode") {
  CHECK_FALSE(untrusted_dir(link("/shared/logs", 0), 1000, k_log_dir));
  CHECK_FALSE(untrusted_dir(link("/shared/logs", 1000), 1000, k_log_dir));
  CHECK(
      said(untrusted_dir(link("/shared/logs", 1001, "mallory"), 0, k_log_dir)) ==
      "--log-dir /shared/logs: /shared/logs, a symbolic link on the way to it, is owned by mallory (uid 1001), who is "
      "neither root nor the user rankrun runs as (uid 0): its owner may point it elsewhere at any time and so choose "
      "where rankrun's run directory goes; give another --log-dir, in directories owned by root or by you");
}

TEST_CASE("the place is --log-dir, else TMPDIR, else /tmp, each with its own way out") {
  const auto log = run_dir_place("/shared/logs", std::string("/scratch"));
  CHECK(log.base == "/shared/logs");
  CHECK(log.what == "--log-dir /shared/logs");
  CHECK(log.other == "give another --log-dir");
  const auto tmp = run_dir_place("", std::string("/scratch"));
  CHECK(tmp.base == "/scratch");
  CHECK(tmp.what == "TMPDIR=/scratch");
  CHECK(run_dir_place("", std::string()).base == "/tmp");
  CHECK(run_dir_place("", std::nullopt).what == "/tmp");
}
