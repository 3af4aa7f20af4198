#pragma once
// Where the librankrun_worker of this rankrun is, for its Python workers (rankrun.data and
// rankrun.progress load it through ctypes; RANKRUN_WORKER_LIBRARY names it): beside the
// executable as each way of installing rankrun puts it.

#include <optional>
#include <string>

namespace rankrun::launcher {

/// The library of this version (librankrun_worker.so.<major>.<minor>, else librankrun_worker.so)
/// in the first of these that has one, `exe_dir` being the folder of rankrun's executable:
///   <exe_dir>/../worker_runtime                                   the build tree
///   <exe_dir>/../lib/<multiarch>, ../lib, ../lib64                a prefix (.deb, tarball, make install)
///   <exe_dir>/../lib/python3.*/site-packages/rankrun/lib/<multiarch>   the wheel (a venv, --user)
/// nullopt when none has.
std::optional<std::string> find_worker_library(const std::string& exe_dir, const std::string& soversion);

/// find_worker_library() for the running executable (/proc/self/exe).
std::optional<std::string> this_worker_library();

}  // namespace rankrun::launcher
