"""Progress that rankrun sees: the step each rank is at, that it is alive, and the sections it is
in (a checkpoint, an evaluation) where it may be silent for long.

    import rankrun.progress as progress

    for batch in loader:
        ...
        progress.step()                 # this rank is one step further (or step(n): at step n)
    with progress.section("checkpoint", timeout=900):
        save(model)                     # working, not hung, for up to 900 s

What reaches rankrun is what the C++ worker runtime sends: a heartbeat that carries the step, the
section and rankrun.data's batch count, written to rankrun's store by a thread of the runtime at
most once per heartbeat interval, and only after the script called since the last one. A rank
that called once and then stops calling for --heartbeat-timeout is hung; a rank inside a section
is working until the section's timeout. step() and heartbeat() cost an atomic store (well under
5 microseconds); a section's start and end are written at once.

Outside rankrun (no store in the environment) every call does nothing but count; an environment
the runtime refuses (RANK without LOCAL_RANK, say) gets one RuntimeWarning and the same. A process
forked from the one that called first (a DataLoader worker) does nothing either: the heartbeat
belongs to the rank's main process.
"""

import atexit
import contextlib
import os
import threading

from rankrun import _native

__all__ = ["step", "heartbeat", "section", "current_step"]

_lock = threading.Lock()
_handle = None  # the runtime's rankrun_progress, or None
_pid = None     # the process that made it
_lib = None
_step = -1


def _progress():
    """The heartbeat of this process, made at the first call; None outside rankrun or in a fork."""
    global _handle, _pid, _lib
    pid = os.getpid()
    if _pid == pid:
        return _handle
    with _lock:
        if _pid == pid:
            return _handle
        if _pid is not None:
            # A fork of the process that owns the heartbeat: its thread is not here.
            _handle, _pid = None, pid
            return None
        import ctypes

        lib = _native.lib()
        handle = ctypes.c_void_p()
        err = _native.error_buffer()
        status = lib.rankrun_progress_create(ctypes.byref(handle), 0, err, len(err))
        if status != 0:
            # Progress is what rankrun sees; training goes on without it, said once.
            import warnings

            warnings.warn("rankrun.progress: no heartbeat, rankrun will not see this rank's steps: " +
                          err.value.decode(errors="replace"), RuntimeWarning, stacklevel=3)
            handle = ctypes.c_void_p()
        _lib = lib
        _handle = handle if handle.value else None
        _pid = pid
        if _handle is not None:
            atexit.register(_close)
        return _handle


def _close():
    """The last beat (the final step and batch count) is written, the thread joined."""
    global _handle
    with _lock:
        if _handle is not None and _pid == os.getpid():
            _lib.rankrun_progress_destroy(_handle)
        _handle = None


def step(n=None):
    """This rank is at step `n` (one step further when `n` is None); also a heartbeat."""
    global _step
    _step = _step + 1 if n is None else int(n)
    handle = _handle if _pid == os.getpid() else _progress()
    if handle is not None:
        _lib.rankrun_progress_step(handle, _step)
    return _step


def current_step():
    """The last step given (-1 before the first)."""
    return _step


def heartbeat():
    """This rank is alive and working, without a new step."""
    handle = _handle if _pid == os.getpid() else _progress()
    if handle is not None:
        _lib.rankrun_progress_beat(handle)


@contextlib.contextmanager
def section(name, timeout):
    """Inside the block this rank is working, not hung, for up to `timeout` seconds (a checkpoint,
    an evaluation): rankrun's hang checks wait for it, its straggler warning names it ("rank 0 is
    in section 'checkpoint' for 412s of 900s"), and past `timeout` it is reported as hung there.
    Sections do not nest: an inner one replaces the outer until it ends."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"rankrun.progress.section: name={name!r}; give a non-empty string")
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise ValueError(f"rankrun.progress.section: timeout={timeout!r}; give the most seconds the section may "
                         "take") from None
    if not seconds > 0:
        raise ValueError(f"rankrun.progress.section: timeout={timeout!r}; give the most seconds the section may "
                         "take (more than 0)")
    handle = _progress()
    if handle is not None:
        _lib.rankrun_progress_enter_section(handle, name.encode(errors="replace"), int(seconds * 1000))
    try:
        yield
    finally:
        if handle is not None and _pid == os.getpid():
            _lib.rankrun_progress_leave_section(handle)
            _lib.rankrun_progress_beat(handle)


def _batches(epoch, read, planned):
    """rankrun.data's count for the report: batches read so far of `planned` in `epoch`."""
    handle = _handle if _pid == os.getpid() else _progress()
    if handle is not None:
        _lib.rankrun_progress_batches(handle, epoch, read, planned)
