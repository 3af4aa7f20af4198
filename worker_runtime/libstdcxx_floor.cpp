// The portable runtime's floor of libstdc++ (built only there: RANKRUN_PORTABLE_STDLIB=libstdc++).
// GCC 11's headers call std::__throw_bad_array_new_length() from std::allocator, a function that
// libstdc++ exports only from GLIBCXX_3.4.29 (GCC 11) on; one copy of our own, hidden in the
// library, keeps the runtime loadable with the libstdc++ of GCC 8 (RHEL 8's, GLIBCXX_3.4.25).
// It does what libstdc++'s does.
#include <new>

namespace std {
[[noreturn]] __attribute__((visibility("hidden"))) void __throw_bad_array_new_length() {
  throw std::bad_array_new_length();
}
}  // namespace std
