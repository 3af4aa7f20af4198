# Launcher: unit tests of the pure core (and the CLI parser), one file per source file, named after
# it: launcher/<room>/<file>.cpp is tested in unit/test_launcher_<room>_<file>.cpp (docs/testing.md).
add_executable(rankrun_launcher_tests
  unit/launcher_main.cpp
  unit/test_base_host_port.cpp
  unit/test_base_parse_number.cpp
  unit/test_base_range_list.cpp
  unit/test_base_read_file.cpp
  unit/test_base_text.cpp
  unit/test_launcher_check_preflight.cpp
  unit/test_launcher_cli.cpp
  unit/test_launcher_cluster_attempt_steps.cpp
  unit/test_launcher_cluster_elastic_join.cpp
  unit/test_launcher_cluster_etcd_coordinator.cpp
  unit/test_launcher_cluster_node_link.cpp
  unit/test_launcher_cluster_peer_failure.cpp
  unit/test_launcher_cluster_progress.cpp
  unit/test_launcher_cluster_rank_sample.cpp
  unit/test_launcher_cluster_records.cpp
  unit/test_launcher_cluster_round_host.cpp
  unit/test_launcher_cluster_rounds.cpp
  unit/test_launcher_cluster_static_rendezvous.cpp
  unit/test_launcher_config_gpu_list.cpp
  unit/test_launcher_config_job_secret.cpp
  unit/test_launcher_config_numa_plan.cpp
  unit/test_launcher_config_options.cpp
  unit/test_launcher_config_resolve.cpp
  unit/test_launcher_config_slurm.cpp
  unit/test_launcher_files_dir_trust.cpp
  unit/test_launcher_files_run_dir.cpp
  unit/test_launcher_gpu_gpu_health.cpp
  unit/test_launcher_hangs_connection_owner.cpp
  unit/test_launcher_hangs_flight_match.cpp
  unit/test_launcher_hangs_hang_policy.cpp
  unit/test_launcher_hangs_hang_report.cpp
  unit/test_launcher_hangs_job_view.cpp
  unit/test_launcher_hangs_stack_dump.cpp
  unit/test_launcher_hangs_step_rate.cpp
  unit/test_launcher_host_python_env.cpp
  unit/test_launcher_job.cpp
  unit/test_launcher_job_job_nodes.cpp
  unit/test_launcher_job_job_policy.cpp
  unit/test_launcher_job_rank_plan.cpp
  unit/test_launcher_job_stop_hold.cpp
  unit/test_launcher_job_worker_env.cpp
  unit/test_launcher_observe_http_answer.cpp
  unit/test_launcher_observe_job_status.cpp
  unit/test_launcher_processes_cleanup_plan.cpp
  unit/test_launcher_processes_exit_order.cpp
  unit/test_launcher_processes_proc_parse.cpp
  unit/test_launcher_processes_proc_scan.cpp
  unit/test_launcher_processes_shm_names.cpp
  unit/test_launcher_rdzv_backends.cpp
  unit/test_launcher_report_console_queue.cpp
  unit/test_launcher_report_failure_report.cpp
  unit/test_launcher_report_line_prefix.cpp
  unit/test_launcher_report_line_splitter.cpp
  unit/test_launcher_report_arrival.cpp
  unit/test_launcher_report_rank_claims.cpp
  unit/test_launcher_service_sd_notify.cpp
  unit/test_launcher_service_service_status.cpp
  unit/test_launcher_types_exit_status.cpp)
target_link_libraries(rankrun_launcher_tests PRIVATE rankrun_launcher_sys doctest::doctest rankrun_warnings)
# Recorded inputs of the unit tests (flight recorder dumps of real torch jobs).
target_compile_definitions(rankrun_launcher_tests PRIVATE RANKRUN_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/unit/data")
add_test(NAME launcher.unit COMMAND rankrun_launcher_tests)

# The pure core must not do I/O: every source of rankrun_launcher_core (and its header) is checked.
get_target_property(_core_sources rankrun_launcher_core SOURCES)
list(TRANSFORM _core_sources PREPEND ${PROJECT_SOURCE_DIR}/launcher/)
string(REPLACE ";" "|" _core_sources "${_core_sources}")
add_test(NAME launcher.purity
  COMMAND ${CMAKE_COMMAND} -DNAME=rankrun_launcher_core "-DFILES=${_core_sources}" -P ${CMAKE_CURRENT_SOURCE_DIR}/check_purity.cmake)

# base/'s pure library, the same way.
get_target_property(_base_sources rankrun_base SOURCES)
list(TRANSFORM _base_sources PREPEND ${PROJECT_SOURCE_DIR}/base/)
string(REPLACE ";" "|" _base_sources "${_base_sources}")
add_test(NAME base.purity
  COMMAND ${CMAKE_COMMAND} -DNAME=rankrun_base "-DFILES=${_base_sources}" -P ${CMAKE_CURRENT_SOURCE_DIR}/check_purity.cmake)

# The room rule of docs/architecture.md: no include runs up a floor, no two rooms include each other.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_test(NAME launcher.rooms COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/check_rooms.py ${PROJECT_SOURCE_DIR})

add_test(NAME cli.help COMMAND rankrun --help)
# One usage line, naming the script.
set_tests_properties(cli.help PROPERTIES PASS_REGULAR_EXPRESSION "Usage: rankrun \\[options\\] SCRIPT" FAIL_REGULAR_EXPRESSION "Usage:.*Usage:")
add_test(NAME cli.version COMMAND rankrun --version)
set_tests_properties(cli.version PROPERTIES PASS_REGULAR_EXPRESSION "rankrun ${PROJECT_VERSION}")
