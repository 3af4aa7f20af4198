# INTERFACE target carrying the project's warning policy.
add_library(rankrun_warnings INTERFACE)
target_compile_options(rankrun_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
  -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough)
if(RANKRUN_DEV)
  target_compile_options(rankrun_warnings INTERFACE -Werror)
endif()
