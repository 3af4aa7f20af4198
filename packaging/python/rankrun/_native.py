"""The worker runtime's C API (rankrun/worker.h) through ctypes: rankrun.data and rankrun.progress
run the same code as a C++ trainer linked to librankrun_worker, so the plans cannot drift apart.

The library is, in this order: RANKRUN_WORKER_LIBRARY (rankrun sets it for its workers to the
librankrun_worker of the rankrun that started them), then the one inside this package (the wheel).
"""

import ctypes
import glob
import os
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK = threading.Lock()
_LIB = None

_u64 = ctypes.c_uint64
_i64 = ctypes.c_int64
_int = ctypes.c_int
_p = ctypes.c_void_p
_u64p = ctypes.POINTER(ctypes.c_uint64)
_ERR_SIZE = 1024


def library_path():
    """The path of the librankrun_worker this process uses; FileNotFoundError naming where it looked."""
    looked = []
    named = os.environ.get("RANKRUN_WORKER_LIBRARY")
    if named:
        if os.path.isfile(named):
            return named
        looked.append(f"RANKRUN_WORKER_LIBRARY={named} (no such file)")
    lib = os.path.join(_HERE, "lib")
    found = sorted(glob.glob(os.path.join(lib, "*-linux-gnu", "librankrun_worker.so*")) +
                   glob.glob(os.path.join(lib, "librankrun_worker.so*")))
    if found:
        return min(found, key=len)  # librankrun_worker.so before .so.0.1.0
    looked.append(os.path.join(lib, "*-linux-gnu"))
    raise FileNotFoundError(
        "librankrun_worker is not found (looked at " + ", ".join(looked) + "): run under rankrun, install the "
        "rankrun wheel, or set RANKRUN_WORKER_LIBRARY to the library's path")


def _declare(lib):
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("rankrun_plan_distributed", _int, ctypes.POINTER(_p), _u64, _int, _int, _int, _u64, _u64, _int,
       ctypes.c_char_p, ctypes.c_size_t)
    fn("rankrun_plan_buckets", _int, ctypes.POINTER(_p), _p, _u64, _p, _u64, _p, _int, _int, _int, _u64, _u64,
       _int, ctypes.c_char_p, ctypes.c_size_t)
    fn("rankrun_plan_size", _u64, _p)
    fn("rankrun_plan_indices", _u64p, _p)
    fn("rankrun_plan_batches", _u64, _p)
    fn("rankrun_plan_offsets", _u64p, _p)
    fn("rankrun_plan_destroy", None, _p)
    fn("rankrun_progress_create", _int, ctypes.POINTER(_p), _i64, ctypes.c_char_p, ctypes.c_size_t)
    fn("rankrun_progress_destroy", None, _p)
    fn("rankrun_progress_step", None, _p, _i64)
    fn("rankrun_progress_beat", None, _p)
    fn("rankrun_progress_enter_section", None, _p, ctypes.c_char_p, _i64)
    fn("rankrun_progress_leave_section", None, _p)
    fn("rankrun_progress_batches", None, _p, _u64, _u64, _u64)
    fn("rankrun_progress_beats", _u64, _p)
    fn("rankrun_worker_create", _int, ctypes.POINTER(_p), _i64, ctypes.c_char_p, ctypes.c_size_t)
    fn("rankrun_worker_destroy", None, _p)
    fn("rankrun_worker_all_gather", _int, _p, ctypes.c_char_p, _p, ctypes.c_size_t, _p, _i64)
    fn("rankrun_worker_last_error", ctypes.c_char_p, _p)


def lib():
    """The loaded library (once per process)."""
    global _LIB
    if _LIB is None:
        with _LOCK:
            if _LIB is None:
                loaded = ctypes.CDLL(library_path())
                _declare(loaded)
                _LIB = loaded
    return _LIB


def error_buffer():
    return ctypes.create_string_buffer(_ERR_SIZE)


def _take_plan(plan):
    """(indices, offsets) as lists, and the plan freed."""
    import array

    l = lib()
    try:
        size = l.rankrun_plan_size(plan)
        batches = l.rankrun_plan_batches(plan)
        indices = array.array("Q")
        offsets = array.array("Q")
        if size:
            indices.frombytes(ctypes.string_at(l.rankrun_plan_indices(plan), size * 8))
        offsets.frombytes(ctypes.string_at(l.rankrun_plan_offsets(plan), (batches + 1) * 8))
        return indices.tolist(), offsets.tolist()
    finally:
        l.rankrun_plan_destroy(plan)


def _check(status, err, what):
    if status != 0:
        message = err.value.decode(errors="replace")
        if status == 5:  # RANKRUN_ERR_INVALID
            raise ValueError(f"{what}: {message}")
        raise RuntimeError(f"{what}: {message}")


def plan_distributed(size, world_size, rank, shuffle, seed, epoch, drop_last):
    """This rank's sample indices in `epoch` (DistributedSampler's plan)."""
    plan = _p()
    err = error_buffer()
    _check(lib().rankrun_plan_distributed(ctypes.byref(plan), size, world_size, rank, int(bool(shuffle)),
                                          seed & 0xFFFFFFFFFFFFFFFF, epoch, int(bool(drop_last)), err, _ERR_SIZE),
           err, "DistributedSampler")
    return _take_plan(plan)[0]


def plan_buckets(lengths, boundaries, batch_sizes, world_size, rank, shuffle, seed, epoch, drop_last):
    """This rank's batches in `epoch` (BucketSampler's plan): (indices, offsets); `lengths`,
    `boundaries` and `batch_sizes` are array.array('Q')."""
    if len(batch_sizes) != len(boundaries) + 1:
        raise ValueError(f"BucketSampler: {len(batch_sizes)} batch sizes for {len(boundaries)} boundaries; give one "
                         "batch size per bucket, len(boundaries) + 1")
    plan = _p()
    err = error_buffer()

    def address(values):
        return values.buffer_info()[0] if len(values) else None

    _check(lib().rankrun_plan_buckets(ctypes.byref(plan), address(lengths), len(lengths), address(boundaries),
                                      len(boundaries), address(batch_sizes), world_size, rank, int(bool(shuffle)),
                                      seed & 0xFFFFFFFFFFFFFFFF, epoch, int(bool(drop_last)), err, _ERR_SIZE),
           err, "BucketSampler")
    return _take_plan(plan)
