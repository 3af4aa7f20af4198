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
# The runtime's rankrun_progress of this process: None until the first call, False when there is
# nothing to report to (outside rankrun, a fork of the process that owns it).
_handle = None
_lib = None
_step = -1


def _forked():
    # The child of a fork: the heartbeat's thread is not here, and the heartbeat is the parent's.
    global _handle
    _handle = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _progress():
    """The heartbeat of this process, made at the first call; False outside rankrun or in a fork."""
    global _handle, _lib
    with _lock:
        if _handle is not None:
            return _handle
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
        _handle = handle if handle.value else False
        if _handle:
            atexit.register(_close, os.getpid())
        return _handle


def _close(pid):
    """The last beat (the final step and batch count) is written, the thread joined."""
    global _handle
    with _lock:
        if _handle and os.getpid() == pid:
            _lib.rankrun_progress_destroy(_handle)
        _handle = False


def step(n=None):
    """This rank is at step `n` (one step further when `n` is None); also a heartbeat."""
    global _step
    _step = _step + 1 if n is None else int(n)
    handle = _handle
    if handle is None:
        handle = _progress()
    if handle:
        _lib.rankrun_progress_step(handle, _step)
    return _step


def current_step():
    """The last step given (-1 before the first)."""
    return _step


def heartbeat():
    """This rank is alive and working, without a new step."""
    handle = _handle
    if handle is None:
        handle = _progress()
    if handle:
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
    handle = _handle
    if handle is None:
        handle = _progress()
    if handle:
        _lib.rankrun_progress_enter_section(handle, name.encode(errors="replace"), int(seconds * 1000))
    try:
        yield
    finally:
        if handle and _handle:
            _lib.rankrun_progress_leave_section(handle)
            _lib.rankrun_progress_beat(handle)


def _batches(epoch, read, planned):
    """rankrun.data's count for the report: batches read so far of `planned` in `epoch`."""
    handle = _handle
    if handle is None:
        handle = _progress()
    if handle:
        _lib.rankrun_progress_batches(handle, epoch, read, planned)
