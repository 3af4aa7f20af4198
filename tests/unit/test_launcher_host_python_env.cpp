#include <doctest/doctest.h>

#include "launcher/host/python_env.hpp"

using namespace rankrun::launcher;

namespace {
std::vector<std::string> py311(const std::string&) { return {"python3.11"}; }
}  // namespace

TEST_CASE("a venv searches its own site-packages, and its base's only when it includes them") {
  PythonLayout l;
  l.interpreter = "/opt/venv/bin/python3";
  l.pyvenv = "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n";
  l.home = "/root";
  l.python_dirs = py311;
  CHECK(package_dirs(l) == std::vector<std::string>{"/opt/venv/lib/python3.11/site-packages"});
  l.pyvenv = "home = /usr/bin\ninclude-system-site-packages = true\n";
  l.pythonpath = "/work/src:/opt/extra";
  CHECK(package_dirs(l) == std::vector<std::string>{"/work/src", "/opt/extra", "/opt/venv/lib/python3.11/site-packages",
                                                    "/usr/local/lib/python3.11/dist-packages",
                                                    "/usr/lib/python3/dist-packages",
                                                    "/usr/lib/python3.11/site-packages"});
}

TEST_CASE("an interpreter outside a venv searches the user's site-packages, then its prefix's") {
  PythonLayout l;
  l.interpreter = "/usr/bin/python3";
  l.home = "/home/ann";
  l.python_dirs = py311;
  CHECK(package_dirs(l) == std::vector<std::string>{"/home/ann/.local/lib/python3.11/site-packages",
                                                    "/usr/local/lib/python3.11/dist-packages",
                                                    "/usr/lib/python3/dist-packages",
                                                    "/usr/lib/python3.11/site-packages"});
}

TEST_CASE("torch's version is read from its version.py") {
  CHECK(torch_version_of("__version__ = '1.13.0a0'\ndebug = False\n") == "1.13.0a0");
  CHECK(torch_version_of("from typing import Optional\n__version__ = \"2.14.0+cu130\"\n") == "2.14.0+cu130");
  CHECK_FALSE(torch_version_of("debug = False\n"));
  CHECK_FALSE(torch_version_of("__version__ = ''\n"));
}
