#include "launcher/check/preflight.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/text.hpp"
#include "launcher/types/exit_code.hpp"
#include "launcher/config/gpu_list.hpp"

namespace rankrun::launcher::check {
namespace {

constexpr std::uint64_t k_gib = std::uint64_t{1} << 30;
constexpr std::uint64_t k_mib = std::uint64_t{1} << 20;

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out.empty() ? "none" : out;
}

CheckLine pass(std::string what, std::string detail) { return {Verdict::Pass, std::move(what), std::move(detail), {}}; }
CheckLine warn(std::string what, std::string detail, std::string fix) {
  return {Verdict::Warn, std::move(what), std::move(detail), std::move(fix)};
}
CheckLine fail(std::string what, std::string detail, std::string fix) {
  return {Verdict::Fail, std::move(what), std::move(detail), std::move(fix)};
}

}  // namespace

std::vector<CheckLine> evaluate(const LaunchConfig& c, const HostProbe& p) {
  std::vector<CheckLine> out;
  const int world_here = c.nproc;

  // GPUs: what each worker would be pinned to.
  if (c.gpus.empty()) {
    out.push_back(pass("GPUs", fmt::format("none visible: {} CPU worker{}", c.nproc, c.nproc == 1 ? "" : "s")));
  } else if (c.pin) {
    std::string map;
    for (int i = 0; i < c.nproc; ++i)
      map += fmt::format("{}local {} -> GPU {}", i ? ", " : "", i, c.gpus[static_cast<std::size_t>(i)]);
    out.push_back(pass("GPUs", fmt::format("{} visible ({}); {}", c.gpus.size(), join_gpus(c.gpus), map)));
  } else {
    out.push_back(pass("GPUs", fmt::format("{} visible ({}), shared by {} workers (--no-pin)", c.gpus.size(),
                                           join_gpus(c.gpus), c.nproc)));
  }

  // --numa-binding: each worker's CPUs, by its own GPU's NUMA node.
  if (c.numa_binding) {
    std::string map;
    for (std::size_t i = 0; i < c.worker_cpus.size(); ++i) {
      const int node = i < c.worker_numa_node.size() ? c.worker_numa_node[i] : -1;
      map +=
          fmt::format("{}local rank {} ({}) runs on CPUs {}", i ? "; " : "", i,
                      node < 0 ? "no NUMA node known" : fmt::format("GPU {}, NUMA node {}", c.gpus[i], node),
                      c.worker_cpus[i].empty() ? "of its own choosing (not bound)" : format_cpu_list(c.worker_cpus[i]));
    }
    if (map.empty()) {
      out.push_back(warn("NUMA binding", "no worker is bound (no GPU, or NUMA nodes unknown here)",
                         "see rankrun's warning above; leave --numa-binding out where it cannot apply"));
    } else {
      out.push_back(pass(fmt::format("NUMA binding ({})", numa_mode_name(*c.numa_binding)), map));
    }
  }

  // The GPUs' health and who else holds their memory (NVML).
  if (p.gpus_read) {
    for (const auto& f : p.gpu_findings) {
      const bool advice = f.kind == gpu::Finding::Kind::Advice;
      const auto what = f.gpu + (f.kind == gpu::Finding::Kind::HeldByOther ? " memory" : advice ? " setup" : " health");
      out.push_back(advice ? warn(what, f.detail, f.fix) : fail(what, f.detail, f.fix));
    }
    if (p.gpu_findings.empty()) {
      out.push_back(pass("GPU health", fmt::format("{} GPU{} read through NVML: none failing, no memory held by other "
                                                   "processes",
                                                   *p.gpus_read, *p.gpus_read == 1 ? "" : "s")));
    }
  } else if (!p.gpu_unread.empty()) {
    out.push_back(pass("GPU health", "not checked: " + p.gpu_unread));
  }

  // The master address and the store.
  const std::string endpoint =
      fmt::format("{}:{}", c.master_addr, c.master_port ? std::to_string(*c.master_port) : "(a free port)");
  if (!p.master_resolved) {
    out.push_back(fail("master address", fmt::format("'{}' does not resolve: {}", c.master_addr, p.master_error),
                       "give --master-addr as an address or a name this host resolves"));
  } else if (c.nnodes > 1 && is_loopback_address(*p.master_resolved)) {
    out.push_back(fail("master address",
                       fmt::format("'{}' is {}, a loopback address, in a job of {} nodes", c.master_addr,
                                   *p.master_resolved, c.nnodes),
                       "give --master-addr as node 0's address on the network the nodes share"));
  } else {
    out.push_back(pass("master address", fmt::format("'{}' is {}", c.master_addr, *p.master_resolved)));
  }
  if (p.store_error) {
    out.push_back(fail(
        "store " + endpoint, (p.store_local ? "cannot listen here: " : "cannot reach it from here: ") + *p.store_error,
        p.store_local ? (c.nnodes > 1 ? "give every node another free --master-port, or stop what holds it"
                                      : "pass --master-port=0 or another free port, or stop what holds it")
                      : "start node 0 first, check --master-addr/--master-port and the firewall"));
  } else {
    out.push_back(
        pass("store " + endpoint, p.store_local ? "can listen here (node 0 hosts it)" : "reachable from here"));
  }

  // /dev/shm: DataLoader workers and NCCL put their buffers there.
  if (!p.shm_size) {
    out.push_back(fail("/dev/shm", "not mounted", "mount a tmpfs on /dev/shm (docker: --shm-size=8g or --ipc=host)"));
  } else {
    const auto want = k_gib * static_cast<std::uint64_t>(world_here);
    const auto detail = fmt::format("{} size, {} free, for {} worker{}", format_bytes(*p.shm_size),
                                    format_bytes(p.shm_free), world_here, world_here == 1 ? "" : "s");
    if (p.shm_free < want) {
      out.push_back(warn("/dev/shm",
                         detail + fmt::format(" (under 1 GiB per worker{})",
                                              *p.shm_size <= 64 * k_mib ? "; 64 MiB is Docker's default" : ""),
                         "give it more room: docker run --shm-size=" + std::to_string(std::max(1, world_here)) +
                             "g (or --ipc=host), or mount -o remount,size=...G /dev/shm"));
    } else {
      out.push_back(pass("/dev/shm", detail));
    }
  }

  // Open files: sockets to every peer and the store, pipes, shared-memory segments.
  const std::uint64_t world = static_cast<std::uint64_t>(std::max(1, c.nproc * std::max(1, c.nnodes)));
  const std::uint64_t need = 1024 + 16 * world;
  const auto files = fmt::format("soft limit {}, hard {}; a job of {} ranks wants {} or more", p.nofile_soft,
                                 p.nofile_hard, world, need);
  if (p.nofile_soft < need) {
    out.push_back(
        warn("open files", files,
             p.nofile_hard >= need
                 ? fmt::format("ulimit -n {} before starting rankrun", need)
                 : fmt::format("raise the hard limit (LimitNOFILE= in a unit, nofile in limits.conf) to {}", need)));
  } else {
    out.push_back(pass("open files", files));
  }

  // The store's listen backlog: every worker of the job connects to the store host at about the
  // same moment (init_process_group); past the backlog the kernel drops connection requests and
  // the clients wait 1 s, then 3 s, to try again.
  if (p.store_local && p.somaxconn) {
    const std::uint64_t burst = world + 4 * static_cast<std::uint64_t>(std::max(1, c.nnodes));
    const auto syn = p.syn_backlog ? fmt::format(", net.ipv4.tcp_max_syn_backlog={}", *p.syn_backlog) : std::string();
    const auto detail =
        fmt::format("net.core.somaxconn={}{}; the store here takes {} connections at once", *p.somaxconn, syn, burst);
    if (*p.somaxconn < burst || (p.syn_backlog && *p.syn_backlog < burst)) {
      out.push_back(warn("listen backlog", detail + " (a connection past the backlog waits 1 s or more to try again)",
                         fmt::format("sysctl -w net.core.somaxconn={0} net.ipv4.tcp_max_syn_backlog={0}", burst)));
    } else {
      out.push_back(pass("listen backlog", detail));
    }
  }

  // Socket interfaces named for NCCL and gloo.
  for (const auto& i : p.ifnames) {
    const auto what = i.variable + "=" + i.value;
    if (i.up.empty()) {
      out.push_back(fail(what, "names no interface that is up; interfaces here: " + joined(i.all),
                         "set it to an interface that is up (ip -br link), or unset it"));
    } else {
      out.push_back(pass(what, "matches " + joined(i.up)));
    }
  }

  // The workers' interpreter, and where it came from.
  if (p.python) {
    const auto origin = c.python_origin.empty() ? std::string() : " (" + c.python_origin + ")";
    if (p.torch_version) {
      out.push_back(pass(
          "python",
          fmt::format("{}{} imports torch {}{}", p.interpreter, origin, *p.torch_version,
                      p.torch_libuv == false ? ", built without libuv: rankrun makes its workers' store client "
                                               "without it (under torchrun, init_process_group fails with \"use_libuv "
                                               "was requested\"; a script's own TCPStore needs use_libuv=False)"
                                             : "")));
    } else {
      out.push_back(fail("python", fmt::format("{}{} cannot import torch: {}", p.interpreter, origin, p.python_error),
                         "install PyTorch for this interpreter, or point PYTHON_EXEC at one that has it"));
    }
  }

  // RemoveIPC: logind deletes a user's shared memory when the user's last session ends.
  if (!p.system_user && p.remove_ipc && !p.linger) {
    out.push_back(
        warn("RemoveIPC",
             fmt::format("user {} is not a system user, lingering is off and logind's RemoveIPC=yes: its "
                         "/dev/shm segments (DataLoader's too) are deleted when its last session ends",
                         p.user),
             fmt::format("loginctl enable-linger {} (or run the job as a system user, or RemoveIPC=no in logind.conf)",
                         p.user)));
  } else {
    out.push_back(pass("RemoveIPC", p.system_user ? fmt::format("{} is a system user", p.user)
                                    : p.linger    ? fmt::format("lingering is on for {}", p.user)
                                                  : "logind's RemoveIPC is off"));
  }

  // Write access: the job cgroup and the log directory.
  if (!p.cgroup_available) {
    out.push_back(warn("cgroup", "no writable cgroup v2 here: cleanup falls back to the process tree",
                       "run with a delegated cgroup (systemd: Delegate=yes) for the strongest cleanup"));
  } else if (p.cgroup_error) {
    out.push_back(
        warn("cgroup", "cannot create the job's cgroup: " + *p.cgroup_error,
             "give rankrun a delegated cgroup (systemd: Delegate=yes); cleanup falls back to the process tree"));
  } else {
    out.push_back(pass("cgroup", "rankrun can make the job's cgroup"));
  }
  if (p.run_dir_place) {
    out.push_back(fail("run directory", p.run_dir_place->what, p.run_dir_place->fix));
  } else if (!c.log_dir.empty()) {
    if (p.log_dir_error) {
      out.push_back(
          fail("--log-dir " + c.log_dir, "not writable: " + *p.log_dir_error, "create it or choose a writable one"));
    } else {
      out.push_back(pass("--log-dir " + c.log_dir, "writable"));
    }
  }
  return out;
}

