#pragma once
// Starts one worker through Boost.Process with a clean slate: its own session and process
// group, a parent-death signal, an empty signal mask, default signal dispositions, and no
// file descriptor of rankrun's beyond its stdin/stdout/stderr.

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/process/async_pipe.hpp>
#include <memory>
#include <string>
#include <vector>

#include "launcher/options.hpp"

namespace rankrun::launcher {

struct SpawnedWorker {
  pid_t pid = -1;
  std::unique_ptr<boost::process::async_pipe> out;
  std::unique_ptr<boost::process::async_pipe> err;
};

/// Resolves `name` the way execvp would (PATH search unless it contains '/'). Throws
/// LaunchError naming the program and the fix when it is missing or not executable.
std::string resolve_executable(const std::string& name, const std::string& path_env, const std::string& what);

/// Spawns `argv` (argv[0] already resolved to a path) with exactly `env`. With a
/// `cgroup_procs_fd` (an open cgroup.procs), the child moves itself into that cgroup before exec.
SpawnedWorker spawn_worker(boost::asio::io_context& io, const std::vector<std::string>& argv, const EnvMap& env,
                           int cgroup_procs_fd = -1);

}  // namespace rankrun::launcher
