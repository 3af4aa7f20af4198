# Installed by rankrun in front of PYTHONPATH for its workers. It lets rankrun see where a
# worker is without disturbing it:
#
# - A sampler thread, started once torch.distributed is imported, looks at the main thread once
#   per RANKRUN_SAMPLE_INTERVAL seconds (default 1; 0: off) and rewrites
#   RANKRUN_STACK_DIR/<pid>.where: whether it is inside a torch.distributed call (which one) or
#   in backward with a process group up, the user's innermost frame, when its stack last
#   changed, and the CPU time of the main thread and of the process. When rankrun creates
#   <pid>.ask (and writes a byte to the <pid>.wake FIFO the sampler waits on, so that it looks at
#   once), the sampler writes every thread's stack to <pid>.pystack (faulthandler's format) and
#   removes the ask. It reads frames and clocks only: no signal, no output, no warning.
# - With torch 2.x, torch's flight recorder is turned on (RANKRUN_FLIGHT_RECORDER entries, unless
#   the user set TORCH_FR_BUFFER_SIZE; RANKRUN_FLIGHT_RECORDER=0: rankrun neither sets nor reads
#   it) and each sample carries every process group's last collective enqueued, started and
#   completed; asked, the sampler also writes the recorder's whole dump to <pid>.fr.json (and
#   NCCL's to <pid>.fr-nccl.json) before the stacks.
# - faulthandler on RANKRUN_STACK_SIGNAL, writing to <pid>.stack, for a process whose sampler
#   does not answer (the main thread holds the GIL in native code).
# - An uncaught exception writes when it happened (Unix nanoseconds) to <pid>.failed, before the
#   previous sys.excepthook runs: rankrun's report gives the rank that time when rankrun itself
#   saw its exit late.
#
# A torch built without libuv gets its store client without libuv. The sampler, the flight
# recorder and the store client's patch are in _rankrun_watch.py beside this file, loaded once
# torch.distributed is imported: every worker compiles this short file at its start (the run
# directory is new for each job), not those. Then the interpreter's own sitecustomize, if there
# is one (Debian ships one), runs as it would have without rankrun.
import os as _os
import sys as _sys


def _rankrun_register_stack_dump():
    directory = _os.environ.get("RANKRUN_STACK_DIR")
    signum = _os.environ.get("RANKRUN_STACK_SIGNAL")
    if not directory or not signum or not _os.path.isdir(directory):
        return
    try:
        import faulthandler

        # A bare descriptor, not a file object: nothing to be collected (and warned about) at exit.
        fd = _os.open(_os.path.join(directory, "%d.stack" % _os.getpid()),
                      _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC | _os.O_NOFOLLOW, 0o600)
        faulthandler.register(int(signum), file=fd, all_threads=True, chain=False)
        # Calls the signal lands in are restarted rather than failed with EINTR where the
        # kernel can (reads, writes, connects; not poll or sleeps).
        # The C module: signal.py imports enum, some milliseconds at every worker's start.
        import _signal

        _signal.siginterrupt(int(signum), False)
    except Exception:  # never break the user's program for a diagnostic aid
        pass


def _rankrun_note_failures():
    directory = _os.environ.get("RANKRUN_STACK_DIR")
    if not directory:
        return
    previous = _sys.excepthook

    def _rankrun_excepthook(kind, value, tb):
        try:
            import time

            failed_at = time.time_ns()
            name = _os.path.join(directory, "%d.failed" % _os.getpid())
            fd = _os.open(name + ".tmp", _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC | _os.O_NOFOLLOW,
                          0o600)
            try:
                _os.write(fd, b"%d\n" % failed_at)
            finally:
                _os.close(fd)
            _os.rename(name + ".tmp", name)
        except Exception:  # never break the user's program for a diagnostic aid
            pass
        previous(kind, value, tb)

    _sys.excepthook = _rankrun_excepthook


class _RankrunAfterImport:
    """Calls `patch` with module `name` once it has been executed, then leaves sys.meta_path."""

    def __init__(self, name, patch):
        self.name = name
        self.patch = patch

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        try:
            _sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        patch = self.patch

        def exec_and_patch(module):
            exec_module(module)
            try:
                patch(module)
            except Exception:  # never break the user's program
                pass

        loader.exec_module = exec_and_patch
        return spec


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


_RANKRUN_WATCH = None


def _rankrun_watch_module():
    """rankrun's _rankrun_watch.py beside this file, loaded by its path (not through sys.path,
    where a module of the user's could stand first), once."""
    global _RANKRUN_WATCH
    if _RANKRUN_WATCH is None:
        import importlib.util

        path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "_rankrun_watch.py")
        spec = importlib.util.spec_from_file_location("_rankrun_watch", path)
        module = importlib.util.module_from_spec(spec)
        _sys.modules["_rankrun_watch"] = module
        spec.loader.exec_module(module)
        _RANKRUN_WATCH = module
    return _RANKRUN_WATCH


def _rankrun_on_torch_distributed(_module=None):
    try:
        _rankrun_watch_module()._rankrun_on_torch_distributed()
    except Exception:  # never break the user's program
        pass


def _rankrun_watch_store_client(rendezvous):
    try:
        _rankrun_watch_module()._rankrun_watch_store_client(rendezvous)
    except Exception:  # never break the user's program
        pass


def _rankrun_watch_torch():
    if "torch.distributed" in _sys.modules:
        _rankrun_on_torch_distributed()
    else:
        _sys.meta_path.insert(0, _RankrunAfterImport("torch.distributed", _rankrun_on_torch_distributed))
    _sys.meta_path.insert(0, _RankrunAfterImport("torch.distributed.rendezvous", _rankrun_watch_store_client))


_rankrun_register_stack_dump()
_rankrun_note_failures()
_rankrun_watch_torch()
_rankrun_chain_sitecustomize()
