# rankrun's watch inside a Python worker, loaded by rankrun's sitecustomize.py once the worker
# imports torch.distributed (a worker that never does pays nothing for it): the sampler thread,
# torch's flight recorder, the environment this torch reads, and the store client of
# init_process_group. What each part does is said in sitecustomize.py.
import os as _os
import sys as _sys


_RANKRUN_C10D = _os.sep + _os.path.join("torch", "distributed", "distributed_c10d.py")
_RANKRUN_DDP = _os.sep + _os.path.join("torch", "nn", "parallel", "distributed.py")
_RANKRUN_AUTOGRAD = _os.sep + _os.path.join("torch", "autograd") + _os.sep
_RANKRUN_TORCH = _os.sep + "torch" + _os.sep
# Frames of rankrun's own files (note_blocking here, the import hook in sitecustomize.py) are
# not the user's.
_RANKRUN_SELF = (__file__, _os.path.join(_os.path.dirname(__file__), "sitecustomize.py"))


def _rankrun_stdlib_dirs():
    import sysconfig

    dirs = set()
    for key in ("stdlib", "platstdlib"):
        try:
            dirs.add(_os.path.join(sysconfig.get_path(key), ""))
        except Exception:
            pass
    return tuple(d for d in dirs if d != _os.sep)


_RANKRUN_FR_GROUPS = 64  # at most this many process groups in a sample


class _RankrunFlight:
    """torch's flight recorder (torch 2.x), read from inside the worker: for each process group
    the last collective enqueued, started and completed, and the collective still pending when
    one is. Two recorders: the generic one (gloo, CPU; _dump_fr_trace_json) and NCCL's own
    (_dump_nccl_trace_json), each where this torch has it."""

    def __init__(self, dumps):
        import json

        self.json = json
        self.dumps = dumps  # [(file suffix, function(includeCollectives, onlyActive))]
        self.pending = {}   # (recorder, group, first) -> (retired seqs, {seq: "op desc"}, enqueued then)
        self.waiting = {}   # (recorder, group) -> the first collective not completed at the last sample

    @staticmethod
    def open():
        c10d = _sys.modules.get("torch._C._distributed_c10d")
        if c10d is None:
            try:
                import torch._C._distributed_c10d as c10d
            except Exception:
                return None
        dumps = []
        for suffix, name in ((".fr.json", "_dump_fr_trace_json"), (".fr-nccl.json", "_dump_nccl_trace_json")):
            fn = getattr(c10d, name, None)
            if fn is not None:
                dumps.append((suffix, fn))
        return _RankrunFlight(dumps) if dumps else None

    @staticmethod
    def call(fn, collectives, only_active):
        try:
            return fn(includeCollectives=collectives, onlyActive=only_active)
        except TypeError:  # a torch whose binding takes them by position only
            return fn(collectives, only_active)

    def pending_op(self, index, fn, group, first, enqueued, fresh):
        """(the first collective of `group` not completed, "op desc" of it: "gloo:all_reduce
        default_pg", or "- -" when none is pending), from the recorder's entries, where the
        collectives from `first` on that the backend retired are completed: torch's gloo writes
        last_completed_collective from two worker threads unordered, so that the thread that ran
        collective 2 can overwrite the 3 written by the one that ran collective 3 (torch 2.14).
        The ring is read once per `first` while it stays (again only for a collective enqueued
        since, whose op the last read did not see), and always when `fresh`."""
        key = (index, group, first)
        known = self.pending.get(key)
        if known is not None:
            retired, ops, seen = known
            pending = self.first_pending(retired, first, enqueued)
        if fresh or known is None or (seen < pending <= enqueued and pending not in ops):
            if len(self.pending) > 4 * _RANKRUN_FR_GROUPS:
                self.pending.clear()
            retired, ops = self.read_ring(fn, group, first)
            self.pending[key] = (retired, ops, enqueued)
            pending = self.first_pending(retired, first, enqueued)
        return pending, ops.get(pending, "- -") if pending <= enqueued else "- -"

    def read_ring(self, fn, group, first):
        """The collectives of `group` from `first` on in the recorder's entries: (the retired ones,
        {seq: "op desc"})."""
        retired = set()
        ops = {}
        try:
            for e in self.json.loads(self.call(fn, True, True)).get("entries", ()):
                pg = e.get("process_group") or ("", "")
                seq = e.get("collective_seq_id")
                if str(pg[0]) != group or e.get("is_p2p") or not isinstance(seq, int) or seq < first:
                    continue
                if e.get("retired") is True:
                    retired.add(seq)
                desc = "".join(ch if ch.isalnum() or ch in "_-.:" else "_" for ch in str(pg[1]))[:64]
                ops[seq] = "%s %s" % (str(e.get("profiling_name") or "-").replace(" ", "_")[:64], desc or "-")
        except Exception:
            pass
        return retired, ops

    @staticmethod
    def first_pending(retired, first, enqueued):
        while first <= enqueued and first in retired:
            first += 1
        return first

    def groups(self, force=False):
        """One line per process group: "pg NAME ENQUEUED STARTED COMPLETED OP DESC" (OP and DESC
        of the first collective not completed, "-" when none is pending; STARTED -1 where the
        backend does not say)."""
        lines = []
        waiting = {}
        for index, (_, fn) in enumerate(self.dumps):
            try:
                status = self.json.loads(self.call(fn, False, True)).get("pg_status") or {}
            except Exception:
                continue
            for group, st in status.items():
                if len(lines) >= _RANKRUN_FR_GROUPS:
                    break
                try:
                    enq = int(st.get("last_enqueued_collective", -1))
                    started = int(st.get("last_started_collective", -1))
                    done = int(st.get("last_completed_collective", -1))
                except (TypeError, ValueError):
                    continue
                name = str(group)
                if not name or len(name) > 64 or any(ch.isspace() for ch in name):
                    continue
                # Sequence ids start at 1; a group that completed none says -1.
                first = max(done, 0) + 1
                op = "- -"
                if enq >= first:
                    # The entries (the whole ring, where the backend does not mark them completed:
                    # gloo) are read only for a collective still pending a sample later: a busy
                    # job's collectives come and go between samples at no cost.
                    if force or self.waiting.get((index, name)) == first:
                        pending, op = self.pending_op(index, fn, name, first, enq, force)
                        if pending > first:
                            done = pending - 1
                            if started >= 0:
                                started = max(started, done)
                    waiting[(index, name)] = first
                lines.append("pg %s %d %d %d %s\n" % (name, enq, started, done, op))
        self.waiting = waiting
        return "".join(lines)

    def write_dumps(self, directory, pid):
        """Every recorder's whole dump (torch's JSON) to <pid>.fr.json / <pid>.fr-nccl.json."""
        for suffix, fn in self.dumps:
            try:
                data = self.call(fn, True, False)
                if isinstance(data, str):
                    data = data.encode("utf-8", "replace")
                target = _os.path.join(directory, "%d%s" % (pid, suffix))
                fd = _os.open(target + ".part", _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC | _os.O_NOFOLLOW,
                              0o600)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[_os.write(fd, view):]
                finally:
                    _os.close(fd)
                _os.rename(target + ".part", target)
            except Exception:
                pass


