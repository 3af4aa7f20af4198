#pragma once
// A whole Job on its own io_context with fake parts (job_fakes.hpp): no process is started.
// The store it hosts, if any, listens on 127.0.0.1, its port chosen by the kernel.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "job_fakes.hpp"
#include "launcher/job/job.hpp"

namespace rankrun::launcher::testing {
using namespace std::chrono_literals;

inline LaunchConfig config(int nproc) {
  LaunchConfig c;
  c.nproc = nproc;
  c.command = {"/opt/fake/worker", "--rank=${local_rank}"};
  c.entrypoint_name = "worker";
  c.term_timeout = 0.05;
  c.kill_timeout = 0.1;
  c.console_ranks = std::set<int>{};  // keep the test's output quiet
  return c;
}

struct TempDir {
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rankrun-job-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
  }
  ~TempDir() {
    ::close(fd);
    std::filesystem::remove_all(path);
  }
  std::string path;
  int fd = -1;
};

struct Harness {
  explicit Harness(LaunchConfig c, std::function<FakeWorker(int, int)> script)
      : cfg(std::move(c)), spawner(io, std::move(script)) {}

  int run(std::function<void(Job&)> during = {}) {
    JobPaths paths;
    paths.run_dir = dir.path;
    paths.dir_fd = dir.fd;
    paths.stack_dir = dir.path + "/stacks";
    JobParts parts{spawner, stacks, cleanup};
    if (backend) {
      parts.rendezvous = [this](rdzv::JobSide side) { return std::make_unique<FakeBackend>(backend, std::move(side)); };
    }
    Job job(io, cfg, EnvMap{{"PATH", "/usr/bin"}}, paths, parts);
    port = job.store_port();
    // A job that never ends fails the case instead of hanging the test run: a watchdog looks
    // every 20 ms whether the job has stopped its spawner (its last act), for 10 s at most.
    boost::asio::steady_timer watchdog(io);
    int looks = 0;
    std::function<void()> look = [&] {
      watchdog.expires_after(20ms);
      watchdog.async_wait([&](boost::system::error_code ec) {
        if (ec || spawner.stopped) return;
        if (++looks == 500) {
          timed_out = true;
          io.stop();
          return;
        }
        look();
      });
    };
    look();
    boost::asio::steady_timer poke(io);
    if (during) {
      poke.expires_after(30ms);
      poke.async_wait([&](boost::system::error_code ec) {
        if (!ec) during(job);
      });
    }
    const int code = job.run();
    return timed_out ? -1 : code;
  }

  boost::asio::io_context io;
  LaunchConfig cfg;
  TempDir dir;
  FakeSpawner spawner;
  FakeStacks stacks;
  FakeCleanup cleanup;
  std::uint16_t port = 0;
  bool timed_out = false;
  /// Set: the job's rendezvous is a FakeBackend over this state.
  std::shared_ptr<FakeBackend::State> backend;
};

inline FakeWorker runs_until_signalled() { return FakeWorker{}; }
inline FakeWorker exits(int code, std::chrono::milliseconds after = 10ms) {
  FakeWorker w;
  w.exit_after = after;
  w.exit_status = ExitStatus::exited(code);
  return w;
}

}  // namespace rankrun::launcher::testing
