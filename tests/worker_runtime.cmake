# tests for worker_runtime/: the unit tests of the pure core, a C++17 compile check of every
# public header, and the process-level tests (pytest) that run real ranks against a real store.

add_executable(rankrun_worker_tests
  unit/worker_main.cpp
  unit/test_worker_worker_context.cpp
  unit/test_worker_shuffle.cpp
  unit/test_worker_distributed_sampler.cpp
  unit/test_worker_bucket_sampler.cpp
  unit/test_worker_error_json.cpp
  unit/test_worker_backtrace.cpp
  unit/test_worker_store_keys.cpp
  unit/test_worker_collective_protocol.cpp
  unit/test_worker_nccl_search.cpp)
target_link_libraries(rankrun_worker_tests
  PRIVATE rankrun_worker_core rankrun_worker_stack_dump doctest::doctest rankrun_warnings Threads::Threads)
# The backtrace tests assert the source files and lines of their own frames: debug
# information whatever the build type.
set_source_files_properties(unit/test_worker_backtrace.cpp PROPERTIES COMPILE_OPTIONS -g)
add_test(NAME worker.unit COMMAND rankrun_worker_tests)

# Trainers may build with C++17: every public header must compile alone, twice, as C++17.
file(GLOB _worker_public_headers CONFIGURE_DEPENDS
  RELATIVE ${PROJECT_SOURCE_DIR}/worker_runtime/include
  ${PROJECT_SOURCE_DIR}/worker_runtime/include/rankrun/*.hpp
  ${PROJECT_SOURCE_DIR}/worker_runtime/include/rankrun/*.h)
set(_worker_header_sources)
foreach(header IN LISTS _worker_public_headers)
  string(MAKE_C_IDENTIFIER "${header}" _id)
  set(_src ${CMAKE_CURRENT_BINARY_DIR}/worker_header_check/${_id}.cpp)
  file(CONFIGURE OUTPUT ${_src} CONTENT
    "#include <${header}>\n#include <${header}>\nint rankrun_header_check_${_id}() { return 0; }\n")
  list(APPEND _worker_header_sources ${_src})
endforeach()
add_library(rankrun_worker_header_check OBJECT ${_worker_header_sources})
set_target_properties(rankrun_worker_header_check PROPERTIES CXX_STANDARD 17 CXX_EXTENSIONS OFF)
target_link_libraries(rankrun_worker_header_check PRIVATE rankrun_worker rankrun_warnings)
add_test(NAME worker.headers_cxx17
  COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --target rankrun_worker_header_check)

# Real ranks as real processes against a real store (and, once present, the launcher).
find_program(RANKRUN_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(RANKRUN_SYSTEM_PYTHON)
  # Skipped (exit code 77, tests/integration/conftest.py), not passed, when any test could not run
  # here (an example not built: nccl_allreduce needs CUDA and NCCL): -rs prints why.
  add_test(NAME worker.integration
    COMMAND ${RANKRUN_SYSTEM_PYTHON} -m pytest -q -rs -p no:cacheprovider --skipped-exit-code=77
      ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_worker_runtime.py)
  set_tests_properties(worker.integration PROPERTIES
    ENVIRONMENT "RANKRUN_BUILD_DIR=${PROJECT_BINARY_DIR}"
    SKIP_RETURN_CODE 77
    TIMEOUT 600)
endif()

# Install to a temporary prefix and build examples/external_consumer against it, with
# find_package(rankrun) and with pkg-config.
add_test(NAME worker.package
  COMMAND ${PROJECT_SOURCE_DIR}/examples/external_consumer/test_external_consumer.sh ${PROJECT_BINARY_DIR})
set_tests_properties(worker.package PROPERTIES TIMEOUT 300)
