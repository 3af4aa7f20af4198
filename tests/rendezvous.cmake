# tests for rendezvous/: one doctest binary (pure unit tests + the loopback store test), the
# purity check of the protocol library, the PyTorch interop test, and the decoder fuzz target.

set(_rdzv_tests ${CMAKE_CURRENT_SOURCE_DIR})

add_executable(rankrun_store_tests
  ${_rdzv_tests}/unit/rendezvous_main.cpp
  ${_rdzv_tests}/unit/test_rendezvous_wire.cpp
  ${_rdzv_tests}/unit/test_rendezvous_store_state.cpp
  ${_rdzv_tests}/unit/test_rendezvous_port_owner.cpp
  ${_rdzv_tests}/integration/test_store_loopback.cpp)
target_link_libraries(rankrun_store_tests PRIVATE rankrun_rendezvous rankrun_warnings doctest::doctest)
add_test(NAME store.unit COMMAND rankrun_store_tests --test-case-exclude=*loopback*)
add_test(NAME store.loopback COMMAND rankrun_store_tests --test-case=*loopback*)
set_tests_properties(store.loopback PROPERTIES TIMEOUT 120)

# The protocol library must stay free of I/O: no Asio, no Boost.Process, no signals.
add_test(NAME store.purity
  COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -P ${_rdzv_tests}/check_store_purity.cmake)

# Real PyTorch clients against rankrun-store and against torch's own server.
find_program(RANKRUN_TORCH_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(RANKRUN_TORCH_PYTHON)
  add_test(NAME store.interop
    COMMAND ${RANKRUN_TORCH_PYTHON} -m pytest -q -p no:cacheprovider ${_rdzv_tests}/integration/test_store_interop.py)
  set_tests_properties(store.interop PROPERTIES
    ENVIRONMENT "RANKRUN_BUILD_DIR=${PROJECT_BINARY_DIR}"
    TIMEOUT 300)
endif()

if(RANKRUN_FUZZ)
  add_executable(fuzz_store_decoder ${_rdzv_tests}/fuzz/fuzz_store_decoder.cpp)
  target_link_libraries(fuzz_store_decoder PRIVATE rankrun_rendezvous_protocol rankrun_warnings)
  target_compile_options(fuzz_store_decoder PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_store_decoder PRIVATE -fsanitize=fuzzer,address,undefined)
endif()
