"""rankrun for Python: what a training script imports, and the launcher's programs and worker runtime.

In a training script (any worker rankrun starts has this package, of the rankrun that started it;
the wheel brings it to any venv):

    import rankrun.data      # DistributedSampler, BucketSampler, even_batches: equal batches on every rank
    import rankrun.progress  # step(), heartbeat(), section(name, timeout=...): progress rankrun sees

Both are pure Python over librankrun_worker (the same plans as a C++ trainer's); torch is not
needed to import them.

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


def __getattr__(name):
    # rankrun.data and rankrun.progress after a bare `import rankrun`, imported when first used.
    if name in ("data", "progress"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _runtime(*parts):
    """A folder of the worker runtime: inside this package (the wheel: lib/ holds the multiarch
    folder), else beside the librankrun_worker rankrun named for its workers."""
    lib = os.path.join(_HERE, "lib")
    if not os.path.isdir(lib) and os.environ.get("RANKRUN_WORKER_LIBRARY"):
        lib = os.path.dirname(os.environ["RANKRUN_WORKER_LIBRARY"])
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
    own = os.path.join(_HERE, "include")
    if os.path.isdir(own):
        return own
    # An install prefix: <prefix>/lib[/<multiarch>]/librankrun_worker.so and <prefix>/include.
    lib = _runtime()
    for up in ("..", os.path.join("..", "..")):
        candidate = os.path.normpath(os.path.join(lib, up, "include"))
        if os.path.isfile(os.path.join(candidate, "rankrun", "worker.h")):
            return candidate
    return own


def cmake_dir():
    """The folder of rankrunConfig.cmake: find_package(rankrun) with CMAKE_PREFIX_PATH or rankrun_DIR."""
    return _runtime("cmake", "rankrun")


def pkg_config_dir():
    """The folder of rankrun-worker.pc, for PKG_CONFIG_PATH."""
    return _runtime("pkgconfig")
