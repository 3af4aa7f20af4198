#include <doctest/doctest.h>

#include <string>

#include "launcher/processes/proc_parse.hpp"

using namespace rankrun::launcher;
using namespace std::string_literals;

TEST_CASE("a stat line gives state, parents and start time") {
  const auto st = parse_proc_stat(
      "4242 (python3) S 4200 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n");
  REQUIRE(st);
  CHECK(st->pid == 4242);
  CHECK(st->comm == "python3");
  CHECK(st->state == 'S');
  CHECK(st->ppid == 4200);
  CHECK(st->pgrp == 4242);
  CHECK(st->session == 4242);
  CHECK(st->start_time == 987654);
  CHECK(st->cpu_ticks == 3);  // utime 1 + stime 2
  CHECK_FALSE(st->dead());
}

TEST_CASE("a command name with spaces and parentheses ends at the last parenthesis") {
  const auto st = parse_proc_stat("7 (a) b (c)) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55");
  REQUIRE(st);
  CHECK(st->comm == "a) b (c)");
  CHECK(st->state == 'Z');
  CHECK(st->dead());
  CHECK(st->start_time == 55);
}

TEST_CASE("truncated or garbled stat lines are rejected") {
  CHECK_FALSE(parse_proc_stat(""));
  CHECK_FALSE(parse_proc_stat("12 (x) S 1 2 3"));
  CHECK_FALSE(parse_proc_stat("x (y) S 1 2 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5"));
  CHECK_FALSE(parse_proc_stat("12 (x S 1"));
}

TEST_CASE("process states are named as /proc/PID/status names them") {
  CHECK(describe_proc_state('D') == "disk sleep");
  CHECK(describe_proc_state('Z') == "zombie");
  CHECK(describe_proc_state('?') == "state ?");
}

TEST_CASE("the job marker is found among the environment's variables and nested ids") {
  const auto env = "PATH=/bin\0RANKRUN_JOB=aaaa:bbbb\0HOME=/root\0"s;
  CHECK(environ_has_job(env, "aaaa"));
  CHECK(environ_has_job(env, "bbbb"));
  CHECK_FALSE(environ_has_job(env, "aaa"));
  CHECK_FALSE(environ_has_job(env, ""));
  CHECK_FALSE(environ_has_job("MY_RANKRUN_JOB=aaaa\0"s, "aaaa"));
  CHECK_FALSE(environ_has_job("X=RANKRUN_JOB=aaaa\0"s, "aaaa"));
  CHECK(job_marker_value(std::nullopt, "cafe") == "cafe");
  CHECK(job_marker_value("beef"s, "cafe") == "beef:cafe");
}

TEST_CASE("the cgroup2 mount and a process's unified path") {
  const auto mounts =
      "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/freezer cgroup rw,freezer 0 0\n"
      "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
  CHECK(cgroup2_mount_point(mounts) == "/sys/fs/cgroup/unified");
  CHECK(cgroup2_mount_point("cgroup2 /mnt/my\\040cg cgroup2 rw 0 0\n") == "/mnt/my cg");
  CHECK_FALSE(cgroup2_mount_point("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n"));
  CHECK(cgroup2_path("9:name=systemd:/\n1:freezer:/x\n0::/user.slice/job\n") == "/user.slice/job");
  CHECK(cgroup2_path("0::/\n") == "/");
  CHECK_FALSE(cgroup2_path("9:name=systemd:/\n"));
}

TEST_CASE("a status gives the uid files are created with and the pid a process knows itself by") {
  const auto id = parse_proc_status(
      "Name:\tpython3\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t4200\n"
      "Uid:\t1000\t0\t0\t1001\nGid:\t100\t100\t100\t100\nNStgid:\t4242\nNSpid:\t4242\n");
  CHECK(id.uid == 1000u);
  CHECK(id.fsuid == 1001u);
  CHECK(id.own_pid == 4242);
  CHECK(id.pid_ns_depth == 1);
}

TEST_CASE("a process in a nested pid namespace knows itself by its innermost pid") {
  const auto id = parse_proc_status("Uid:\t0\t0\t0\t0\nNStgid:\t91234\t7\nNSpid:\t91234\t7\n");
  CHECK(id.fsuid == 0u);
  CHECK(id.own_pid == 7);
  CHECK(id.pid_ns_depth == 2);
}

TEST_CASE("a status without the lines (an old kernel, a cut read) leaves them unset") {
  const auto id = parse_proc_status("Name:\tx\nUid:\t0\t0\nNStgid:\tabc\n");
  CHECK_FALSE(id.uid);
  CHECK_FALSE(id.fsuid);
  CHECK_FALSE(id.own_pid);
  CHECK(id.pid_ns_depth == 0);
  CHECK_FALSE(parse_proc_status("").fsuid);
}
