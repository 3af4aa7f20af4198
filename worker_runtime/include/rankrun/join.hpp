#pragma once
// Uneven inputs without hangs. When ranks have different numbers of batches, the rank that
// runs out first leaves the training loop while the others wait forever in their next
// collective. With Join, every rank says each step whether it has another batch, and all
// ranks learn the same answer at the same step, so they leave the loop together.
//
//   rankrun::Join join(collectives, "train");
//   while (join.all_have_more(loader.has_next())) { train_step(loader.next()); }
//
// or, to use every rank's data, `any_has_more` and a zero-contribution step on ranks that
// have run out (they must still take part in the step's collectives).
// Public header: C++17.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace rankrun {

class Collectives;

class Join {
 public:
  /// `name` must be the same on every rank; `collectives` must outlive this object.
  Join(Collectives& collectives, std::string name, std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  /// One step: `has_more` is whether this rank has input for it. Returns how many ranks do.
  /// A collective: every rank must call it once per step. Throws CollectiveTimeout naming
  /// the ranks that did not reach the step.
  int step(bool has_more);
  /// true while every rank has input; the first step in which any rank has none returns
  /// false on every rank.
  bool all_have_more(bool has_more) { return step(has_more) == world_size(); }
  /// true while at least one rank has input; false on every rank once none has.
  bool any_has_more(bool has_more) { return step(has_more) > 0; }

  /// Steps taken so far.
  std::uint64_t steps() const { return m_steps; }
  int world_size() const;

 private:
  Collectives& m_collectives;
  std::string m_name;
  std::optional<std::chrono::milliseconds> m_timeout;
  std::uint64_t m_steps = 0;
};

}  // namespace rankrun
