#pragma once
// Where NcclCommunicator looks for NCCL (libnccl.so.2) and the CUDA runtime (libcudart.so.N),
// which the worker runtime loads when first used instead of linking them, and the words of its
// errors. Pure: the places come from values (the variables, the runtime's own file, a lister of
// python3.X folders); nccl_api.cpp tries them in this order.
//
// In order, for each library:
//   1. its override variable (RANKRUN_NCCL_LIBRARY, RANKRUN_CUDART_LIBRARY): a full path, and
//      then the only place (a wrong path is an error, not a reason to look elsewhere);
//   2. a library of that soname already loaded in the process (the trainer links it, or torch
//      loaded it): a second NCCL beside it would not understand its communicators;
//   3. torch's pip wheels (nvidia/nccl/lib, nvidia/cu13/lib, nvidia/cuda_runtime/lib) in the
//      site-packages of $VIRTUAL_ENV, of the runtime itself (the wheel installs it in
//      site-packages/rankrun/lib), of each $PYTHONPATH entry and of $CONDA_PREFIX, then conda's
//      own $CONDA_PREFIX/lib;
//   4. by soname: $LD_LIBRARY_PATH, then the system's library path (dlopen's own search).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rankrun::worker {

/// What says where the libraries may be.
struct NcclSearchInputs {
  /// The override variables that are set and not empty: RANKRUN_NCCL_LIBRARY -> its path.
  std::map<std::string, std::string> overrides;
  std::string virtual_env;      // $VIRTUAL_ENV
  std::string pythonpath;       // $PYTHONPATH
  std::string conda_prefix;     // $CONDA_PREFIX
  std::string ld_library_path;  // $LD_LIBRARY_PATH (only for the words of the error)
  std::string runtime_file;     // librankrun_worker's own file, as the dynamic loader names it
  /// The python3.X folder names in a lib folder ("/venv/lib" -> {"python3.12"}), sorted.
  std::function<std::vector<std::string>(const std::string& lib_dir)> python_dirs;
};

/// One library and where its packages put it.
struct LibrarySpec {
  std::string what;                           // "NCCL", "the CUDA runtime"
  std::string override_variable;              // "RANKRUN_NCCL_LIBRARY"
  std::vector<std::string> sonames;           // in order of preference
  std::vector<std::string> in_site_packages;  // paths relative to a site-packages folder
  std::vector<std::string> in_prefix;         // relative to $CONDA_PREFIX
  std::string fix;                            // what to do when none is found
  std::string needed_version;                 // "NCCL 2.14 or newer": when a symbol is missing
};

const LibrarySpec& nccl_spec();
const LibrarySpec& cudart_spec();

/// One place to look.
struct LibraryCandidate {
  enum class Kind {
    override_file,  // names[0]: the override variable's path
    loaded,         // names: sonames, looked up among the libraries already loaded
    files,          // names: files relative to `dir` (a site-packages or a prefix)
    by_name,        // names: sonames, for dlopen's own search
  };
  Kind kind;
  std::string origin;  // why this place: "VIRTUAL_ENV", "PYTHONPATH", ...
  std::string dir;     // files only
  std::vector<std::string> names;
};

/// The nearest folder above `file` named site-packages or dist-packages, lexically.
std::optional<std::string> enclosing_site_packages(std::string_view file);

/// A folder that may hold Python packages, and why it is looked at.
struct PackageDir {
  std::string dir;
  std::string origin;
};

/// The site-packages folders to look in, in order, each once: $VIRTUAL_ENV's (a
/// lib/python3.*/site-packages pattern when python_dirs finds none), the runtime's own, each
/// $PYTHONPATH entry, $CONDA_PREFIX's.
std::vector<PackageDir> python_package_dirs(const NcclSearchInputs& in);

/// Every place to look for `spec`'s library, in order (see the top of this file).
std::vector<LibraryCandidate> library_candidates(const LibrarySpec& spec, const NcclSearchInputs& in);

/// What came of looking in one place: empty when nothing was there, else the loader's word on
/// what was there and would not load.
struct LibraryAttempt {
  LibraryCandidate candidate;
  std::string outcome;
};

/// The error when no place had the library: every place looked, in order, and the fix.
std::string library_not_found_message(const LibrarySpec& spec, const std::vector<LibraryAttempt>& attempts,
                                      const NcclSearchInputs& in);

/// The error when the library loaded from `file` lacks `symbols`.
std::string missing_symbols_message(const LibrarySpec& spec, const std::string& file, const std::string& origin,
                                    const std::vector<std::string>& symbols);

/// "2.28.9" from ncclGetVersion's code (22809; 2.8 and older: 2803).
std::string nccl_version_text(int code);

}  // namespace rankrun::worker
