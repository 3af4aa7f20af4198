# INTERFACE target carrying the project's warning policy.
add_library(rankrun_warnings INTERFACE)
target_compile_options(rankrun_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wunused
  -Wimplicit-fallthrough $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual>)
if(RANKRUN_DEV)
  target_compile_options(rankrun_warnings INTERFACE -Werror)
endif()
