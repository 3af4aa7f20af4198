#include <doctest/doctest.h>

#include "launcher/check/preflight.hpp"

using namespace rankrun::launcher;
using namespace rankrun::launcher::check;

namespace {
LaunchConfig config() {
  LaunchConfig c;
  c.nproc = 2;
  c.gpus = {"0", "1"};
  c.pin = true;
  c.master_addr = "127.0.0.1";
  return c;
}
HostProbe healthy() {
  HostProbe p;
  p.master_resolved = "127.0.0.1";
  p.shm_size = 16ull << 30;
  p.shm_free = 16ull << 30;
  p.nofile_soft = p.nofile_hard = 1 << 20;
  p.interpreter = "/usr/bin/python3";
  p.torch_version = "1.13.1";
  p.user = "root";
  p.system_user = true;
  p.cgroup_available = true;
  return p;
}
const CheckLine* find(const std::vector<CheckLine>& lines, const std::string& what) {
  for (const auto& l : lines) {
    if (l.what.rfind(what, 0) == 0) return &l;
  }
  return nullptr;
}
}  // namespace

TEST_CASE("a healthy host passes every check and names each worker's GPU") {
  const auto lines = evaluate(config(), healthy());
  CHECK(exit_code_of(lines) == 0);
  REQUIRE(find(lines, "GPUs"));
  CHECK(find(lines, "GPUs")->detail == "2 visible (0,1); local 0 -> GPU 0, local 1 -> GPU 1");
  const auto text = format_checks(lines, false);
  CHECK(text.find("ok   GPUs: 2 visible") == 0);
  CHECK(text.find("rankrun --check: all ") != std::string::npos);
  CHECK(format_checks(lines, true).find("\u2713 GPUs") == 0);
}

TEST_CASE("Docker's 64 MiB /dev/shm warns with the fix; warnings do not fail") {
  auto p = healthy();
  p.shm_size = p.shm_free = 64ull << 20;
  const auto lines = evaluate(config(), p);
  const auto* shm = find(lines, "/dev/shm");
  REQUIRE(shm);
  CHECK(shm->verdict == Verdict::Warn);
  CHECK(shm->detail.find("64 MiB is Docker's default") != std::string::npos);
  CHECK(shm->fix.find("--shm-size=2g") != std::string::npos);
  CHECK(exit_code_of(lines) == 0);
  CHECK(format_checks(lines, false).find("warn /dev/shm: 64 MiB size, 64 MiB free, for 2 workers") !=
        std::string::npos);
}

TEST_CASE("a torch built without libuv is named, with what it means") {
  auto p = healthy();
  p.torch_version = "2.14.1+debian";
  CHECK(find(evaluate(config(), p), "python")->detail == "/usr/bin/python3 imports torch 2.14.1+debian");
  p.torch_libuv = false;
  const auto lines = evaluate(config(), p);
  CHECK(find(lines, "python")->verdict == Verdict::Pass);
  CHECK(find(lines, "python")->detail.find("imports torch 2.14.1+debian, built without libuv: rankrun makes") ==
        0 + std::string("/usr/bin/python3 ").size());
  p.torch_libuv = true;
  CHECK(find(evaluate(config(), p), "python")->detail == "/usr/bin/python3 imports torch 2.14.1+debian");
}

TEST_CASE("failures: a loopback master in a multi-node job, a store port taken, no torch, a dead interface") {
  auto c = config();
  c.nnodes = 2;
  c.master_port = 29500;
  auto p = healthy();
  p.store_error = "Address already in use (127.0.0.1)";
  p.torch_version.reset();
  p.python_error = "ModuleNotFoundError: No module named 'torch'";
  p.ifnames.push_back({"NCCL_SOCKET_IFNAME", "ib", {}, {"eth0", "lo"}});
  const auto lines = evaluate(c, p);
  CHECK(exit_code_of(lines) == 2);
  CHECK(find(lines, "master address")->verdict == Verdict::Fail);
  CHECK(find(lines, "master address")->detail.find("loopback") != std::string::npos);
  CHECK(find(lines, "store 127.0.0.1:29500")->detail == "cannot listen here: Address already in use (127.0.0.1)");
  CHECK(find(lines, "python")->detail.find("No module named 'torch'") != std::string::npos);
  CHECK(find(lines, "NCCL_SOCKET_IFNAME=ib")->detail == "names no interface that is up; interfaces here: eth0, lo");
  const auto text = format_checks(lines, false);
  CHECK(text.find("FAIL python: /usr/bin/python3 cannot import torch") != std::string::npos);
  CHECK(text.find("     fix: install PyTorch") != std::string::npos);
  CHECK(text.find("rankrun --check: 4 of ") != std::string::npos);
}

