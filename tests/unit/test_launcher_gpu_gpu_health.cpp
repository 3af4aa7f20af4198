#include <doctest/doctest.h>

#include <map>

#include "launcher/gpu/gpu_health.hpp"

using namespace rankrun::launcher::gpu;

namespace {

GpuState h200(const std::string& id) {
  GpuState g;
  g.id = id;
  g.name = "NVIDIA H200";
  g.ecc_uncorrected = 0;
  g.persistence = true;
  return g;
}

std::function<ProcessFacts(pid_t)> table(std::map<pid_t, ProcessFacts> facts) {
  return [facts](pid_t pid) {
    const auto it = facts.find(pid);
    return it == facts.end() ? ProcessFacts{} : it->second;
  };
}

ProcessFacts live(std::string user, std::string command) {
  ProcessFacts f;
  f.alive = true;
  f.state = 'S';
  f.user = std::move(user);
  f.command = std::move(command);
  f.age_seconds = 3 * 3600 + 12 * 60;
  return f;
}

}  // namespace

TEST_CASE("memory held by another process is named with pid, user, command, memory and age") {
  auto g = h200("0");
  g.processes = {{4242, std::uint64_t{8700} << 20}};
  auto orphan = live("ana", "python train.py --lr 3e-4");
  orphan.parent_gone = true;
  const auto found = held_by_others({g}, table({{4242, orphan}}), "ana");
  REQUIRE(found.size() == 1);
  CHECK(found[0].kind == Finding::Kind::HeldByOther);
  CHECK(found[0].gpu == "GPU 0");
  CHECK(found[0].detail ==
        "8.5 GiB of GPU 0 (NVIDIA H200) held by pid 4242 (user ana, running 3h12m): python train.py --lr 3e-4; it "
        "looks orphaned: its parent is gone");
  CHECK(found[0].fix.find("it is yours and left behind: kill 4242") == 0);
}

TEST_CASE("the fix depends on whose process it is and whether it looks orphaned") {
  auto g = h200("1");
  g.processes = {{10, std::nullopt}, {11, 1u << 30}, {12, 1u << 30}};
  auto others = live("bo", "python serve.py");
  auto mine = live("ana", "jupyter-kernel");
  auto lost = live("ana", "python old.py");
  lost.no_session = true;
  const auto found = held_by_others({g}, table({{10, others}, {11, mine}, {12, lost}}), "ana");
  REQUIRE(found.size() == 3);
  CHECK(found[0].detail.find("memory unknown of GPU 1") == 0);
  CHECK(found[0].fix.find("ask bo (or an administrator) to stop it") == 0);
  CHECK(found[1].fix.find("it is yours: stop it (kill 11)") == 0);
  CHECK(found[1].detail.find("orphaned") == std::string::npos);
  CHECK(found[2].detail.find("it looks orphaned: its session is gone") != std::string::npos);
}

TEST_CASE("the job's own processes, its workers and processes that exited are not someone else's") {
  auto g = h200("0");
  g.processes = {{20, 1u << 30}, {21, 1u << 30}, {22, 1u << 30}};
  auto of_job = live("ana", "python -c from multiprocessing");
  of_job.of_job = true;
  const auto found = held_by_others({g}, table({{20, of_job}, {21, live("ana", "python train.py")}}), "ana",
                                    [](pid_t pid) { return pid == 21; });
  CHECK(found.empty());  // 20: the job's; 21: a worker; 22: gone
}

