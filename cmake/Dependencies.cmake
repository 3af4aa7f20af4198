# Every dependency comes from Debian's packages (see tools/install-deps.sh).
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)          # Asio, Beast and Process are header-only in 1.74
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)   # JSON: etcd's gateway, the error files
option(RANKRUN_PORTABLE "Self-contained binaries: OpenSSL, fmt, spdlog and the C++ runtime linked in (set by cmake/toolchains/zig-glibc-2.28.cmake)" OFF)
if(RANKRUN_PORTABLE)
  # Debian's static archives; the wrappers of tools/zig find /usr/include after zig's own libc
  # headers, so the imported targets' /usr/include must not come first on the command line.
  set(OPENSSL_USE_STATIC_LIBS TRUE)
  list(APPEND CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES /usr/include /usr/include/x86_64-linux-gnu)
  list(APPEND CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES /usr/include /usr/include/x86_64-linux-gnu)
endif()
find_package(OpenSSL 3 REQUIRED COMPONENTS SSL Crypto)  # libssl-dev: https to etcd; the job secret's HMAC-SHA256 and nonces
# MUNGE's header (libmunge-dev) for its types; libmunge itself is loaded at run time, under Slurm.
find_path(MUNGE_INCLUDE_DIR munge.h REQUIRED DOC "munge.h (Debian's libmunge-dev)")
if(RANKRUN_BUILD_TESTS)
  find_package(doctest REQUIRED)
endif()

# fmt and spdlog: Debian's shared libraries, or header-only in the portable build (Debian's
# spdlog_header_only target still links the shared fmt, hence targets of our own).
add_library(rankrun_fmt INTERFACE)
add_library(rankrun_spdlog INTERFACE)
if(RANKRUN_PORTABLE)
  target_compile_definitions(rankrun_fmt INTERFACE FMT_HEADER_ONLY=1)
  target_compile_definitions(rankrun_spdlog INTERFACE SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY=1)
  target_link_libraries(rankrun_spdlog INTERFACE Threads::Threads)
  # zig's libc++ 16 drops std::result_of in C++20 and std::unary_function in C++17, which
  # Boost 1.74's Asio and container_hash still use.
  add_compile_definitions(_LIBCPP_ENABLE_CXX20_REMOVED_TYPE_TRAITS _LIBCPP_ENABLE_CXX17_REMOVED_UNARY_BINARY_FUNCTION)
else()
  target_link_libraries(rankrun_fmt INTERFACE fmt::fmt)
  target_link_libraries(rankrun_spdlog INTERFACE spdlog::spdlog)
endif()

# Boost.Asio without deprecated names; Boost.Process v1 needs no compiled library
# as long as executables are given by absolute path.
add_library(rankrun_boost INTERFACE)
target_link_libraries(rankrun_boost INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(rankrun_boost INTERFACE BOOST_ASIO_NO_DEPRECATED BOOST_ALLOW_DEPRECATED_HEADERS)

# NcclCommunicator (the worker runtime) loads NCCL and the CUDA runtime when first used (dlopen,
# worker_runtime/nccl_api.cpp) and links neither: building it needs only nccl.h and
# cuda_runtime.h, from a CUDA toolkit (/usr/local/cuda here), $CUDA_HOME, or torch's pip wheels
# (site-packages/nvidia/nccl/include with nvidia/cu13/include or nvidia/cuda_runtime/include:
# pass both to RANKRUN_NCCL_INCLUDE_DIR and RANKRUN_CUDART_INCLUDE_DIR). Whatever the build
# (developer, sanitizers, release), the same code: found, the runtime has NcclCommunicator.
option(RANKRUN_WITH_NCCL "Build NcclCommunicator into the worker runtime (headers only: NCCL is loaded at run time)" ON)
set(RANKRUN_NCCL_HEADER_HINTS ${CUDAToolkit_ROOT} $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda)
set(RANKRUN_WORKER_NCCL OFF)
if(RANKRUN_WITH_NCCL)
  # NO_CMAKE_FIND_ROOT_PATH: the release toolchain's sysroot is zig's libc, not where CUDA is.
  find_path(RANKRUN_NCCL_INCLUDE_DIR nccl.h HINTS ${RANKRUN_NCCL_HEADER_HINTS} PATH_SUFFIXES include
    NO_CMAKE_FIND_ROOT_PATH DOC "the folder of nccl.h (NcclCommunicator)")
  find_path(RANKRUN_CUDART_INCLUDE_DIR cuda_runtime.h HINTS ${RANKRUN_NCCL_HEADER_HINTS} PATH_SUFFIXES include
    NO_CMAKE_FIND_ROOT_PATH DOC "the folder of cuda_runtime.h (NcclCommunicator)")
  if(RANKRUN_NCCL_INCLUDE_DIR AND RANKRUN_CUDART_INCLUDE_DIR)
    set(RANKRUN_WORKER_NCCL ON)
    add_library(rankrun_nccl_headers INTERFACE)
    target_include_directories(rankrun_nccl_headers SYSTEM INTERFACE ${RANKRUN_NCCL_INCLUDE_DIR} ${RANKRUN_CUDART_INCLUDE_DIR})
  elseif(RANKRUN_PORTABLE)
    # What users install must not lose the communicator because the build machine lacked a header.
    message(FATAL_ERROR "nccl.h or cuda_runtime.h not found (RANKRUN_NCCL_INCLUDE_DIR=${RANKRUN_NCCL_INCLUDE_DIR}, "
      "RANKRUN_CUDART_INCLUDE_DIR=${RANKRUN_CUDART_INCLUDE_DIR}): the release runtime's NcclCommunicator needs them "
      "to build; install CUDA (or set both variables to the folders of torch's wheels' headers), or pass "
      "-DRANKRUN_WITH_NCCL=OFF to build a runtime without it")
  endif()
endif()

# The CUDA toolkit and NCCL's library, for what links them (examples/nccl_allreduce, which calls
# CUDA and NCCL itself): optional, built when both are found.
set(RANKRUN_HAVE_NCCL OFF)
if(RANKRUN_WITH_CUDA)
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib /usr/local/cuda/lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      set(RANKRUN_HAVE_NCCL ON)
      add_library(rankrun_nccl INTERFACE)
      target_include_directories(rankrun_nccl INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(rankrun_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
    endif()
  endif()
endif()
message(STATUS "rankrun: NcclCommunicator=${RANKRUN_WORKER_NCCL} (headers: ${RANKRUN_NCCL_INCLUDE_DIR}, "
  "${RANKRUN_CUDART_INCLUDE_DIR}); CUDA ${CUDAToolkit_VERSION} found=${CUDAToolkit_FOUND}, NCCL=${RANKRUN_HAVE_NCCL}")
