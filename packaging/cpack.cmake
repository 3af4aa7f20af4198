# The Debian package (`make package`): one .deb, rankrun, with everything the install rules put
# under the prefix (see packaging/CMakeLists.txt and worker_runtime/cmake/install.cmake).
# Built from a Release tree configured with CMAKE_INSTALL_PREFIX=/usr, so that GNUInstallDirs
# puts the library in Debian's multiarch directory (lib/x86_64-linux-gnu).
include(GNUInstallDirs)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rankrun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "rankrun")
set(CPACK_PACKAGE_CONTACT "rankrun developers <dev@rankrun.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "launcher and supervisor for distributed training (torchrun replacement)")
set(CPACK_PACKAGE_INSTALL_DIRECTORY rankrun)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/package)
set(CPACK_STRIP_FILES ON)
# Only what `make package` asks for: no source package, no tarballs beside the .deb.
set(CPACK_SOURCE_GENERATOR "")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)          # rankrun_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)              # Debian revision: rankrun_0.1.0-1_amd64.deb
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/rankrun/rankrun")
# The long description (CPack puts CPACK_PACKAGE_DESCRIPTION_SUMMARY before it as the first
# line, and indents the rest as Debian's control format wants); lines under 80 characters.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "rankrun starts and supervises the workers of a distributed PyTorch job,
as torchrun does and with torchrun's options: one worker per GPU, each
pinned to its GPU, the rendezvous store hosted by rankrun itself, the root
cause of a failure in the exit code and the report, hangs detected and
diagnosed with every rank's stack, and nothing of the job (processes,
shared memory, ports) left behind. Several nodes, with or without Slurm,
are one job.
.
This package also contains rankrun-store, the store server alone, and
librankrun_worker, a C++ and C library with its headers, CMake package and
pkg-config file, which lets native trainers join a rankrun job.")
# Depends from the binaries' shared libraries (dpkg-shlibdeps, from dpkg-dev), a shlibs file
# and the ldconfig trigger for librankrun_worker.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
# Hang diagnosis uses gdb for native programs when it is there; workers are usually Python.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "gdb, python3")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# ldconfig through its trigger (Debian policy 8.1.1): our own postinst and postrm replace the ones
# CPack would write, which call ldconfig directly; they reload systemd for the unit template.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_LIST_DIR}/debian/triggers
  ${CMAKE_CURRENT_LIST_DIR}/debian/postinst
  ${CMAKE_CURRENT_LIST_DIR}/debian/postrm)

# Debian's own changelog, beside the project's (changelog.gz): a package with a Debian revision
# needs one. Dated now, or at SOURCE_DATE_EPOCH for a reproducible build.
set(CPACK_DEBIAN_PACKAGE_VERSION ${PROJECT_VERSION})
string(TIMESTAMP RANKRUN_DEBIAN_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_CURRENT_LIST_DIR}/changelog.Debian.in ${PROJECT_BINARY_DIR}/packaging/changelog.Debian @ONLY)
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz
  COMMAND ${RANKRUN_GZIP} -9 -n ${PROJECT_BINARY_DIR}/packaging/changelog.Debian
          -c > ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz
  DEPENDS ${PROJECT_BINARY_DIR}/packaging/changelog.Debian VERBATIM)
add_custom_target(rankrun_debian_changelog ALL DEPENDS ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz)
install(FILES ${PROJECT_BINARY_DIR}/packaging/changelog.Debian.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/rankrun)

# The release build (the Makefile's release target) builds the worker runtime in a tree of its
# own (GCC's libstdc++ there, zig's libc++ here): the package holds what both trees install.
set(RANKRUN_RUNTIME_BUILD_DIR "" CACHE PATH "The release build's worker-runtime tree, packed with this one")
if(RANKRUN_RUNTIME_BUILD_DIR)
  set(CPACK_INSTALL_CMAKE_PROJECTS
    "${PROJECT_BINARY_DIR};rankrun;ALL;/"
    "${RANKRUN_RUNTIME_BUILD_DIR};rankrun;ALL;/")
endif()

include(CPack)
