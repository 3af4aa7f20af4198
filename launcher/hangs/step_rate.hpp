#pragma once
// A rank's steps per second, from the steps its heartbeats report: the rate over the last minute
// of reports (at least two reports apart). Pure: the times come in.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

namespace rankrun::launcher {

class StepRate {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds k_window{60};

  /// A report of `step` at `at` (a step lower than the last starts over: a new attempt).
  void add(Clock::time_point at, std::int64_t step) {
    if (step < 0) return;
    if (!m_seen.empty() && step < m_seen.back().second) m_seen.clear();
    if (!m_seen.empty() && step == m_seen.back().second && m_seen.size() > 1) {
      m_seen.back().first = at;  // the same step again: the rate falls as time passes
    } else {
      m_seen.emplace_back(at, step);
    }
    while (m_seen.size() > 2 && at - m_seen[1].first >= k_window) m_seen.pop_front();
  }

  /// nullopt until two reports span some time.
  std::optional<double> per_second() const {
    if (m_seen.size() < 2) return std::nullopt;
    const double span = std::chrono::duration<double>(m_seen.back().first - m_seen.front().first).count();
    if (span <= 0) return std::nullopt;
    return static_cast<double>(m_seen.back().second - m_seen.front().second) / span;
  }

  std::optional<std::int64_t> last() const {
    return m_seen.empty() ? std::nullopt : std::optional<std::int64_t>(m_seen.back().second);
  }

  void clear() { m_seen.clear(); }

  /// true at the first call and then once `every` has passed since the last true: how often a
  /// rank's step goes into the event log.
  bool due(Clock::time_point now, std::chrono::seconds every) {
    if (m_noted && now - *m_noted < every) return false;
    m_noted = now;
    return true;
  }

 private:
  std::optional<Clock::time_point> m_noted;
  std::deque<std::pair<Clock::time_point, std::int64_t>> m_seen;
};

}  // namespace rankrun::launcher