std::string format_checks(const std::vector<CheckLine>& lines, bool fancy) {
  std::string out;
  int failed = 0;
  int warned = 0;
  for (const auto& l : lines) {
    const char* mark = l.verdict == Verdict::Pass   ? (fancy ? "\u2713" : "ok  ")
                       : l.verdict == Verdict::Warn ? (fancy ? "!" : "warn")
                                                    : (fancy ? "\u2717" : "FAIL");
    out += fmt::format("{} {}: {}\n", mark, l.what, l.detail);
    if (l.verdict != Verdict::Pass) out += fmt::format("{}   fix: {}\n", fancy ? "" : "  ", l.fix);
    failed += l.verdict == Verdict::Fail;
    warned += l.verdict == Verdict::Warn;
  }
  out += failed ? fmt::format("rankrun --check: {} of {} checks failed{}\n", failed, lines.size(),
                              warned ? fmt::format(", {} warning{}", warned, warned == 1 ? "" : "s") : "")
                : fmt::format("rankrun --check: all {} checks passed{}\n", lines.size(),
                              warned ? fmt::format(", {} warning{}", warned, warned == 1 ? "" : "s") : "");
  return out;
}

int exit_code_of(const std::vector<CheckLine>& lines) {
  const bool failed = std::any_of(lines.begin(), lines.end(), [](const auto& l) { return l.verdict == Verdict::Fail; });
  return failed ? exit_code(JobEnding::ended_early(EarlyEnd::Usage)) : 0;
}

}  // namespace rankrun::launcher::check