TEST_CASE("RemoveIPC warns for a non-system user without lingering, and the open-files limit scales with the world") {
  auto c = config();
  c.nnodes = 64;
  auto p = healthy();
  p.user = "alice";
  p.system_user = false;
  p.nofile_soft = 1024;
  p.nofile_hard = 4096;
  const auto lines = evaluate(c, p);
  CHECK(find(lines, "RemoveIPC")->verdict == Verdict::Warn);
  CHECK(find(lines, "RemoveIPC")->fix.find("loginctl enable-linger alice") == 0);
  CHECK(find(lines, "open files")->verdict == Verdict::Warn);
  CHECK(find(lines, "open files")->fix == "ulimit -n 3072 before starting rankrun");
  p.linger = true;
  CHECK(find(evaluate(c, p), "RemoveIPC")->verdict == Verdict::Pass);
}

TEST_CASE("a run directory place another user could change fails, with its fix") {
  auto p = healthy();
  p.run_dir_place =
      DirProblem{"--log-dir /shared/logs is writable by its group and has no sticky bit: another user could ...",
                 "run `chmod o-w,g-w /shared/logs` or `chmod +t /shared/logs`, or give another --log-dir"};
  auto c = config();
  c.log_dir = "/shared/logs";
  const auto lines = evaluate(c, p);
  const auto* line = find(lines, "run directory");
  REQUIRE(line);
  CHECK(line->verdict == Verdict::Fail);
  CHECK(line->detail.rfind("--log-dir /shared/logs is writable by its group", 0) == 0);
  CHECK(line->fix.find("chmod +t /shared/logs") != std::string::npos);
  CHECK_FALSE(find(lines, "--log-dir"));  // its write test did not run
  CHECK(exit_code_of(lines) == 2);
}

TEST_CASE("the store host's listen backlog against the job's burst of connections") {
  auto c = config();
  auto p = healthy();
  p.somaxconn = 4096;
  p.syn_backlog = 4096;
  const auto healthy_lines = evaluate(c, p);
  const auto* ok = find(healthy_lines, "listen backlog");
  REQUIRE(ok);
  CHECK(ok->verdict == Verdict::Pass);
  CHECK(ok->detail ==
        "net.core.somaxconn=4096, net.ipv4.tcp_max_syn_backlog=4096; the store here takes 6 connections at once");
  // 256 nodes of 8: 2048 workers and the nodes' links at once, past a backlog of 1024
  c.nnodes = 256;
  p.somaxconn = 1024;
  const auto lines = evaluate(c, p);
  const auto* low = find(lines, "listen backlog");
  REQUIRE(low);
  CHECK(low->verdict == Verdict::Warn);
  CHECK(low->fix == "sysctl -w net.core.somaxconn=1536 net.ipv4.tcp_max_syn_backlog=1536");
  // a node that does not host the store, or a host that does not say: no line
  p.store_local = false;
  const auto elsewhere = evaluate(c, p);
  CHECK_FALSE(find(elsewhere, "listen backlog"));
  p.store_local = true;
  p.somaxconn.reset();
  const auto unknown = evaluate(c, p);
  CHECK_FALSE(find(unknown, "listen backlog"));
}

TEST_CASE("the GPU check: findings fail (advice warns), none is one passing line, unread says why") {
  auto p = healthy();
  p.gpus_read = 2;
  auto lines = evaluate(config(), p);
  REQUIRE(find(lines, "GPU health"));
  CHECK(find(lines, "GPU health")->detail ==
        "2 GPUs read through NVML: none failing, no memory held by other processes");
  p.gpu_findings = {{gpu::Finding::Kind::HeldByOther, "GPU 0", "8.0 GiB of GPU 0 held by pid 7", "kill 7"},
                    {gpu::Finding::Kind::Unfit, "GPU 1", "GPU 1: NVML cannot use it: GPU is lost", "reboot"},
                    {gpu::Finding::Kind::Advice, "GPU 1", "GPU 1: persistence mode is off", "nvidia-smi -pm 1 -i 1"}};
  lines = evaluate(config(), p);
  CHECK(find(lines, "GPU health") == nullptr);
  REQUIRE(find(lines, "GPU 0 memory"));
  CHECK(find(lines, "GPU 0 memory")->verdict == Verdict::Fail);
  CHECK(find(lines, "GPU 1 health")->verdict == Verdict::Fail);
  CHECK(find(lines, "GPU 1 setup")->verdict == Verdict::Warn);
  CHECK(exit_code_of(lines) != 0);
  p = healthy();
  p.gpu_unread = "cannot load libnvidia-ml.so.1 (no NVIDIA driver here)";
  lines = evaluate(config(), p);
  CHECK(find(lines, "GPU health")->detail == "not checked: cannot load libnvidia-ml.so.1 (no NVIDIA driver here)");
}
