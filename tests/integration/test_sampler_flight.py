"""The worker-side reading of torch's flight recorder (launcher/hangs/python/_rankrun_watch.py),
against the dumps of tests/unit/data/flight_recorder/ (recorded from torch 2.14 gloo jobs): what
each sample line says of a process group. The recorder's dump function is the seam; no torch.
"""
import importlib.util
import json

from harness import ROOT

DATA = ROOT / "tests" / "unit" / "data" / "flight_recorder"


def watch_module():
    spec = importlib.util.spec_from_file_location("rankrun_watch_under_test",
                                                  ROOT / "launcher" / "hangs" / "python" / "_rankrun_watch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Recorder:
    """torch's _dump_fr_trace_json over a dump that the test changes between samples."""

    def __init__(self, dump):
        self.dump = dump
        self.entry_reads = 0

    def __call__(self, includeCollectives, onlyActive):
        if includeCollectives:
            self.entry_reads += 1
            return json.dumps(self.dump)
        return json.dumps({k: v for k, v in self.dump.items() if k != "entries"})


def recorded(name):
    return json.loads((DATA / name).read_text())


def flight_of(recorder):
    return watch_module()._RankrunFlight([(".fr.json", recorder)])


def test_the_pending_collective_and_its_op():
    recorder = Recorder(recorded("op_mismatch_rank1.json"))
    assert flight_of(recorder).groups(force=True) == "pg 0 4 -1 3 gloo:broadcast default_pg\n"


def test_a_last_completed_overwritten_by_gloos_other_thread_is_read_from_the_retired_entries():
    # torch 2.14's gloo: the worker thread that ran #2 wrote its 2 after the one that ran #3 wrote 3.
    dump = recorded("op_mismatch_rank1.json")
    dump["pg_status"]["0"]["last_completed_collective"] = "2"
    recorder = Recorder(dump)
    assert flight_of(recorder).groups(force=True) == "pg 0 4 -1 3 gloo:broadcast default_pg\n"


def test_every_retired_collective_means_none_pending():
    dump = recorded("op_mismatch_rank1.json")
    dump["pg_status"]["0"]["last_completed_collective"] = "2"
    dump["entries"][3]["retired"] = True
    assert flight_of(Recorder(dump)).groups(force=True) == "pg 0 4 -1 4 - -\n"


def test_entries_are_read_only_for_a_collective_pending_two_samples_and_again_when_asked():
    dump = recorded("op_mismatch_rank1.json")
    dump["pg_status"]["0"]["last_completed_collective"] = "2"
    recorder = Recorder(dump)
    flight = flight_of(recorder)
    assert flight.groups() == "pg 0 4 -1 2 - -\n"  # first seen pending: the ring is not read
    assert recorder.entry_reads == 0
    assert flight.groups() == "pg 0 4 -1 3 gloo:broadcast default_pg\n"
    assert flight.groups() == "pg 0 4 -1 3 gloo:broadcast default_pg\n"
    assert recorder.entry_reads == 1  # read once while the status stays
    dump["entries"][3]["retired"] = True
    assert flight.groups() == "pg 0 4 -1 3 gloo:broadcast default_pg\n"  # the read of before
    assert flight.groups(force=True) == "pg 0 4 -1 4 - -\n"  # asked: read now
    assert recorder.entry_reads == 2


def test_a_collective_enqueued_since_the_last_read_is_read_once():
    dump = recorded("op_mismatch_rank1.json")
    dump["pg_status"]["0"]["last_completed_collective"] = "2"
    dump["entries"][3]["retired"] = True
    recorder = Recorder(dump)
    flight = flight_of(recorder)
    flight.groups()
    assert flight.groups() == "pg 0 4 -1 4 - -\n"
    assert recorder.entry_reads == 1
    # #5 enqueued: its op was not in the last read
    fifth = dict(dump["entries"][3], collective_seq_id=5, profiling_name="gloo:barrier", retired=False)
    dump["entries"].append(fifth)
    dump["pg_status"]["0"]["last_enqueued_collective"] = "5"
    assert flight.groups() == "pg 0 5 -1 4 gloo:barrier default_pg\n"
    assert flight.groups() == "pg 0 5 -1 4 gloo:barrier default_pg\n"
    assert recorder.entry_reads == 2
    # a collective the ring does not hold is not looked for again at every sample
    dump["pg_status"]["0"]["last_enqueued_collective"] = "6"
    dump["entries"][-1]["retired"] = True
    assert flight.groups() == "pg 0 6 -1 4 gloo:barrier default_pg\n"  # the read of before: #5 pending
    dump["pg_status"]["0"]["last_completed_collective"] = "5"
    flight.groups()
    assert flight.groups() == "pg 0 6 -1 5 - -\n"
    assert flight.groups() == "pg 0 6 -1 5 - -\n"
    assert recorder.entry_reads == 3
