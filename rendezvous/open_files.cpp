#include "rendezvous/open_files.hpp"

namespace rankrun::rendezvous {

rlimit raise_open_files_limit() {
  rlimit before{};
  if (::getrlimit(RLIMIT_NOFILE, &before) != 0) return before;
  constexpr rlim_t k_most = 1U << 20;
  rlimit raised = before;
  raised.rlim_cur = before.rlim_max == RLIM_INFINITY || before.rlim_max > k_most ? k_most : before.rlim_max;
  if (raised.rlim_cur > before.rlim_cur) ::setrlimit(RLIMIT_NOFILE, &raised);
  return before;
}

void restore_open_files_limit(const rlimit& limit) {
  if (limit.rlim_max == 0) return;  // nothing was read
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace rankrun::rendezvous
