# tests for rendezvous/: one doctest binary (pure unit tests, the loopback store test, the etcd
# client against a real etcd), the purity checks of the protocol libraries, and the decoder fuzz
# target. PyTorch's own clients against the store run with the other Python tests
# (tests/integration/test_store_interop.py).

set(_rdzv_tests ${CMAKE_CURRENT_SOURCE_DIR})

add_executable(rankrun_store_tests
  ${_rdzv_tests}/unit/rendezvous_main.cpp
  ${_rdzv_tests}/unit/test_rendezvous_wire.cpp
  ${_rdzv_tests}/unit/test_rendezvous_key_space_auth.cpp
  ${_rdzv_tests}/unit/test_rendezvous_store_state.cpp
  ${_rdzv_tests}/unit/test_rendezvous_port_owner.cpp
  ${_rdzv_tests}/unit/test_rendezvous_etcd_http.cpp
  ${_rdzv_tests}/unit/test_rendezvous_etcd_json.cpp
  ${_rdzv_tests}/integration/test_store_loopback.cpp
  ${_rdzv_tests}/integration/test_etcd_client.cpp
  ${_rdzv_tests}/integration/test_etcd_tls.cpp)
target_link_libraries(rankrun_store_tests PRIVATE rankrun_rendezvous rankrun_etcd rankrun_rendezvous_auth rankrun_warnings
  doctest::doctest)
# The loopback tests also run rankrun-store itself (its command-line errors).
target_compile_definitions(rankrun_store_tests PRIVATE RANKRUN_STORE_BIN="$<TARGET_FILE:rankrun-store>")
add_dependencies(rankrun_store_tests rankrun-store)
# A filter is one argument, quoted: unquoted, CMake would cut it at its spaces and doctest would
# read only "etcd:*,etcd", leaving the "etcd client" and "etcd tls" cases to store.unit.
add_test(NAME store.unit COMMAND rankrun_store_tests "--test-case-exclude=*loopback*,etcd:*,etcd client:*,etcd tls:*")
add_test(NAME store.loopback COMMAND rankrun_store_tests --test-case=*loopback*)
set_tests_properties(store.loopback PROPERTIES TIMEOUT 120)
# Each case starts its own etcd (/usr/bin/etcd, Debian's etcd-server); skipped where it is missing.
# The https cases also make certificates with openssl and turn etcd's authentication on with etcdctl.
add_test(NAME store.etcd COMMAND rankrun_store_tests "--test-case=etcd:*,etcd client:*,etcd tls:*")
set_tests_properties(store.etcd PROPERTIES TIMEOUT 120)
# Skips: a case that cannot run here (etcd, etcdctl or openssl missing, no IPv6) ends with
# SKIP_UNLESS (unit/skip.hpp) and prints "skipped: CASE: REASON"; when any case of a run was
# skipped and none failed, the binary says how many and exits with 77, which CTest reports as
# "Skipped", never "Passed" (the reasons: ctest -V, Testing/Temporary/LastTest.log, or
# tools/run-tests.sh, which prints them after CTest). A failure still fails.
# tools/install-deps.sh --test installs etcd-server, etcd-client and openssl: make test skips none.
set_tests_properties(store.unit store.loopback store.etcd PROPERTIES SKIP_RETURN_CODE 77)

# The protocol libraries must stay free of I/O: every source of each (and its header) is checked.
function(rankrun_rendezvous_purity_test test library)
  get_target_property(sources ${library} SOURCES)
  list(TRANSFORM sources PREPEND ${PROJECT_SOURCE_DIR}/rendezvous/)
  string(REPLACE ";" "|" sources "${sources}")
  add_test(NAME ${test}
    COMMAND ${CMAKE_COMMAND} -DNAME=${library} "-DFILES=${sources}" -P ${_rdzv_tests}/check_purity.cmake)
endfunction()
rankrun_rendezvous_purity_test(store.purity rankrun_rendezvous_protocol)
rankrun_rendezvous_purity_test(etcd.purity rankrun_etcd_protocol)

if(RANKRUN_FUZZ)
  add_executable(fuzz_store_decoder ${_rdzv_tests}/fuzz/fuzz_store_decoder.cpp)
  target_link_libraries(fuzz_store_decoder PRIVATE rankrun_rendezvous_protocol rankrun_warnings)
  target_compile_options(fuzz_store_decoder PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_store_decoder PRIVATE -fsanitize=fuzzer,address,undefined)
endif()
