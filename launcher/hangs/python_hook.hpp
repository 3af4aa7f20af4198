#pragma once
// rankrun's sitecustomize.py for Python workers (launcher/hangs/python/sitecustomize.py, built into
// the executable): registers faulthandler on the stack-dump signal, then runs the
// interpreter's own sitecustomize.

#include <optional>
#include <string>
#include <string_view>

namespace rankrun::launcher {

std::string_view python_sitecustomize();

/// Writes it as `<dir>/sitecustomize.py`, whole: nothing when it is, else why not, naming the
/// file ("cannot write /run/x/python/sitecustomize.py: No space left on device"). A hook cut
/// short would fail every Python worker, or leave a hang without its stacks.
std::optional<std::string> install_python_hook(const std::string& dir);

}  // namespace rankrun::launcher
