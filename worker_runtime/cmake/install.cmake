# Install rules for the worker runtime: the library, its headers, a CMake package
# (find_package(rankrun) -> rankrun::worker) and a pkg-config file (rankrun-worker.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(RANKRUN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/rankrun)

# Everything here is COMPONENT worker: `cmake --install <build> --component worker` installs
# the runtime alone, without needing the rest of the project built.
install(TARGETS rankrun_worker EXPORT rankrunWorkerTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT worker
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT worker
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT worker)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/rankrun ${RANKRUN_WORKER_GENERATED}/rankrun
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT worker)
install(EXPORT rankrunWorkerTargets NAMESPACE rankrun:: DESTINATION ${RANKRUN_CMAKE_DIR} COMPONENT worker)

configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/rankrunConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/rankrunConfig.cmake
  INSTALL_DESTINATION ${RANKRUN_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/rankrunConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rankrunConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/rankrunConfigVersion.cmake
  DESTINATION ${RANKRUN_CMAKE_DIR} COMPONENT worker)

# pkg-config: the same flags the CMake package gives. The prefix is found from the .pc
# file's own location, so `cmake --install --prefix <anywhere>` gives a working file.
string(REGEX REPLACE "[^/]+" ".." RANKRUN_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
# NcclCommunicator adds nothing: its header needs no CUDA header and the library links neither
# NCCL nor the CUDA runtime (it loads them at run time).
set(RANKRUN_PC_CFLAGS "")
set(RANKRUN_PC_LIBS "")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/rankrun-worker.pc.in
  ${CMAKE_CURRENT_BINARY_DIR}/rankrun-worker.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rankrun-worker.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT worker)
