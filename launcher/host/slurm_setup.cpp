#include "launcher/host/slurm_setup.hpp"

#include <cctype>
#include <spdlog/spdlog.h>

#include "launcher/host/host_facts.hpp"
#include "launcher/types/launch_error.hpp"
#include "launcher/config/slurm.hpp"

namespace rankrun::launcher {
namespace {

// Slurm's NodeAddr for `node`, from `scontrol show node NODE -o`; "" when scontrol is missing or
// does not know it.
std::string slurm_node_addr(const std::string& node) {
  for (char c : node) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return {};
  }
  return node_addr_in(run_shell("scontrol show node '" + node + "' -o 2>/dev/null", 1 << 20).output).value_or("");
}

}  // namespace

std::string apply_slurm(LaunchOptions& o, const EnvMap& env) {
  std::optional<SlurmPlan> plan;
  try {
    plan = slurm_plan(env, o.slurm_tasks_per_node_ok);
  } catch (const SlurmError& e) {
    throw LaunchError(e.what());
  }
  if (!plan) return {};
  const auto given = [&o](const char* flag) { return o.given.count(flag) > 0; };
  // With -v: where each value came from.
  const auto note = [](const SlurmSource& s, bool used) {
    spdlog::info("slurm: {}={} from {}{}", s.what, s.value, s.from,
                 used ? "" : " (not used: given on the command line)");
  };
  const auto source = [&plan](const std::string& what) -> const SlurmSource* {
    for (const auto& s : plan->sources) {
      if (s.what == what) return &s;
    }
    return nullptr;
  };
  if (const auto* s = source("--nnodes")) {
    note(*s, !given("nnodes"));
    if (!given("nnodes")) o.nnodes = std::to_string(plan->nnodes);
  }
  if (const auto* s = source("--node-rank")) {
    note(*s, !given("node-rank"));
    if (!given("node-rank")) o.node_rank = plan->node_rank;
  }
  if (const auto* s = source("--rdzv-id")) {
    note(*s, !given("rdzv-id"));
    if (!given("rdzv-id")) o.rdzv_id = plan->run_id;
  }
  if (const auto* s = source("--gpus")) {
    note(*s, !o.gpus);
    if (!o.gpus) o.gpus = plan->gpus;
  }
  if (!given("nproc-per-node") && (o.gpus || env.count("CUDA_VISIBLE_DEVICES"))) {
    o.nproc_per_node = "gpu";
    spdlog::info("slurm: --nproc-per-node=gpu: one worker per GPU of this step");
  }
  const bool several = !given("nnodes") ? plan->nnodes > 1 : o.nnodes != "1" && o.nnodes != "1:1";
  if (several && !plan->first_host.empty()) {
    if (const auto* s = source("--master-addr")) {
      note(*s, !given("master-addr"));
      if (!given("master-addr")) {
        std::string why;
        auto addr = resolve_address(plan->first_host, why);
        if (addr.empty() || is_loopback_address(addr)) {
          // Not in DNS, or only as this host's loopback alias: ask Slurm where the node is.
          if (auto slurm_addr = slurm_node_addr(plan->first_host); !slurm_addr.empty()) {
            std::string why2;
            const auto resolved = resolve_address(slurm_addr, why2);
            addr = resolved.empty() ? slurm_addr : resolved;
          }
        }
        if (addr.empty()) {
          throw LaunchError("the first host of this Slurm step, '" + plan->first_host + "', cannot be resolved (" +
                            why + ") and scontrol knows no NodeAddr for it; pass --master-addr with node 0's address");
        }
        spdlog::info("slurm: {} is {}", plan->first_host, addr);
        o.master_addr = addr;
      }
    }
    if (const auto* s = source("--master-port")) {
      note(*s, !given("master-port"));
      if (!given("master-port")) o.master_port = plan->master_port;
    }
  }
  return plan->job_id;
}

}  // namespace rankrun::launcher
