#pragma once
// rankrun's sitecustomize.py for Python workers (launcher/hangs/python/sitecustomize.py, built into
// the executable): registers faulthandler on the stack-dump signal, then runs the
// interpreter's own sitecustomize.

#include <string>
#include <string_view>

namespace rankrun::launcher {

std::string_view python_sitecustomize();

/// Writes it as `<dir>/sitecustomize.py`; returns false when that fails.
bool install_python_hook(const std::string& dir);

}  // namespace rankrun::launcher