class _RankrunSampler:
    """Looks at the main thread once per interval; see the top of this file."""

    def __init__(self, directory, interval):
        import threading
        import time

        self.directory = directory
        self.interval = interval
        self.pid = _os.getpid()
        self.main = threading.main_thread()
        self.time = time
        self.stdlib = _rankrun_stdlib_dirs()
        self.where = _os.path.join(directory, "%d.where" % self.pid)
        self.ask = _os.path.join(directory, "%d.ask" % self.pid)
        self.fd = _os.open(self.where, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC | _os.O_NOFOLLOW, 0o600)
        self.wake = self.open_wake()
        self.poller = None
        if self.wake is not None:
            import select

            self.poller = select.poll()  # not select(): a descriptor past 1023 is fine
            self.poller.register(self.wake, select.POLLIN)
        try:
            self.main_clock = time.pthread_getcpuclockid(self.main.ident)
        except Exception:
            self.main_clock = None
        self.signature = None
        self.changed = time.monotonic()
        self.seq = 0
        flight = _os.environ.get("RANKRUN_FLIGHT_RECORDER", "")
        self.flight = _RankrunFlight.open() if not (flight.isdigit() and int(flight) == 0) else None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="rankrun-sampler", daemon=True)
        self.thread.start()

    def open_wake(self):
        """<pid>.wake, a FIFO the sampler waits on between samples: rankrun writes a byte there
        after it creates the ask, so that the ask is answered at once, not at the next sample.
        Held open for reading and writing: never an end of file, never a blocked open. None
        where it cannot be made: the ask is then seen at the next sample."""
        path = _os.path.join(self.directory, "%d.wake" % self.pid)
        try:
            try:
                _os.unlink(path)  # a process of this job that had the pid before
            except FileNotFoundError:
                pass
            _os.mkfifo(path, 0o600)
            return _os.open(path, _os.O_RDWR | _os.O_NONBLOCK | _os.O_CLOEXEC | _os.O_NOFOLLOW)
        except Exception:
            return None

    def wait(self):
        """Until the next sample, a wake or the stop: whether to stop."""
        if self.poller is None:
            return self.stopping.wait(self.interval)
        if self.poller.poll(self.interval * 1000.0):
            try:
                _os.read(self.wake, 4096)
            except OSError:
                pass
        return self.stopping.is_set()

    def classify(self, frame):
        """(the torch.distributed call the main thread is in, or "backward" with a process group
        up, or ""; the user's innermost frame as "file.py:12 in f"; the stack's signature)."""
        call = ""
        ddp = ""
        in_backward = False
        user = ""
        signature = []
        f = frame
        while f is not None:
            code = f.f_code
            name = code.co_filename
            if name in _RANKRUN_SELF:
                f = f.f_back
                continue
            signature.append((id(code), f.f_lineno))
            if name.endswith(_RANKRUN_C10D) and not code.co_name.startswith("_"):
                call = code.co_name  # the outermost public one wins: init_process_group, not barrier
            elif name.endswith(_RANKRUN_DDP) and not call:
                ddp = "DDP " + code.co_name  # DDP's own communication: its construction, join hooks
            elif _RANKRUN_AUTOGRAD in name and code.co_name == "backward":
                in_backward = True
            if not user and _RANKRUN_TORCH not in name and not name.startswith(self.stdlib) and not name.startswith("<"):
                user = "%s:%d in %s" % (_os.path.basename(name), f.f_lineno, code.co_name)
            f = f.f_back
        if not call and ddp:
            call = ddp
        if not call and in_backward:
            dist = _sys.modules.get("torch.distributed")
            try:
                if dist is not None and dist.is_available() and dist.is_initialized():
                    call = "backward"
            except Exception:
                pass
        return call, user, tuple(signature)

    def sample(self, asked=False):
        frame = _sys._current_frames().get(self.main.ident)
        if frame is None:
            return False
        call, user, signature = self.classify(frame)
        del frame
        now = self.time.monotonic()
        if signature != self.signature:
            self.signature = signature
            self.changed = now
        main_cpu = self.time.clock_gettime(self.main_clock) if self.main_clock is not None else -1.0
        # Asked for the stacks (a hang is being diagnosed): every pending collective's op now.
        groups = self.flight.groups(force=asked) if self.flight is not None else ""
        self.seq += 1
        text = ("rankrun-sample 1\nseq %d\ntime %.3f\nchanged %.3f\nmain_cpu %.3f\ncpu %.3f\nin %s\nat %s\n%send %d\n"
                % (self.seq, now, self.changed, main_cpu, self.time.process_time(), call or "-", user or "-", groups,
                   self.seq))
        data = text.encode("utf-8", "replace")
        _os.pwrite(self.fd, data, 0)
        _os.ftruncate(self.fd, len(data))
        return True

    def write_stacks(self):
        """Every thread's stack but the sampler's, in faulthandler's format, to <pid>.pystack."""
        lines = []
        for ident, frame in _sys._current_frames().items():
            if ident == self.thread.ident:
                continue
            head = "Current thread" if ident == self.main.ident else "Thread"
            lines.append("%s 0x%016x (most recent call first):" % (head, ident))
            f = frame
            while f is not None:
                if f.f_code.co_filename not in _RANKRUN_SELF:
                    lines.append('  File "%s", line %d in %s' % (f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
                f = f.f_back
            lines.append("")
            f = frame = None
        target = _os.path.join(self.directory, "%d.pystack" % self.pid)
        partial = target + ".part"
        fd = _os.open(partial, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC | _os.O_NOFOLLOW, 0o600)
        try:
            _os.write(fd, ("\n".join(lines) + "\n").encode("utf-8", "replace"))
        finally:
            _os.close(fd)
        _os.rename(partial, target)

    def note_timeout(self, exc):
        """Called by the interpreter's excepthook when the main thread dies of an exception: one
        that says a collective timed out (gloo's "Timed out waiting ...", NCCL's watchdog) leaves
        this rank's flight recorder dump and <pid>.timeout (its first line), so that rankrun
        collects the other ranks' dumps before it stops them."""
        message = str(exc)
        if "Timed out waiting" not in message and "collective operation timeout" not in message:
            return
        if not self.lock.acquire(timeout=1.0):
            return
        try:
            if self.flight is not None:
                self.flight.write_dumps(self.directory, self.pid)
            fd = _os.open(_os.path.join(self.directory, "%d.timeout" % self.pid),
                          _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | _os.O_CLOEXEC | _os.O_NOFOLLOW, 0o600)
            try:
                _os.write(fd, (message.splitlines() or [""])[0][:500].encode("utf-8", "replace") + b"\n")
            finally:
                _os.close(fd)
        finally:
            self.lock.release()

    def note_blocking(self):
        """Called by the main thread before a call known to hold the interpreter while it waits
        (torch 1.13's store connect): the sampler cannot look during it, so the sample and the
        stacks are written now, from where the main thread is about to wait."""
        try:
            with self.lock:
                self.sample()
                self.write_stacks()
        except Exception:
            pass

    def stop(self):
        """At the interpreter's exit (atexit, after the handlers the program registered later): the
        thread ends while the interpreter is whole, not as a daemon woken in its finalization."""
        import threading

        self.stopping.set()
        if self.wake is not None:
            try:
                _os.write(self.wake, b"s")
            except OSError:
                pass
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=1.0)

    def run(self):
        while True:
            if self.wait():
                return
            try:
                with self.lock:
                    if not self.sample():
                        return
                    if _os.path.exists(self.ask):
                        if self.flight is not None:
                            self.sample(asked=True)
                            self.flight.write_dumps(self.directory, self.pid)
                        self.write_stacks()
                        _os.unlink(self.ask)
            except Exception:  # a full disk, a directory removed at the job's end: stop quietly
                return


_rankrun_sampler = None


def _rankrun_start_sampler(_module=None):
    directory = _os.environ.get("RANKRUN_STACK_DIR")
    try:
        interval = float(_os.environ.get("RANKRUN_SAMPLE_INTERVAL", "1"))
    except ValueError:
        interval = 1.0
    if not directory or not interval > 0 or not _os.path.isdir(directory):
        return
    # One sampler per rank: the first process of the rank that imports torch.distributed. Its
    # children (DataLoader workers, helper scripts) inherit the mark and stay out of it.
    me = str(_os.getpid())
    owner = _os.environ.get("RANKRUN_SAMPLER_PID")
    if owner and owner != me:
        return
    _os.environ["RANKRUN_SAMPLER_PID"] = me
    global _rankrun_sampler
    _rankrun_sampler = _RankrunSampler(directory, interval)
    import atexit

    atexit.register(_rankrun_sampler.stop)
    previous = _sys.excepthook

    def _rankrun_excepthook(exc_type, exc, tb):
        try:
            _rankrun_sampler.note_timeout(exc)
        except Exception:  # never hide the user's own error
            pass
        previous(exc_type, exc, tb)

    _sys.excepthook = _rankrun_excepthook


def _rankrun_watch_store_client(rendezvous):
    # The store connect of init_process_group holds the interpreter while it waits in torch
    # 1.13: the sampler is told first where the main thread waits.
    #
    # torch >= 2.4's TCPStore asks for libuv unless told otherwise, and torch's rendezvous never
    # tells a client of the launcher's store otherwise (USE_LIBUV is not read there): a torch
    # built without libuv (Debian's 2.x packages) fails every init_process_group, under torchrun
    # too. On exactly that error, and only then, the store is made again without libuv; libuv
    # changes nothing for a client.
    original = getattr(rendezvous, "_create_c10d_store", None)
    if original is None:
        return

    def _create_c10d_store(hostname, port, rank, world_size, timeout, *rest, **kwargs):
        if _rankrun_sampler is not None:
            _rankrun_sampler.note_blocking()
        if _os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            return original(hostname, port, rank, world_size, timeout, *rest, **kwargs)
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


def _rankrun_torch_env():
    """The environment this torch reads, set before its first process group (a user's own
    setting wins):
    - NCCL_ASYNC_ERROR_HANDLING for a torch older than 2.2, which reads only that name (newer ones
      read TORCH_NCCL_ASYNC_ERROR_HANDLING, set by rankrun, and warn about the old one);
    - the flight recorder's buffer (RANKRUN_FLIGHT_RECORDER entries, 0: off) under the name this
      torch reads: TORCH_FR_BUFFER_SIZE where the generic recorder exists, else
      TORCH_NCCL_TRACE_BUFFER_SIZE (NCCL's, torch 2.x before it)."""
    env = _os.environ
    torch = _sys.modules.get("torch")
    try:
        major, minor = (int(x) for x in str(torch.__version__).split(".")[:2])
    except Exception:
        return
    if (major, minor) < (2, 2) and "NCCL_ASYNC_ERROR_HANDLING" not in env and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in env:
        env["NCCL_ASYNC_ERROR_HANDLING"] = env["TORCH_NCCL_ASYNC_ERROR_HANDLING"]
    entries = env.get("RANKRUN_FLIGHT_RECORDER", "")
    if major < 2 or not entries.isdigit() or int(entries) <= 0:
        return
    if "TORCH_FR_BUFFER_SIZE" in env or "TORCH_NCCL_TRACE_BUFFER_SIZE" in env:
        return
    c10d = _sys.modules.get("torch._C._distributed_c10d")
    generic = c10d is not None and hasattr(c10d, "_dump_fr_trace_json")
    env["TORCH_FR_BUFFER_SIZE" if generic else "TORCH_NCCL_TRACE_BUFFER_SIZE"] = entries


def _rankrun_on_torch_distributed(_module=None):
    try:
        _rankrun_torch_env()
    except Exception:  # never break the user's program
        pass
    _rankrun_start_sampler()
