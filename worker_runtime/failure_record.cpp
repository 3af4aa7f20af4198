#include "rankrun/failure_record.hpp"
#include "stack_dump_handler.hpp"

#include <cxxabi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <typeinfo>

#include "worker_runtime/atomic_file.hpp"
#include "worker_runtime/backtrace.hpp"
#include "worker_runtime/error_json.hpp"

namespace rankrun {
namespace {

// Process-wide by nature: std::set_terminate is itself a global.
std::atomic<std::terminate_handler> g_previous_handler{nullptr};
std::atomic<bool> g_installed{false};
std::atomic<bool> g_exit_1{false};
std::atomic<bool> g_in_handler{false};

std::int64_t unix_nanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// When the failure happened, to the nanosecond, for rankrun's report: RANKRUN_STACK_DIR/<pid>.failed
// (the error file's timestamp is in whole seconds, as torch writes it). Best effort.
void note_failure_time(std::int64_t unix_ns) noexcept {
  try {
    const char* dir = std::getenv("RANKRUN_STACK_DIR");
    if (!dir || !*dir) return;
    worker::write_file_atomically(std::string(dir) + "/" + std::to_string(::getpid()) + ".failed",
                                  std::to_string(unix_ns) + "\n");
  } catch (...) {
  }
}

bool write_record(const std::string& message, const std::string& callstack, std::int64_t unix_ns) noexcept {
  note_failure_time(unix_ns);
  try {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (!path || !*path) return false;
    worker::write_file_atomically(
        path, worker::format_error_json({message, callstack, std::to_string(unix_ns / 1'000'000'000)}));
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rankrun: could not write the error file: %s\n", e.what());
    return false;
  } catch (...) {
    return false;
  }
}

// Type and message of the exception being handled, without catching anything new.
std::string describe_current_exception() {
  std::type_info* type = abi::__cxa_current_exception_type();
  if (!type) return "std::terminate called without an active exception";
  const std::string type_name = worker::demangle(type->name());
  try {
    throw;
  } catch (const std::exception& e) {
    return worker::failure_message(type_name, e.what());
  } catch (...) {
    return worker::failure_message(type_name, "");
  }
}

[[noreturn]] void on_terminate() {
  // A second failure inside the handler (or in another thread at the same time) must not
  // recurse or interleave two records.
  if (g_in_handler.exchange(true)) std::abort();
  const std::int64_t failed_at = unix_nanoseconds();  // before the backtrace, which takes time
  // Leave out capture_backtrace, this handler and the C++ runtime's terminate path.
  const std::string callstack = worker::strip_terminate_frames(worker::capture_backtrace(0), 1);
  const std::string message = describe_current_exception();
  write_record(message, callstack, failed_at);
  std::fprintf(stderr, "rankrun: worker failed: %s\nTraceback (native, innermost first):\n%s", message.c_str(),
               callstack.c_str());
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  if (g_exit_1.load()) std::_Exit(1);
  std::terminate_handler previous = g_previous_handler.load();
  if (previous) previous();
  std::abort();
}

}  // namespace

void install_failure_handler() {
  worker::install_stack_dump_handler();
  if (g_installed.exchange(true)) return;
  g_previous_handler.store(std::set_terminate(on_terminate));
}

bool record_failure(const std::exception& error) noexcept {
  try {
    const std::int64_t failed_at = unix_nanoseconds();
    const std::string type_name = worker::demangle(typeid(error).name());
    return write_record(worker::failure_message(type_name, error.what()), worker::capture_backtrace(0), failed_at);
  } catch (...) {
    return false;
  }
}

bool record_failure(std::string_view type, std::string_view message) noexcept {
  try {
    const std::int64_t failed_at = unix_nanoseconds();
    return write_record(worker::failure_message(type, message), worker::capture_backtrace(0), failed_at);
  } catch (...) {
    return false;
  }
}

int run_main(int (*main_fn)(int, char**), int argc, char** argv) {
  g_exit_1.store(true);
  install_failure_handler();
  return main_fn(argc, argv);
}

}  // namespace rankrun
