#include "launcher/report/rank_claims.hpp"

#include "base/parse_number.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "launcher/report/arrival.hpp"

namespace rankrun::launcher {

namespace {

constexpr std::string_view k_default_pg = "default_pg/";
constexpr int k_max_rank = 1 << 24;

std::optional<int> decimal(std::string_view s) {
  if (s.empty() || s.size() > 8) return std::nullopt;
  const auto value = parse_number<int>(s);
  if (!value || *value < 0 || *value >= k_max_rank) return std::nullopt;
  return value;
}

std::string group_rank_text(const DuplicateRank& d) {
  return d.default_group() ? fmt::format("rank {}", d.rank)
                           : fmt::format("rank {} of process group '{}'", d.rank, d.group);
}

}  // namespace

std::optional<RankRegistration> rank_registration(std::string_view key) {
  const auto at = key.find(k_default_pg);
  if (at == std::string_view::npos) return std::nullopt;
  const auto group_at = at + k_default_pg.size();
  const auto group_end = key.find('/', group_at);
  if (group_end == std::string_view::npos || group_end == group_at) return std::nullopt;
  const auto last_slash = key.rfind('/');
  if (last_slash < group_end) return std::nullopt;  // no segment after the group's name
  auto last = key.substr(last_slash + 1);
  if (last.substr(0, 5) == "rank_") last.remove_prefix(5);
  const auto rank = decimal(last);
  if (!rank) return std::nullopt;
  return RankRegistration{std::string(key.substr(0, last_slash + 1)),
                          std::string(key.substr(group_at, group_end - group_at)), *rank};
}

RankClaims::RankClaims(std::vector<int> ranks) : m_ranks(std::move(ranks)) {}

std::optional<DuplicateRank> RankClaims::on_set(int local_rank, std::string_view key) {
  if (m_duplicate) return std::nullopt;
  auto reg = rank_registration(key);
  if (!reg) return std::nullopt;
  auto& owners = m_owner[reg->scope];
  const auto [it, first] = owners.emplace(reg->rank, local_rank);
  if (first || it->second == local_rank) return std::nullopt;
  DuplicateRank d;
  d.group = std::move(reg->group);
  d.rank = reg->rank;
  d.first = it->second;
  d.second = local_rank;
  if (d.default_group()) {
    for (const int local : {d.first, d.second}) {
      if (local < 0 || static_cast<std::size_t>(local) >= m_ranks.size()) continue;
      const int given = m_ranks[static_cast<std::size_t>(local)];
      if (given != d.rank && owners.count(given) == 0) d.unregistered.push_back(given);
    }
    std::sort(d.unregistered.begin(), d.unregistered.end());
    d.unregistered.erase(std::unique(d.unregistered.begin(), d.unregistered.end()), d.unregistered.end());
  }
  m_duplicate = d;
  return d;
}

std::string describe_duplicate(const DuplicateRank& d, long first_pid, long second_pid) {
  std::string out = fmt::format("{} was registered by two processes: pid {} (local rank {}) and pid {} (local rank {})",
                                group_rank_text(d), first_pid, d.first, second_pid, d.second);
  if (!d.unregistered.empty()) out += "; no process registered " + ranks_text(d.unregistered);
  out +=
      ". Does the script take its rank from --local_rank on its command line (default 0)? rankrun, like torchrun, "
      "passes the local rank in the environment only: read LOCAL_RANK from os.environ, or add "
      "'--local_rank=${local_rank}' to the script's arguments (rankrun puts each worker's local rank there)";
  return out;
}

}  // namespace rankrun::launcher
