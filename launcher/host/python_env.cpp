#include "launcher/host/python_env.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/read_file.hpp"
#include "base/text.hpp"

namespace fs = std::filesystem;

namespace rankrun::launcher {
namespace {

bool is_executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

bool is_script(const std::string& path) {
  std::ifstream in(path);
  char head[2] = {};
  return in.read(head, 2) && head[0] == '#' && head[1] == '!';
}

// "key = value" of a pyvenv.cfg, or "".
std::string pyvenv_value(const std::string& cfg, std::string_view key) {
  std::istringstream lines(cfg);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || trim_blanks(std::string_view(line).substr(0, eq)) != key) continue;
    return std::string(trim_blanks(std::string_view(line).substr(eq + 1)));
  }
  return {};
}

std::vector<std::string> list_python_dirs(const std::string& lib_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(lib_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.rfind("python3.", 0) == 0) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::optional<std::string> environment_python(const std::vector<std::string>& program_dirs) {
  for (const auto& dir : program_dirs) {
    if (dir.empty()) continue;
    const fs::path bin(dir);
    const auto prefix = bin.parent_path();
    std::error_code ec;
    const bool venv = fs::is_regular_file(prefix / "pyvenv.cfg", ec);
    const bool conda = fs::is_directory(prefix / "conda-meta", ec);
    if (!venv && !conda) continue;
    for (const char* name : {"python3", "python"}) {
      if (is_executable(bin / name)) return (bin / name).string();
    }
  }
  return std::nullopt;
}

std::vector<std::string> package_dirs(const PythonLayout& layout) {
  std::vector<std::string> out;
  const auto add = [&out](const std::string& dir) {
    if (!dir.empty() && std::find(out.begin(), out.end(), dir) == out.end()) out.push_back(dir);
  };
  std::string_view rest = layout.pythonpath;
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    add(std::string(rest.substr(0, colon)));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
  const auto site = [&](const std::string& prefix, bool debian) {
    const auto lib = prefix + "/lib";
    const auto versions = layout.python_dirs ? layout.python_dirs(lib) : std::vector<std::string>();
    if (debian) {
      for (const auto& v : versions) add(prefix + "/local/lib/" + v + "/dist-packages");
      add(lib + "/python3/dist-packages");
    }
    for (const auto& v : versions) add(lib + "/" + v + "/site-packages");
  };
  const auto prefix = fs::path(layout.interpreter).parent_path().parent_path().string();
  if (layout.pyvenv) {
    site(prefix, false);
    if (pyvenv_value(*layout.pyvenv, "include-system-site-packages") == "true") {
      const auto home = pyvenv_value(*layout.pyvenv, "home");  // the base interpreter's folder
      if (!home.empty()) site(fs::path(home).parent_path().string(), true);
    }
    return out;
  }
  if (!layout.home.empty() && layout.python_dirs) {
    for (const auto& v : layout.python_dirs(prefix + "/lib")) add(layout.home + "/.local/lib/" + v + "/site-packages");
  }
  site(prefix, true);
  return out;
}

std::optional<std::string> torch_version_of(const std::string& version_py) {
  std::istringstream lines(version_py);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos || trim_blanks(std::string_view(line).substr(0, eq)) != "__version__") continue;
    auto value = trim_blanks(std::string_view(line).substr(eq + 1));
    if (value.size() >= 2 && (value.front() == '\'' || value.front() == '"') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    if (value.empty()) return std::nullopt;
    return std::string(value);
  }
  return std::nullopt;
}

std::string describe_python(const std::string& interpreter, const std::string& origin, const EnvMap& env) {
  PythonLayout layout;
  layout.interpreter = interpreter;
  const auto prefix = fs::path(interpreter).parent_path().parent_path();
  layout.pyvenv = read_file_head(prefix / "pyvenv.cfg", 64 * 1024);
  if (const auto it = env.find("PYTHONPATH"); it != env.end()) layout.pythonpath = it->second;
  if (const auto it = env.find("HOME"); it != env.end()) layout.home = it->second;
  layout.python_dirs = list_python_dirs;
  std::string line = interpreter + " (" + origin + ")";
  // A script in its place (pyenv's shim) starts another interpreter, chosen when it runs.
  if (is_script(interpreter)) {
    return line + ", a script that starts another interpreter: its torch is known only when it runs";
  }
  const auto dirs = package_dirs(layout);
  for (const auto& dir : dirs) {
    const auto text = read_file_head(fs::path(dir) / "torch" / "version.py", 64 * 1024);
    if (!text) continue;
    const auto version = torch_version_of(*text);
    return line + ", torch " + version.value_or("of unknown version") + " from " + dir;
  }
  std::string listed;
  for (const auto& dir : dirs) listed += (listed.empty() ? "" : ", ") + dir;
  return line + ", no torch in " + (listed.empty() ? "the folders it searches" : listed);
}

}  // namespace rankrun::launcher
