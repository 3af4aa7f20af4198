#include "launcher/gpu/gpu_health.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "base/text.hpp"

#include "launcher/processes/proc_parse.hpp"

namespace rankrun::launcher::gpu {

namespace {

std::string memory_of(const std::optional<std::uint64_t>& bytes) {
  return bytes ? format_bytes(*bytes) : "memory unknown";
}

std::string short_id(const GpuState& g) { return "GPU " + g.id; }

}  // namespace

std::string format_age(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds));
  if (s >= 86400) return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string gpu_label(const GpuState& g) {
  return g.name.empty() ? short_id(g) : fmt::format("{} ({})", short_id(g), g.name);
}

std::vector<Finding> held_by_others(const std::vector<GpuState>& gpus, const std::function<ProcessFacts(pid_t)>& facts,
                                    const std::string& me, const std::function<bool(pid_t)>& is_worker) {
  std::vector<Finding> out;
  for (const auto& g : gpus) {
    for (const auto& p : g.processes) {
      if (is_worker && is_worker(p.pid)) continue;
      const ProcessFacts f = facts(p.pid);
      // A process of the job (a DataLoader worker, a helper) is not someone else's; one that has
      // exited is memory the driver is releasing.
      if (f.of_job || !f.alive) continue;
      const bool orphan = f.parent_gone || f.no_session;
      std::string why;
      if (f.parent_gone && f.no_session)
        why = "; it looks orphaned: its parent and its session are gone";
      else if (f.parent_gone)
        why = "; it looks orphaned: its parent is gone";
      else if (f.no_session)
        why = "; it looks orphaned: its session is gone";
      Finding x;
      x.kind = Finding::Kind::HeldByOther;
      x.gpu = short_id(g);
      x.detail = fmt::format("{} of {} held by pid {} (user {}, running {}): {}{}", memory_of(p.used_bytes),
                             gpu_label(g), p.pid, f.user.empty() ? "?" : f.user, format_age(f.age_seconds),
                             f.command.empty() ? "?" : f.command, why);
      if (orphan && f.user == me) {
        x.fix = fmt::format(
            "it is yours and left behind: kill {} (kill -9 {} if it stays), or give the job other GPUs "
            "with --gpus",
            p.pid, p.pid);
      } else if (f.user == me) {
        x.fix = fmt::format("it is yours: stop it (kill {}) or give the job other GPUs with --gpus", p.pid);
      } else {
        x.fix = fmt::format("ask {} (or an administrator) to stop it, or give the job other GPUs with --gpus",
                            f.user.empty() ? "its owner" : f.user);
      }
      out.push_back(std::move(x));
    }
  }
  return out;
}

