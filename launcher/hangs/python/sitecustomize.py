# Installed by rankrun in front of PYTHONPATH for its workers. It lets rankrun ask a worker for
# the stacks of all its threads when the job looks hung: faulthandler is registered on the
# signal named by RANKRUN_STACK_SIGNAL and writes to RANKRUN_STACK_DIR/<pid>.stack, whose
# existence tells rankrun that this process can be asked. A torch built without libuv gets its
# store client without libuv (below). Then the interpreter's own sitecustomize, if there is one
# (Debian ships one), runs as it would have without rankrun.
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


def _rankrun_store_client_without_libuv(rendezvous):
    # torch >= 2.4's TCPStore asks for libuv unless told otherwise, and torch's rendezvous never
    # tells a client of the launcher's store otherwise (USE_LIBUV is not read there): a torch
    # built without libuv (Debian's 2.x packages) fails every init_process_group, under torchrun
    # too. On exactly that error, and only then, the store is made again without libuv; libuv
    # changes nothing for a client.
    original = getattr(rendezvous, "_create_c10d_store", None)
    if original is None:
        return

    def _create_c10d_store(hostname, port, rank, world_size, timeout, *rest, **kwargs):
        try:
            return original(hostname, port, rank, world_size, timeout, *rest, **kwargs)
        except RuntimeError as exc:
            if "without libuv" not in str(exc):
                raise
        # Whether the client is of the launcher's store, as this torch decides it (2.6 has no
        # _agent_store_serves).
        serves = getattr(rendezvous, "_agent_store_serves", None)
        use_agent_store = getattr(rendezvous, "_torchelastic_use_agent_store", None)
        if serves is not None:
            agent_store = serves(hostname, port)
        elif use_agent_store is not None:
            agent_store = use_agent_store()
        else:
            agent_store = _os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        if agent_store:
            from torch.distributed import TCPStore

            return TCPStore(host_name=hostname, port=port, world_size=world_size, is_master=False, timeout=timeout,
                            use_libuv=False)
        kwargs.pop("use_libuv", None)
        return original(hostname, port, rank, world_size, timeout, False)

    _create_c10d_store.__wrapped__ = original
    rendezvous._create_c10d_store = _create_c10d_store


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


def _rankrun_watch_torch():
    if _os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        _sys.meta_path.insert(0, _RankrunAfterImport("torch.distributed.rendezvous", _rankrun_store_client_without_libuv))


_rankrun_register_stack_dump()
_rankrun_watch_torch()
_rankrun_chain_sitecustomize()
