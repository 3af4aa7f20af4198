# The portable build of the worker runtime: as zig-glibc-2.28.cmake (glibc 2.28, zig's clang),
# but C++ against GCC's libstdc++, shared, as the trainers that link the runtime are built
# (tools/zig/c++-libstdc++). Its floor: glibc 2.28, and the GLIBCXX versions that objdump shows.
include(${CMAKE_CURRENT_LIST_DIR}/zig-glibc-2.28.cmake)
set(CMAKE_CXX_COMPILER "${_rankrun_root}/tools/zig/c++-libstdc++")
set(RANKRUN_PORTABLE_STDLIB libstdc++ CACHE STRING "The C++ library of the portable build" FORCE)