std::vector<Finding> unfit(const std::vector<GpuState>& gpus, bool shared, bool advice) {
  std::vector<Finding> out;
  const auto add = [&](const GpuState& g, std::string detail, std::string fix,
                       Finding::Kind kind = Finding::Kind::Unfit) {
    out.push_back({kind, short_id(g), fmt::format("{}: {}", gpu_label(g), detail), std::move(fix)});
  };
  for (const auto& g : gpus) {
    if (g.unreachable) {
      constexpr int k_gpu_is_lost = 15;
      constexpr int k_reset_required = 16;
      std::string fix =
          "leave it out with --gpus, and drain this node until the GPU is looked at (nvidia-smi -q, "
          "the kernel log's Xid lines)";
      if (g.unreachable_code == k_gpu_is_lost) {
        fix = "the GPU fell off the bus: drain this node and reboot it; until then leave the GPU out with --gpus";
      } else if (g.unreachable_code == k_reset_required) {
        fix = fmt::format(
            "reset it once nothing uses it (nvidia-smi -r -i {}) or reboot; until then leave it out "
            "with --gpus",
            g.id);
      }
      add(g, "NVML cannot use it: " + *g.unreachable, std::move(fix));
      continue;
    }
    if (g.ecc_uncorrected && *g.ecc_uncorrected > 0) {
      add(g,
          fmt::format("{} uncorrectable ECC error{} since the driver loaded", *g.ecc_uncorrected,
                      *g.ecc_uncorrected == 1 ? "" : "s"),
          fmt::format("its memory returned bad data: drain this node, reset the GPU (nvidia-smi -r -i {}) and watch "
                      "whether errors come back; until then leave it out with --gpus",
                      g.id));
    }
    if (g.remap_failed) {
      add(g, "a row remapping failed: the GPU's memory cannot be repaired in place",
          "drain this node and have the GPU replaced; until then leave it out with --gpus");
    } else if (g.remap_pending) {
      add(g, "remapped memory rows wait for a reset",
          fmt::format("reset the GPU once nothing uses it (nvidia-smi -r -i {}) or reboot the node", g.id));
    }
    if (g.retired_pages_pending) {
      add(g, "retired memory pages wait for a reset",
          fmt::format("reset the GPU once nothing uses it (nvidia-smi -r -i {}) or reboot the node", g.id));
    }
    if (g.compute_mode == k_compute_prohibited) {
      add(g, "its compute mode is Prohibited: no process can use it",
          fmt::format("nvidia-smi -c DEFAULT -i {} (as root), or leave it out with --gpus", g.id));
    } else if (g.compute_mode == k_compute_exclusive_process && shared) {
      add(g, "its compute mode is Exclusive Process, and --no-pin gives it to several workers: only one can use it",
          fmt::format("drop --no-pin (one GPU per worker), or nvidia-smi -c DEFAULT -i {} (as root)", g.id));
    }
    if (advice && g.persistence && !*g.persistence) {
      add(g, "persistence mode is off: each job's first CUDA call waits for the driver to set the GPU up",
          fmt::format("nvidia-smi -pm 1 -i {} (as root), or run nvidia-persistenced", g.id), Finding::Kind::Advice);
    }
  }
  return out;
}

std::vector<Holder> attempt_holders(const std::vector<GpuState>& gpus, const std::function<ProcessFacts(pid_t)>& facts,
                                    const std::function<bool(pid_t)>& is_attempt) {
  std::vector<Holder> out;
  for (const auto& g : gpus) {
    for (const auto& p : g.processes) {
      const ProcessFacts f = facts(p.pid);
      if (is_attempt(p.pid) || f.of_job || !f.alive) out.push_back({short_id(g), p.pid, p.used_bytes, f});
    }
  }
  return out;
}

std::string describe_holders(const std::vector<Holder>& holders) {
  std::map<std::string, std::vector<std::string>> by_gpu;
  for (const auto& h : holders) {
    by_gpu[h.gpu].push_back(h.bytes ? fmt::format("pid {} ({})", h.pid, format_bytes(*h.bytes))
                                    : fmt::format("pid {}", h.pid));
  }
  std::string out;
  for (const auto& [gpu, list] : by_gpu) {
    if (!out.empty()) out += "; ";
    out += gpu + ": " + fmt::format("{}", fmt::join(list, ", "));
  }
  return out;
}

std::vector<std::string> describe_stuck(const std::vector<Holder>& holders, double waited_seconds) {
  std::vector<std::string> out;
  for (const auto& h : holders) {
    const auto memory = memory_of(h.bytes);
    if (!h.facts.alive) {
      out.push_back(
          fmt::format("pid {} has exited, but {} still lists its {} {:.0f}s after the attempt ended: the "
                      "driver has not released it; look at the kernel log (Xid) and reset the GPU or "
                      "reboot the node",
                      h.pid, h.gpu, memory, waited_seconds));
      continue;
    }
    out.push_back(fmt::format("pid {} ({}, state {}{}) still holds {} of {} {:.0f}s after the attempt ended{}", h.pid,
                              h.facts.command.empty() ? "?" : h.facts.command, h.facts.state,
                              h.facts.state == '?' ? "" : " (" + describe_proc_state(h.facts.state) + ")", memory,
                              h.gpu, waited_seconds,
                              h.facts.state == 'D' ? ": it is in uninterruptible sleep in the kernel and cannot be "
                                                     "killed; the node needs a reboot"
                                                   : ": it did not die"));
  }
  return out;
}

}  // namespace rankrun::launcher::gpu
