#pragma once
// rankrun's sitecustomize.py for Python workers (launcher/hangs/python/sitecustomize.py, built into
// the executable): registers faulthandler on the stack-dump signal, then runs the
// interpreter's own sitecustomize.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rankrun::launcher {

std::string_view python_sitecustomize();
/// The watch sitecustomize.py loads once torch.distributed is imported
/// (launcher/hangs/python/_rankrun_watch.py): the sampler, the flight recorder, the store client.
std::string_view python_watch_module();
/// The rankrun package for training scripts (packaging/python/rankrun): (path below the hook's
/// folder, text), e.g. ("rankrun/data.py", ...).
std::vector<std::pair<std::string_view, std::string_view>> python_package();

/// Writes both as `<name>/sitecustomize.py` and `<name>/_rankrun_watch.py`, and the package as
/// `<name>/rankrun/...`, below the open run directory `run_dir` (whose path is
/// `run_dir_path`), whole, as a new file reached without following a link: nothing when it is,
/// else why not, naming the file ("cannot write /run/x/python/sitecustomize.py: No space left
/// on device"). A hook cut short would fail every Python worker, or leave a hang without its
/// stacks.
std::optional<std::string> install_python_hook(int run_dir, const std::string& run_dir_path, const std::string& name);

}  // namespace rankrun::launcher
