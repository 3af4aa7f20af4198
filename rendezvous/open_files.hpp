#pragma once
// The process's limit on open files (RLIMIT_NOFILE). A store holds a descriptor per client: a
// job of thousands of ranks needs more than the soft limit that shells and systemd units start
// with (1024), while the hard limit is usually far higher. The store's processes raise their
// own soft limit to the hard one, as servers built on epoll may (select(), which a larger
// limit would break, is not used); the processes they start get the limit they had.

#include <sys/resource.h>

namespace rankrun::rendezvous {

/// Raises the soft limit on open files to the hard limit (at most 1,048,576). Returns the limit
/// as it was, for children (restore_open_files_limit()). A failure leaves the limit as it was.
rlimit raise_open_files_limit();

/// Sets the limit back to `limit` (async-signal-safe: it may run between fork and exec).
void restore_open_files_limit(const rlimit& limit);

}  // namespace rankrun::rendezvous
