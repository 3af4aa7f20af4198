# Launcher: unit tests of the pure core (and the CLI parser), one file per source file.
add_executable(rankrun_launcher_tests
  unit/launcher_main.cpp
  unit/test_launcher_cleanup_plan.cpp
  unit/test_launcher_cli.cpp
  unit/test_launcher_error_file.cpp
  unit/test_launcher_exit_status.cpp
  unit/test_launcher_failure_report.cpp
  unit/test_launcher_gpu_list.cpp
  unit/test_launcher_hang_policy.cpp
  unit/test_launcher_hang_report.cpp
  unit/test_launcher_stack_dump.cpp
  unit/test_launcher_line_splitter.cpp
  unit/test_launcher_options.cpp
  unit/test_launcher_proc_parse.cpp
  unit/test_launcher_rank_plan.cpp
  unit/test_launcher_shm_names.cpp
  unit/test_launcher_supervisor_policy.cpp
  unit/test_launcher_worker_env.cpp)
target_link_libraries(rankrun_launcher_tests PRIVATE rankrun_launcher_sys doctest::doctest rankrun_warnings)
add_test(NAME launcher.unit COMMAND rankrun_launcher_tests)

# The pure libraries must not do I/O: no Asio, Process or signal headers in their sources.
add_test(NAME launcher.pure_core_has_no_effects
  COMMAND sh -c "! grep -nE '#include <(boost/(asio|process)|csignal|signal.h|sys/socket.h)' launcher/options.cpp launcher/gpu_list.cpp launcher/rank_plan.cpp launcher/worker_env.cpp launcher/exit_status.cpp launcher/error_file.cpp launcher/failure_report.cpp launcher/line_splitter.hpp launcher/hang_policy.cpp launcher/stack_dump.cpp launcher/hang_report.cpp launcher/proc_parse.cpp launcher/shm_names.cpp launcher/cleanup_plan.cpp"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

add_test(NAME cli.help COMMAND rankrun --help)
add_test(NAME cli.version COMMAND rankrun --version)
set_tests_properties(cli.version PROPERTIES PASS_REGULAR_EXPRESSION "rankrun ${PROJECT_VERSION}")