TEST_CASE("unfit GPUs: each NVML finding with what to do") {
  auto lost = h200("0");
  lost.name.clear();
  lost.unreachable = "GPU is lost";
  lost.unreachable_code = 15;
  auto reset = h200("1");
  reset.unreachable = "GPU requires reset";
  reset.unreachable_code = 16;
  auto ecc = h200("2");
  ecc.ecc_uncorrected = 1;
  auto pages = h200("3");
  pages.retired_pages_pending = true;
  auto rows = h200("4");
  rows.remap_pending = true;
  auto broken = h200("5");
  broken.remap_pending = true;
  broken.remap_failed = true;
  auto prohibited = h200("6");
  prohibited.compute_mode = k_compute_prohibited;
  const auto found = unfit({lost, reset, ecc, pages, rows, broken, prohibited, h200("7")}, false, false);
  REQUIRE(found.size() == 7);
  CHECK(found[0].detail == "GPU 0: NVML cannot use it: GPU is lost");
  CHECK(found[0].fix.find("fell off the bus: drain this node and reboot it") != std::string::npos);
  CHECK(found[1].fix.find("nvidia-smi -r -i 1") != std::string::npos);
  CHECK(found[2].detail == "GPU 2 (NVIDIA H200): 1 uncorrectable ECC error since the driver loaded");
  CHECK(found[3].detail.find("retired memory pages wait for a reset") != std::string::npos);
  CHECK(found[4].detail.find("remapped memory rows wait for a reset") != std::string::npos);
  CHECK(found[5].detail.find("a row remapping failed") != std::string::npos);  // failed wins over pending
  CHECK(found[6].fix.find("nvidia-smi -c DEFAULT -i 6") == 0);
  for (const auto& f : found) CHECK(f.kind == Finding::Kind::Unfit);
}

TEST_CASE("exclusive-process mode matters only when workers share the GPU; persistence only as advice") {
  auto g = h200("0");
  g.compute_mode = k_compute_exclusive_process;
  g.persistence = false;
  CHECK(unfit({g}, false, false).empty());
  const auto shared = unfit({g}, true, false);
  REQUIRE(shared.size() == 1);
  CHECK(shared[0].detail.find("Exclusive Process, and --no-pin gives it to several workers") != std::string::npos);
  const auto advice = unfit({g}, false, true);
  REQUIRE(advice.size() == 1);
  CHECK(advice[0].kind == Finding::Kind::Advice);
  CHECK(advice[0].fix == "nvidia-smi -pm 1 -i 0 (as root), or run nvidia-persistenced");
}

TEST_CASE("the attempt's holders: its workers, the job's processes, and exited processes; not others") {
  auto g0 = h200("0");
  g0.processes = {{30, 8ull << 30}, {31, 512u << 20}, {32, 1u << 30}, {33, 1u << 30}};
  auto g1 = h200("1");
  g1.processes = {{34, std::nullopt}};
  auto of_job = live("ana", "torch_shm_manager");
  of_job.of_job = true;
  const auto facts = table({{31, of_job}, {32, live("bo", "python serve.py")}, {30, live("ana", "python train.py")}});
  const auto holders = attempt_holders({g0, g1}, facts, [](pid_t pid) { return pid == 30; });
  REQUIRE(holders.size() == 4);
  CHECK(holders[0].pid == 30);
  CHECK(holders[1].pid == 31);
  CHECK(holders[2].pid == 33);  // exited, still listed
  CHECK(holders[3].pid == 34);
  CHECK(describe_holders(holders) == "GPU 0: pid 30 (8.0 GiB), pid 31 (512 MiB), pid 33 (1.0 GiB); GPU 1: pid 34");
}

TEST_CASE("what is still held at the deadline: state, and why it cannot go") {
  Holder d{"GPU 0", 40, 8ull << 30, live("ana", "python train.py")};
  d.facts.state = 'D';
  Holder gone{"GPU 1", 41, 1ull << 30, {}};
  const auto lines = describe_stuck({d, gone}, 30.2);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] ==
        "pid 40 (python train.py, state D (disk sleep)) still holds 8.0 GiB of GPU 0 30s after the attempt ended: it "
        "is in uninterruptible sleep in the kernel and cannot be killed; the node needs a reboot");
  CHECK(lines[1].find("pid 41 has exited, but GPU 1 still lists its 1.0 GiB 30s after the attempt ended") == 0);
}

TEST_CASE("ages") {
  CHECK(format_age(12.9) == "12s");
  CHECK(format_age(245) == "4m05s");
  CHECK(format_age(90000) == "1d01h");
}
