"""rankrun, installed by pip: the launcher's programs and the worker runtime.

The programs (rankrun, rankrun-store) are in the environment's scripts folder, on PATH once the
venv is active; ``python -m rankrun ARGS`` runs rankrun with ARGS and ends with its exit code.
The worker runtime (librankrun_worker, its headers, CMake package and pkg-config file) is in
this package's folder:

    cmake -DCMAKE_PREFIX_PATH="$(python -m rankrun --cmake-dir)" ...   # find_package(rankrun)
    PKG_CONFIG_PATH="$(python -m rankrun --pkg-config-dir)" pkg-config --cflags --libs rankrun-worker
"""

import os
import shutil
import sys
import sysconfig

__version__ = "@RANKRUN_VERSION@"
_HERE = os.path.dirname(os.path.abspath(__file__))


def program(name="rankrun"):
    """The path of one of the programs this install put in its scripts folder."""
    candidates = [sysconfig.get_path("scripts")]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        candidates.append(sysconfig.get_path("scripts", scheme=user_scheme))
    candidates.append(os.path.dirname(sys.executable))
    for folder in candidates:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{name} is not in {', '.join(candidates)} nor on PATH: reinstall the rankrun wheel")


def _runtime(*parts):
    """A folder of the worker runtime, inside this package (lib/ holds the multiarch folder)."""
    lib = os.path.join(_HERE, "lib")
    for entry in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        if entry.endswith("-linux-gnu"):
            lib = os.path.join(lib, entry)
            break
    return os.path.join(lib, *parts)


def lib_dir():
    """The folder of librankrun_worker."""
    return _runtime()


def include_dir():
    """The folder to put on the include path: rankrun/worker_context.hpp and the rest are in it."""
    return os.path.join(_HERE, "include")


def cmake_dir():
    """The folder of rankrunConfig.cmake: find_package(rankrun) with CMAKE_PREFIX_PATH or rankrun_DIR."""
    return _runtime("cmake", "rankrun")


def pkg_config_dir():
    """The folder of rankrun-worker.pc, for PKG_CONFIG_PATH."""
    return _runtime("pkgconfig")
