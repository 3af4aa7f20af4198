#include "launcher/config/slurm.hpp"

#include "base/parse_number.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace rankrun::launcher {
namespace {

std::optional<long long> to_number(std::string_view s) {
  const auto v = parse_number<long long>(s);
  if (!v || *v < 0) return std::nullopt;
  return v;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "01-04,07" -> {"01","02","03","04","07"} (width of the lower bound kept, as Slurm does).
std::vector<std::string> expand_range_set(std::string_view inside, std::string_view whole) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= inside.size()) {
    auto end = inside.find(',', start);
    if (end == std::string_view::npos) end = inside.size();
    const auto item = inside.substr(start, end - start);
    const auto dash = item.find('-');
    const auto lo_text = item.substr(0, dash);
    const auto hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    if (!all_digits(lo_text) || !all_digits(hi_text)) {
      throw std::invalid_argument(fmt::format("'{}' in the host list '{}' is not a number or range", item, whole));
    }
    const auto lo = to_number(lo_text);
    const auto hi = to_number(hi_text);
    if (!lo || !hi || *hi < *lo)
      throw std::invalid_argument(fmt::format("range '{}' in the host list '{}' is empty", item, whole));
    if (*hi - *lo > (1 << 20))
      throw std::invalid_argument(fmt::format("range '{}' in the host list '{}' is too long", item, whole));
    const auto width = lo_text.size();
    for (auto v = *lo; v <= *hi; ++v) out.push_back(fmt::format("{:0{}}", v, width));
    start = end + 1;
  }
  return out;
}

// One entry ("rack[1-2]-n[01-02]") into `out`.
void expand_entry(std::string_view entry, std::string_view whole, std::vector<std::string>& out,
                  std::size_t max_hosts) {
  std::vector<std::string> names{""};
  std::size_t i = 0;
  while (i < entry.size()) {
    const auto open = entry.find('[', i);
    const auto literal = entry.substr(i, open == std::string_view::npos ? std::string_view::npos : open - i);
    if (literal.find(']') != std::string_view::npos) {
      throw std::invalid_argument(fmt::format("unbalanced ']' in the host list '{}'", whole));
    }
    for (auto& n : names) n.append(literal);
    if (open == std::string_view::npos) break;
    const auto close = entry.find(']', open);
    if (close == std::string_view::npos)
      throw std::invalid_argument(fmt::format("unbalanced '[' in the host list '{}'", whole));
    const auto values = expand_range_set(entry.substr(open + 1, close - open - 1), whole);
    if (names.size() * values.size() > max_hosts) {
      throw std::invalid_argument(
          fmt::format("the host list '{}' names more than {} hosts", whole.substr(0, 64), max_hosts));
    }
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const auto& n : names) {
      for (const auto& v : values) next.push_back(n + v);
    }
    names = std::move(next);
    i = close + 1;
  }
  for (auto& n : names) {
    if (n.empty()) throw std::invalid_argument(fmt::format("the host list '{}' has an empty name", whole));
    if (out.size() >= max_hosts) {
      throw std::invalid_argument(
          fmt::format("the host list '{}' names more than {} hosts", whole.substr(0, 64), max_hosts));
    }
    out.push_back(std::move(n));
  }
}

const std::string* find(const std::map<std::string, std::string>& env, const char* key) {
  const auto it = env.find(key);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view list, std::size_t max_hosts) {
  std::vector<std::string> out;
  std::size_t start = 0;
  int depth = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) throw std::invalid_argument(fmt::format("unbalanced ']' in the host list '{}'", list));
    if (c == ',' && depth == 0) {
      const auto entry = list.substr(start, i - start);
      if (entry.empty()) throw std::invalid_argument(fmt::format("the host list '{}' has an empty entry", list));
      expand_entry(entry, list, out, max_hosts);
      start = i + 1;
    }
  }
  if (depth != 0) throw std::invalid_argument(fmt::format("unbalanced '[' in the host list '{}'", list));
  return out;
}

std::uint16_t slurm_port(std::string_view job_id, std::string_view step_id) {
  std::uint32_t h = 2166136261u;  // FNV-1a
  for (const auto part : {job_id, std::string_view("."), step_id}) {
    for (const char c : part) {
      h ^= static_cast<unsigned char>(c);
      h *= 16777619u;
    }
  }
  return static_cast<std::uint16_t>(20000 + h % 10000);
}

std::optional<int> max_tasks_per_node(std::string_view spec) {
  int best = 0;
  std::size_t start = 0;
  while (start <= spec.size()) {
    auto end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    auto item = spec.substr(start, end - start);
    if (const auto paren = item.find('('); paren != std::string_view::npos) item = item.substr(0, paren);
    const auto v = to_number(item);
    if (!v) return std::nullopt;
    best = std::max(best, static_cast<int>(std::min<long long>(*v, 1 << 20)));
    start = end + 1;
  }
  return best;
}

