#pragma once
// The workers' Python: the interpreter of the environment rankrun is installed in, and the torch
// that interpreter would import, found by reading files (starting an interpreter costs 100 ms).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/types/env_map.hpp"

namespace rankrun::launcher {

/// The python3 of the virtual environment (a pyvenv.cfg above the folder) or conda environment
/// (a conda-meta folder above it) whose bin/ is one of `program_dirs`, the first that has one;
/// nullopt when none is.
std::optional<std::string> environment_python(const std::vector<std::string>& program_dirs);

/// What says where an interpreter looks for packages.
struct PythonLayout {
  std::string interpreter;            // as the workers run it, links not followed
  std::optional<std::string> pyvenv;  // the text of <prefix>/pyvenv.cfg, if there is one
  std::string pythonpath;             // $PYTHONPATH
  std::string home;                   // $HOME
  /// The python3.X folder names in a lib folder ("/usr/lib" -> {"python3.11"}).
  std::function<std::vector<std::string>(const std::string& lib_dir)> python_dirs;
};

/// The folders the interpreter searches for packages, in its order, as far as files tell:
/// PYTHONPATH's; a venv's site-packages, then its base's with include-system-site-packages =
/// true; otherwise the user's site-packages and the prefix's (Debian's dist-packages too).
std::vector<std::string> package_dirs(const PythonLayout& layout);

/// torch's version from the text of its torch/version.py ("__version__ = '2.14.0'"), or nullopt.
std::optional<std::string> torch_version_of(const std::string& version_py);

/// One line for the start of a Python job and the failure report: "/opt/venv/bin/python3 (the
/// environment rankrun is installed in), torch 2.14.0"; or "..., no torch in <folders>" when
/// none of the folders it searches has one.
std::string describe_python(const std::string& interpreter, const std::string& origin, const EnvMap& env);

}  // namespace rankrun::launcher
