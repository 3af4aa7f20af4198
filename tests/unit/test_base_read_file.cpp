// The bounded file reader on real files (a temporary directory, a FIFO, /proc).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/read_file.hpp"

namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "rankrun-base-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string write(const char* name, const std::string& text, mode_t mode = 0600) const {
    const auto p = (path / name).string();
    std::ofstream(p, std::ios::binary) << text;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

}  // namespace

TEST_CASE("read_file: the text, its mode, and whether there was more than asked for") {
  const TempDir dir;
  const auto p = dir.write("f", "hello", 0640);
  auto r = rankrun::read_file(p, 100);
  CHECK(r.ok());
  CHECK(r.opened);
  CHECK(r.text == "hello");
  CHECK(r.regular);
  CHECK(r.mode == 0640);
  CHECK_FALSE(r.truncated);
  r = rankrun::read_file(p, 5);
  CHECK(r.text == "hello");
  CHECK_FALSE(r.truncated);
  r = rankrun::read_file(p, 4);
  CHECK(r.text == "hell");
  CHECK(r.truncated);
  const std::string big(100000, 'x');
  CHECK(rankrun::read_file(dir.write("big", big), 1 << 20).text == big);
}

TEST_CASE("read_file: a missing file, a directory, a FIFO with regular_only") {
  const TempDir dir;
  auto r = rankrun::read_file((dir.path / "missing").string(), 100);
  CHECK_FALSE(r.opened);
  CHECK(r.error == ENOENT);
  r = rankrun::read_file(dir.path.string(), 100);
  CHECK(r.opened);
  CHECK(r.error == EISDIR);
  const auto fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  r = rankrun::read_file(fifo, 100, true);  // would block without regular_only
  CHECK(r.ok());
  CHECK_FALSE(r.regular);
  CHECK(r.text.empty());
  CHECK_FALSE(rankrun::read_file_head((dir.path / "missing").string()).has_value());
}

TEST_CASE("/proc's files, whose size says 0, are read whole; a command line as one line") {
  const auto stat = rankrun::read_file_head("/proc/self/stat", 4096);
  REQUIRE(stat);
  CHECK(stat->find(std::to_string(::getpid()) + " (") == 0);
  const auto cmd = rankrun::command_line_of(::getpid());
  REQUIRE(cmd);
  CHECK(cmd->find("rankrun_launcher_tests") != std::string::npos);
  CHECK(cmd->find('\0') == std::string::npos);
  CHECK_FALSE(rankrun::command_line_of(0x7ffffff0).has_value());
}