std::optional<std::string> node_addr_in(std::string_view text) {
  const auto at = text.find("NodeAddr=");
  if (at == std::string_view::npos) return std::nullopt;
  auto value = text.substr(at + 9);
  value = value.substr(0, value.find_first_of(" \t\n"));
  if (value.empty()) return std::nullopt;
  return std::string(value);
}

std::optional<SlurmPlan> slurm_plan(const std::map<std::string, std::string>& env, bool tasks_per_node_ok) {
  const auto* job = find(env, "SLURM_JOB_ID");
  if (!job) job = find(env, "SLURM_JOBID");
  if (!job) return std::nullopt;
  SlurmPlan p;
  p.job_id = *job;
  const auto number = [&env](const char* key) -> std::optional<int> {
    const auto* v = find(env, key);
    if (!v) return std::nullopt;
    const auto n = to_number(*v);
    if (!n || *n > (1 << 20)) throw SlurmError(fmt::format("{}='{}' is not a count; is this a Slurm job?", key, *v));
    return static_cast<int>(*n);
  };
  const auto* step = find(env, "SLURM_STEP_ID");
  if (!step) {
    // The batch script itself, not a task of a step.
    const auto nodes = number("SLURM_JOB_NUM_NODES") ? number("SLURM_JOB_NUM_NODES") : number("SLURM_NNODES");
    if (nodes && *nodes > 1) {
      throw SlurmError(
          fmt::format("rankrun runs in the batch script of Slurm job {} on {} nodes, so it would start on one node "
                      "only; run it with srun (srun --ntasks-per-node=1 rankrun ...) so that it runs on every node",
                      *job, *nodes));
    }
    p.run_id = *job;
    p.sources.push_back({"--nnodes", "1", "the batch script of a one-node allocation"});
    return p;
  }
  p.run_id = *job + "." + *step;
  const char* nodes_key = find(env, "SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_NNODES";
  const int nodes = number(nodes_key).value_or(1);
  const char* tasks_key = find(env, "SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  const auto* per_node = find(env, tasks_key);
  const int tasks_per_node = per_node ? max_tasks_per_node(*per_node).value_or(1) : 1;
  if (tasks_per_node > 1 && !tasks_per_node_ok) {
    throw SlurmError(
        fmt::format("this Slurm step runs {} rankrun tasks on a node ({}={}); rankrun starts the workers of a node "
                    "itself, so run one task per node (srun --ntasks-per-node=1), or pass "
                    "--slurm-tasks-per-node-ok to make every task a node of its own",
                    tasks_per_node, tasks_key, *per_node));
  }
  if (tasks_per_node > 1) {
    const char* ntasks_key = find(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    p.nnodes = number(ntasks_key).value_or(nodes);
    p.node_rank = number("SLURM_PROCID").value_or(0);
    p.sources.push_back({"--nnodes", std::to_string(p.nnodes), ntasks_key});
    p.sources.push_back({"--node-rank", std::to_string(p.node_rank), "SLURM_PROCID"});
  } else {
    p.nnodes = nodes;
    p.node_rank = number("SLURM_NODEID").value_or(0);
    p.sources.push_back({"--nnodes", std::to_string(p.nnodes), nodes_key});
    p.sources.push_back({"--node-rank", std::to_string(p.node_rank), "SLURM_NODEID"});
  }
  if (p.node_rank >= p.nnodes) {
    throw SlurmError(fmt::format("SLURM_NODEID={} but the step has {} nodes; is this environment from another step?",
                                 p.node_rank, p.nnodes));
  }
  const char* list_key = find(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const auto* list = find(env, list_key);
  if (!list) list = find(env, "SLURM_NODELIST");
  if (!list)
    throw SlurmError("this Slurm step has no node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST); pass --master-addr");
  std::vector<std::string> hosts;
  try {
    hosts = expand_hostlist(*list);
  } catch (const std::invalid_argument& e) {
    throw SlurmError(std::string(e.what()) + " (" + list_key + "); pass --master-addr");
  }
  p.first_host = hosts.front();
  p.sources.push_back({"--master-addr", p.first_host, std::string("the first host of ") + list_key});
  p.master_port = slurm_port(*job, *step);
  p.sources.push_back({"--master-port", std::to_string(p.master_port), "a hash of the job and step id " + p.run_id});
  p.sources.push_back({"--rdzv-id", p.run_id, "SLURM_JOB_ID.SLURM_STEP_ID"});
  if (!find(env, "CUDA_VISIBLE_DEVICES")) {
    if (const auto* gpus = find(env, "SLURM_STEP_GPUS")) {
      p.gpus = *gpus;
      p.sources.push_back({"--gpus", *gpus, "SLURM_STEP_GPUS"});
    }
  }
  return p;
}

}  // namespace rankrun::launcher
