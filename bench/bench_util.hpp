#pragma once
// What the C++ benchmarks of bench/ share: times and their medians, a thread's CPU clock, the
// descriptor limit.

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

namespace rankrun::bench {

inline double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// The middle value of `v` sorted (of an even count, the higher of the two); -1 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// CPU seconds thread `t` has used so far (0 when its clock cannot be read).
inline double thread_cpu_s(std::thread& t) {
  clockid_t cid{};
  if (::pthread_getcpuclockid(t.native_handle(), &cid) != 0) return 0;
  timespec ts{};
  if (::clock_gettime(cid, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

/// Raises RLIMIT_NOFILE's soft limit to the hard one (a descriptor per connection); the limit now.
inline rlimit raise_nofile() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return lim;
}

}  // namespace rankrun::bench
