#include "launcher/processes/shm_names.hpp"

#include "base/parse_number.hpp"

namespace rankrun::launcher {

std::optional<pid_t> shm_creator_pid(std::string_view name) {
  constexpr std::string_view prefix = "torch_";
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  const auto rest = name.substr(prefix.size());
  const auto underscore = rest.find('_');
  // The pid must be followed by more of the name: "torch_123" alone is not torch's pattern.
  if (underscore == std::string_view::npos || underscore == 0 || underscore + 1 >= rest.size()) return std::nullopt;
  const auto digits = rest.substr(0, underscore);
  if (digits.front() == '0') return std::nullopt;
  const auto pid = parse_number<pid_t>(digits);
  if (!pid || *pid <= 0) return std::nullopt;
  return pid;
}

ShmVerdict judge_segment(std::string_view name, uid_t owner, const std::optional<ShmCreator>& creator,
                         std::optional<std::uint64_t> launcher_pid_ns) {
  const auto pid = shm_creator_pid(name);
  if (!pid) return ShmVerdict::NoCreatorPid;
  if (!creator || !creator->in_job) return ShmVerdict::NotTheJobs;
  if (creator->own_pid && *creator->own_pid != *pid) return ShmVerdict::OtherPidNamespace;
  if (creator->pid_ns && launcher_pid_ns && *creator->pid_ns != *launcher_pid_ns) return ShmVerdict::OtherPidNamespace;
  if (!creator->uid) return ShmVerdict::Unknown;
  if (owner != *creator->uid) return ShmVerdict::OtherOwner;
  return ShmVerdict::Remove;
}

std::string describe_left_segment(std::string_view dir, std::string_view name, uid_t owner, ShmVerdict verdict,
                                  const ShmCreator& creator) {
  const std::string pid = std::to_string(shm_creator_pid(name).value_or(0));
  std::string text = "left " + std::string(dir) + "/" + std::string(name) + ": ";
  switch (verdict) {
    case ShmVerdict::OtherPidNamespace:
      text += "pid " + pid + " of the job lives in another pid namespace";
      if (creator.own_pid) text += " (where it is pid " + std::to_string(*creator.own_pid) + ")";
      return text + ", so the name is not its own";
    case ShmVerdict::OtherOwner:
      return text + "it is owned by uid " + std::to_string(owner) + ", but pid " + pid +
             " of the job creates files as uid " + std::to_string(creator.uid.value_or(0));
    case ShmVerdict::Unknown: return text + "the uid of pid " + pid + " of the job could not be read";
    case ShmVerdict::NoCreatorPid: return text + "its name names no process";
    case ShmVerdict::NotTheJobs: return text + "pid " + pid + " is no process of the job";
    case ShmVerdict::Remove: break;
  }
  return text + "the job's";
}

}  // namespace rankrun::launcher
