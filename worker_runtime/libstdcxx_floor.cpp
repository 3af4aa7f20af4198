// The portable runtime's floors (built only there: RANKRUN_PORTABLE_STDLIB=libstdc++), so that
// it loads with the libstdc++ of GCC 8 (RHEL 8's, GLIBCXX_3.4.25) and glibc 2.28, although it is
// compiled with GCC 12's libstdc++ headers, whose configuration is that of the newer glibc they
// were built on. Each is one hidden copy of our own, used by this library only, that does what
// the newer one does.
#include <pthread.h>
#include <time.h>

#include <new>

namespace std {
// GCC 11's headers call std::__throw_bad_array_new_length() from std::allocator, a function that
// libstdc++ exports only from GLIBCXX_3.4.29 (GCC 11) on.
[[noreturn]] __attribute__((visibility("hidden"))) void __throw_bad_array_new_length() {
  throw std::bad_array_new_length();
}
}  // namespace std

extern "C" {

// glibc 2.32's flag that the process has one thread, which libstdc++'s reference counts read to
// skip atomic operations. Ours says "several threads" always: the counts stay atomic, as with a
// glibc that has no such flag. Without it the library did not load on glibc 2.31 (Debian 11).
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

// glibc 2.30's wait on another clock than the realtime one, which std::condition_variable uses
// for steady_clock deadlines: here the same deadline on the realtime clock.
__attribute__((visibility("hidden"))) int pthread_cond_clockwait(pthread_cond_t* cond, pthread_mutex_t* mutex,
                                                                 clockid_t clock, const struct timespec* abstime) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
  timespec on_clock{}, realtime{};
  clock_gettime(clock, &on_clock);
  clock_gettime(CLOCK_REALTIME, &realtime);
  long long ns = (static_cast<long long>(abstime->tv_sec) - on_clock.tv_sec) * 1000000000LL +
                 (abstime->tv_nsec - on_clock.tv_nsec);
  if (ns < 0) ns = 0;
  ns += static_cast<long long>(realtime.tv_nsec);
  timespec deadline{};
  deadline.tv_sec = realtime.tv_sec + static_cast<time_t>(ns / 1000000000LL);
  deadline.tv_nsec = static_cast<long>(ns % 1000000000LL);
  return pthread_cond_timedwait(cond, mutex, &deadline);
}

}  // extern "C"
