# Installed by rankrun in front of PYTHONPATH for its workers. It lets rankrun ask a worker for
# the stacks of all its threads when the job looks hung: faulthandler is registered on the
# signal named by RANKRUN_STACK_SIGNAL and writes to RANKRUN_STACK_DIR/<pid>.stack, whose
# existence tells rankrun that this process can be asked. Then the interpreter's own
# sitecustomize, if there is one (Debian ships one), runs as it would have without rankrun.
import os as _os
import sys as _sys


def _rankrun_register_stack_dump():
    directory = _os.environ.get("RANKRUN_STACK_DIR")
    signum = _os.environ.get("RANKRUN_STACK_SIGNAL")
    if not directory or not signum or not _os.path.isdir(directory):
        return
    try:
        import faulthandler

        stream = open(_os.path.join(directory, "%d.stack" % _os.getpid()), "w")
        faulthandler.register(int(signum), file=stream, all_threads=True, chain=False)
        _sys.modules[__name__]._rankrun_stack_stream = stream  # keep it open for the process's life
    except Exception:  # never break the user's program for a diagnostic aid
        pass


def _rankrun_chain_sitecustomize():
    here = _os.path.dirname(_os.path.abspath(__file__))
    ours = _sys.modules.pop("sitecustomize", None)
    saved = list(_sys.path)
    try:
        _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as exc:  # the same report Python gives for a failing sitecustomize
        print("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s" % (type(exc).__name__, exc),
              file=_sys.stderr)
    finally:
        _sys.path[:] = saved
        if ours is not None:
            _sys.modules["sitecustomize"] = ours


_rankrun_register_stack_dump()
_rankrun_chain_sitecustomize()
