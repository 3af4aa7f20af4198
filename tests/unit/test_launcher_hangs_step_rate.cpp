#include <doctest/doctest.h>

#include "launcher/hangs/step_rate.hpp"

using namespace rankrun::launcher;
using namespace std::chrono_literals;

TEST_CASE("steps per second over the last minute of reports") {
  StepRate rate;
  const auto t0 = StepRate::Clock::time_point{} + 1000s;
  CHECK_FALSE(rate.per_second());
  rate.add(t0, -1);  // no step yet
  CHECK_FALSE(rate.last());
  rate.add(t0, 0);
  CHECK_FALSE(rate.per_second());
  rate.add(t0 + 5s, 50);
  CHECK(rate.per_second() == doctest::Approx(10.0));
  for (int i = 2; i <= 30; ++i) rate.add(t0 + i * 5s, 50 * i - (i > 20 ? 25 * (i - 20) : 0));
  // After 100 s the rate slowed to 5/s: the window of the last minute says so.
  CHECK(*rate.per_second() < 7.0);
  CHECK(*rate.per_second() > 4.0);
  CHECK(rate.last() == 50 * 30 - 250);
  // The same step again: the rate falls as time passes without progress.
  const double before = *rate.per_second();
  rate.add(t0 + 160s, *rate.last());
  rate.add(t0 + 170s, *rate.last());
  CHECK(*rate.per_second() < before);
  // A lower step is a new attempt.
  rate.add(t0 + 175s, 3);
  CHECK(rate.last() == 3);
  CHECK_FALSE(rate.per_second());
}

TEST_CASE("a rank's step goes into the event log at its first report and then every interval") {
  StepRate rate;
  const auto t0 = StepRate::Clock::time_point{} + 1000s;
  CHECK(rate.due(t0, 30s));
  CHECK_FALSE(rate.due(t0 + 29s, 30s));
  CHECK(rate.due(t0 + 30s, 30s));
}
