#include "rankrun/join.hpp"

#include "rankrun/collectives.hpp"

namespace rankrun {

Join::Join(Collectives& collectives, std::string name, std::optional<std::chrono::milliseconds> timeout)
    : m_collectives(collectives), m_name("join:" + std::move(name)), m_timeout(timeout) {}

int Join::step(bool has_more) {
  const auto flags = m_collectives.all_gather(m_name, has_more ? "1" : "0", m_timeout);
  ++m_steps;
  int count = 0;
  for (const std::string& flag : flags) count += flag == "1";
  return count;
}

int Join::world_size() const { return m_collectives.context().world_size; }

}  // namespace rankrun
