#include "rankrun/worker_context.hpp"

#include <cstdlib>
#include <limits>
#include <string_view>

namespace rankrun {
namespace {

constexpr const char* k_rank_vars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"};
constexpr const char* k_all_vars[] = {"RANK",
                                      "LOCAL_RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "TORCHELASTIC_RESTART_COUNT",
                                      "TORCHELASTIC_ERROR_FILE",
                                      "CUDA_VISIBLE_DEVICES",
                                      "RANKRUN_HEARTBEAT_INTERVAL_MS"};

const std::string* find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

std::string show(const char* name, const std::string& value) { return std::string(name) + "='" + value + "'"; }

// Plain decimal only: "+1", " 1", "1e3" and "0x10" are rejected rather than half-parsed,
// because a launcher never writes them and a hand-set typo should not silently pass.
std::optional<long long> parse_decimal(std::string_view text, long long max) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  long long value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > max) return std::nullopt;
  return value;
}

std::optional<int> parse_count(const EnvMap& env, const char* name, std::vector<std::string>& errors) {
  const std::string* value = find(env, name);
  if (!value) return std::nullopt;
  auto parsed = parse_decimal(*value, std::numeric_limits<int>::max());
  if (!parsed) {
    errors.push_back(show(name, *value) + " is not a non-negative integer");
    return std::nullopt;
  }
  return static_cast<int>(*parsed);
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

void check_rank_vars_together(const EnvMap& env, std::vector<std::string>& errors) {
  std::vector<std::string> set, unset;
  for (const char* name : k_rank_vars) {
    if (const std::string* value = find(env, name))
      set.push_back(show(name, *value));
    else
      unset.push_back(name);
  }
  if (set.empty() || unset.empty()) return;
  errors.push_back(join(set, ", ") + (set.size() == 1 ? " is" : " are") + " set but " + join(unset, ", ") +
                   (unset.size() == 1 ? " is" : " are") +
                   " not; a launcher sets all of RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE "
                   "(unset them all to run as a world of one)");
}

void parse_store(const EnvMap& env, WorkerContext& context, std::vector<std::string>& errors) {
  const std::string* addr = find(env, "MASTER_ADDR");
  const std::string* port = find(env, "MASTER_PORT");
  if (addr && addr->empty()) errors.push_back("MASTER_ADDR is set but empty");
  if (addr && !port) errors.push_back(show("MASTER_ADDR", *addr) + " is set but MASTER_PORT is not");
  if (port && !addr) errors.push_back(show("MASTER_PORT", *port) + " is set but MASTER_ADDR is not");
  if (port) {
    auto parsed = parse_decimal(*port, 65535);
    if (!parsed || *parsed == 0)
      errors.push_back(show("MASTER_PORT", *port) + " is not a port number (1-65535)");
    else
      context.master_port = static_cast<std::uint16_t>(*parsed);
  }
  if (addr) context.master_addr = *addr;
}

}  // namespace

std::string EnvParseResult::error_message() const { return "invalid worker environment:\n  " + join(errors, "\n  "); }

EnvParseResult parse_worker_env(const EnvMap& env) {
  EnvParseResult result;
  std::vector<std::string>& errors = result.errors;
  WorkerContext context;

  check_rank_vars_together(env, errors);
  auto rank = parse_count(env, "RANK", errors);
  auto local_rank = parse_count(env, "LOCAL_RANK", errors);
  auto world_size = parse_count(env, "WORLD_SIZE", errors);
  auto local_world_size = parse_count(env, "LOCAL_WORLD_SIZE", errors);
  if (world_size && *world_size == 0) errors.push_back("WORLD_SIZE='0' must be at least 1");
  if (local_world_size && *local_world_size == 0) errors.push_back("LOCAL_WORLD_SIZE='0' must be at least 1");
  if (rank && world_size && *world_size > 0 && *rank >= *world_size)
    errors.push_back("RANK=" + std::to_string(*rank) + " must be less than WORLD_SIZE=" + std::to_string(*world_size));
  if (local_rank && local_world_size && *local_world_size > 0 && *local_rank >= *local_world_size)
    errors.push_back("LOCAL_RANK=" + std::to_string(*local_rank) +
                     " must be less than LOCAL_WORLD_SIZE=" + std::to_string(*local_world_size));
  if (world_size && local_world_size && *local_world_size > *world_size)
    errors.push_back("LOCAL_WORLD_SIZE=" + std::to_string(*local_world_size) +
                     " must not exceed WORLD_SIZE=" + std::to_string(*world_size));

  context.launched = rank || local_rank || world_size || local_world_size;
  if (rank) context.rank = *rank;
  if (local_rank) context.local_rank = *local_rank;
  if (world_size) context.world_size = *world_size;
  if (local_world_size) context.local_world_size = *local_world_size;

  parse_store(env, context, errors);
  if (world_size && *world_size > 1 && !find(env, "MASTER_ADDR") && !find(env, "MASTER_PORT"))
    errors.push_back("WORLD_SIZE=" + std::to_string(*world_size) +
                     " needs the store, but MASTER_ADDR and MASTER_PORT are not set");

  if (auto restarts = parse_count(env, "TORCHELASTIC_RESTART_COUNT", errors)) context.restart_count = *restarts;
  if (const std::string* file = find(env, "TORCHELASTIC_ERROR_FILE")) context.error_file = *file;
  if (const std::string* devices = find(env, "CUDA_VISIBLE_DEVICES")) context.cuda_visible_devices = *devices;
  if (auto interval = parse_count(env, "RANKRUN_HEARTBEAT_INTERVAL_MS", errors)) {
    if (*interval == 0)
      errors.push_back("RANKRUN_HEARTBEAT_INTERVAL_MS='0' must be at least 1 (milliseconds)");
    else
      context.heartbeat_interval_ms = *interval;
  }

  if (errors.empty()) result.context = context;
  return result;
}

EnvMap read_process_env() {
  EnvMap env;
  for (const char* name : k_all_vars)
    if (const char* value = std::getenv(name)) env.emplace(name, value);
  return env;
}

WorkerContext load_worker_context() {
  EnvParseResult result = parse_worker_env(read_process_env());
  if (!result.ok()) throw EnvError(result.error_message());
  return *result.context;
}

int select_cuda_device(const WorkerContext& context) {
  if (!context.cuda_visible_devices) return context.local_rank;
  const std::string& devices = *context.cuda_visible_devices;
  if (devices.find_first_not_of(" \t") == std::string::npos)
    throw EnvError("CUDA_VISIBLE_DEVICES is empty: no GPU is visible to this worker");
  std::size_t count = 1;
  for (char c : devices) count += c == ',';
  if (count == 1) return 0;
  if (static_cast<std::size_t>(context.local_rank) >= count)
    throw EnvError("LOCAL_RANK=" + std::to_string(context.local_rank) + " but CUDA_VISIBLE_DEVICES='" + devices +
                   "' lists " + std::to_string(count) + " devices; launch with rankrun's GPU pinning or fewer ranks");
  return context.local_rank;
}

}  // namespace rankrun
