# The portable build: rankrun and rankrun-store for any x86_64 Linux with glibc 2.28 or newer
# (RHEL 8, Ubuntu 20.04, Debian 10 and later; the floor of pip's torch wheels), whatever the
# build machine's glibc. zig's clang compiles against zig's own glibc 2.28 headers and stubs
# and links its libc++ statically (tools/zig/cc, tools/zig/c++; zig itself comes from npm, see
# tools/install-zig.sh). Everything else is linked in (cmake/Dependencies.cmake,
# RANKRUN_PORTABLE): the binaries need only glibc's libraries.
get_filename_component(_rankrun_root "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
set(CMAKE_C_COMPILER "${_rankrun_root}/tools/zig/cc")
set(CMAKE_CXX_COMPILER "${_rankrun_root}/tools/zig/c++")
set(CMAKE_AR "${_rankrun_root}/tools/zig/ar")
set(CMAKE_RANLIB "${_rankrun_root}/tools/zig/ranlib")
set(RANKRUN_PORTABLE ON CACHE BOOL "Self-contained binaries for glibc 2.28" FORCE)
# Not a cross build: the same system and processor, another glibc. Debian's libraries and
# headers are found where Debian keeps them (the wrappers put /usr/include after zig's libc
# headers), and installed into Debian's multiarch folder (GNUInstallDirs), which zig's clang does
# not name.
set(CMAKE_LIBRARY_ARCHITECTURE x86_64-linux-gnu)
