"""python -m rankrun ARGS: runs rankrun with ARGS, and ends with its exit code (the process is
replaced, so signals reach rankrun itself). Its Python workers run this interpreter
(sys.executable) unless PYTHON_EXEC names another. Four questions answered instead, each alone:

    python -m rankrun --cmake-dir | --include-dir | --lib-dir | --pkg-config-dir
"""

import os
import sys

import rankrun

_PATHS = {
    "--cmake-dir": rankrun.cmake_dir,
    "--include-dir": rankrun.include_dir,
    "--lib-dir": rankrun.lib_dir,
    "--pkg-config-dir": rankrun.pkg_config_dir,
}


def main():
    args = sys.argv[1:]
    if len(args) == 1 and args[0] in _PATHS:
        print(_PATHS[args[0]]())
        return 0
    try:
        path = rankrun.program("rankrun")
    except FileNotFoundError as e:
        print(f"python -m rankrun: {e}", file=sys.stderr)
        return 127
    # The workers run this interpreter, as torchrun's run sys.executable (PYTHON_EXEC still wins).
    env = dict(os.environ, RANKRUN_LAUNCHER_PYTHON=sys.executable)
    os.execve(path, [path] + args, env)
    return 127


if __name__ == "__main__":
    sys.exit(main())
