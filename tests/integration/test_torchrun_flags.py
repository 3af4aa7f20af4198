"""torch 2.14's torchrun options, with real workers: the shutdown grace (--shutdown-timeout and
TORCH_ELASTIC_SHUTDOWN_TIMEOUT), --signals-to-handle, --duplicate-*-filters,
--log-line-prefix-template, --event-log-handler, --print-completion, and the torchrun option
rankrun refuses with what it offers instead (--logs-specs other than default; --numa-binding:
test_numa_binding.py), and the command lines of torch's own launcher tests. And the parity: every option of the
workers' torch's own torchrun (its run.py's parser, read by that torch's Python) is known to
rankrun, so that an option torch adds fails here rather than in a user's first run.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from harness import PYTHON, RANKRUN, Running, run, torch_only

# Its torch tests run again with torch 2.14 in make test (conftest.py: torch_commit).
pytestmark = pytest.mark.torch_commit

# A worker that ignores SIGTERM (so only SIGKILL ends it), and rank 0 failing after half a second.
IGNORES_TERM = "trap '' TERM; if [ \"$RANK\" = 0 ]; then sleep 0.5; exit 3; fi; sleep 100"


def elapsed(args, env=None, timeout=90):
    start = time.monotonic()
    r = run(args, env=env, timeout=timeout)
    return r, time.monotonic() - start


@pytest.mark.parametrize("how", ["--shutdown-timeout=2", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=2",
                                 "--shutdown-timeout=60 --term-timeout=2", "--term-timeout=60 --shutdown-timeout=2"])
def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace_asked_for(how):
    args, env = [], {}
    for word in how.split():
        if word.startswith("--"):
            args.append(word)
        else:
            name, value = word.split("=")
            env[name] = value
    r, seconds = elapsed(["--nproc-per-node", "2", *args, "--no-python", "sh", "-c", IGNORES_TERM], env=env)
    assert r.returncode == 3, r.stderr
    # the grace was 2 s, not the default 30: SIGKILL came after it
    assert "sending SIGKILL" in r.stderr and "2s after" in r.stderr, r.stderr
    assert seconds < 20, (seconds, r.stderr)


def test_the_grace_of_an_option_given_wrong_is_named():
    r = run(["--shutdown-timeout=-1", "--no-python", "true"])
    assert r.returncode == 2 and "--shutdown-timeout=-1" in r.stderr, r.stderr
    r = run(["--no-python", "true"], env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"})
    assert r.returncode == 2 and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT='soon'" in r.stderr, r.stderr


# Each rank says which signal it got, and what rankrun told it to handle, then exits 0.
TRAPS = ("trap 'echo \"rank $RANK got USR2\"; exit 0' USR2; trap 'echo \"rank $RANK got USR1\"; exit 0' USR1; "
         "echo \"rank $RANK handles=${TORCHELASTIC_SIGNALS_TO_HANDLE-unset}\"; "
         "while :; do sleep 0.1; done")


def start_trapping(extra):
    job = Running(["--nproc-per-node", "2", *extra, "--no-python", "sh", "-c", TRAPS])
    job.wait_for_lines(r"rank \d handles=", 2)
    return job


def test_a_listed_sigusr2_stops_the_job_after_reaching_the_workers():
    job = start_trapping(["--signals-to-handle=SIGTERM,SIGINT,SIGUSR2"])
    job.proc.send_signal(signal.SIGUSR2)
    result = job.finish()
    code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 128 + signal.SIGUSR2, err
    assert "rank 0 got USR2" in out and "rank 1 got USR2" in out, out
    assert "handles=SIGTERM,SIGINT,SIGUSR2" in out, out  # TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun exports it


def test_an_unlisted_sigusr2_only_reaches_the_workers():
    job = start_trapping([])
    job.proc.send_signal(signal.SIGUSR2)
    # both ranks exit 0 on it: the job ends as a success, not as stopped
    result = job.finish()
    code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 0, err
    assert "rank 0 got USR2" in out and "handles=unset" in out, out


def test_a_listed_preempt_signal_stops_the_job_as_preempted():
    job = start_trapping(["--signals-to-handle=SIGTERM,SIGUSR1"])
    job.proc.send_signal(signal.SIGUSR1)
    result = job.finish()
    code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 120, err  # --preempt-signal (SIGUSR1 by default): preempted
    assert "rank 1 got USR1" in out, out


def test_signals_rankrun_cannot_take_are_refused():
    r = run(["--signals-to-handle=SIGTERM,SIGCHLD", "--no-python", "true"])
    assert r.returncode == 2 and "SIGCHLD cannot stop a job" in r.stderr, r.stderr
    r = run(["--signals-to-handle=SIGBOGUS", "--no-python", "true"])
    assert r.returncode == 2 and "'SIGBOGUS' is not a signal" in r.stderr, r.stderr


LINES = ("echo \"rank $RANK loss=0.$RANK\"; echo \"rank $RANK step\"; "
         "echo \"rank $RANK warn: slow\" >&2; echo \"rank $RANK other\" >&2")


def test_the_filtered_lines_of_the_teed_streams_are_copied_per_attempt(tmp_path):
    r = run(["--nproc-per-node", "2", "--tee", "3", "--log-dir", tmp_path, "--duplicate-stdout-filters", "loss",
             "--duplicate_stderr_filters", "warn,,x,slow", "--max-restarts", "1", "--no-python", "sh", "-c",
             # attempt 0: rank 0 fails a second after both printed (rank 1 ends first, with 0)
             LINES + "; [ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] || [ \"$RANK\" = 1 ] || { sleep 1; exit 1; }"])
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    for attempt in ("attempt_0", "attempt_1"):
        out = (run_dir / attempt / "filtered_stdout.log").read_text().splitlines()
        err = (run_dir / attempt / "filtered_stderr.log").read_text().splitlines()
        assert sorted(out) == ["[0] rank 0 loss=0.0", "[1] rank 1 loss=0.1"], out
        # "warn,,x" is one filter, "warn,x", which no line has; "slow" matches
        assert sorted(err) == ["[0] rank 0 warn: slow", "[1] rank 1 warn: slow"], err
    # the rank's own files keep every line
    assert "rank 1 step" in (run_dir / "attempt_0" / "1" / "stdout.log").read_text()


def test_filters_copy_only_the_teed_ranks(tmp_path):
    r = run(["--nproc-per-node", "2", "--tee", "0:1", "--log-dir", tmp_path, "--duplicate-stdout-filters", "loss",
             "--no-python", "sh", "-c", LINES])
    assert r.returncode == 0, r.stderr
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "attempt_0" / "filtered_stdout.log").read_text() == "[0] rank 0 loss=0.0\n"
    assert not (run_dir / "attempt_0" / "filtered_stderr.log").exists()


def test_the_line_prefix_template_replaces_the_rank_tag(tmp_path):
    template = "${role_name}:${rank}:${local_rank}@${hostname}| "
    r = run(["--nproc-per-node", "2", "--role", "trainer", "--log-line-prefix-template", template,
             "--no-python", "sh", "-c", "echo hello; echo oops >&2"])
    assert r.returncode == 0, r.stderr
    host = socket.gethostname()
    for rank in (0, 1):
        assert f"trainer:{rank}:{rank}@{host}| hello" in r.stdout.splitlines(), r.stdout
        assert f"trainer:{rank}:{rank}@{host}| oops" in r.stderr.splitlines(), r.stderr
    # torchrun's environment variable, when the option is not given
    r = run(["--nproc-per-node", "1", "--no-python", "sh", "-c", "echo hi"],
            env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<$rank> "})
    assert "<0> hi" in r.stdout.splitlines(), r.stdout


def test_event_log_handler_console_puts_the_events_on_stderr():
    r = run(["--event-log-handler", "console", "--nproc-per-node", "2", "--no-python", "true"])
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    types = [e["type"] for e in events]
    assert "attempt_started" in types and types.count("worker_started") == 2, r.stderr
    r = run(["--event-log-handler", "null", "--no-python", "true"])
    assert r.returncode == 0 and '"type"' not in r.stderr, r.stderr


def test_torchrun_options_rankrun_refuses_say_what_it_offers():
    r = run(["--logs-specs", "my_plugin", "--no-python", "true"])
    assert r.returncode == 2 and "--logs-specs=my_plugin" in r.stderr and "--log-dir" in r.stderr, r.stderr
    r = run(["--event-log-handler", "dynamic_rendezvous", "--no-python", "true"])
    assert r.returncode == 2 and "null" in r.stderr and "console" in r.stderr, r.stderr


# Command lines of torch's own launcher tests (test/distributed/launcher/test_run.py) that torchrun
# runs: --rdzv-conf in quotes (a shell line pasted into a list keeps them), an abbreviated long
# option, torchrun's built-in LogsSpecs by name.
TOUCH_RANK = 'touch "$0/$RANK"'


@pytest.mark.parametrize("line", [
    ["--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:{port}",
     "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'", "--rdzv-id=4711", "--monitor-interval=1",
     "--start-method=spawn"],
    ["--nnodes=1", "--nproc-per-node=4", "--redirect=3", "--log-dir={logs}", "--monitor-interval=1"],
    ["--nnodes=1", "--nproc-per-node=4", "--logs_specs=default", "--log-dir={logs}", "--tee=3"],
], ids=["rdzv-conf-in-quotes", "redirect-prefix", "logs-specs-default"])
def test_torchs_own_launcher_test_command_lines_run(line, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    touched = tmp_path / "touched"
    touched.mkdir()
    args = [a.format(port=port, logs=tmp_path / "logs") for a in line]
    r = run([*args, "--no-python", "sh", "-c", TOUCH_RANK, str(touched)], timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(touched)) == ["0", "1", "2", "3"], r.stderr
    if "rdzv-conf" in line[4]:
        assert "is in quotes; read as join_timeout=5,last_call_timeout=1,timeout=5" in r.stderr, r.stderr


def test_an_abbreviation_of_several_options_is_refused_naming_them():
    r = run(["--no", "--no-python", "true"])
    assert r.returncode == 2, r.stderr
    line = next((l for l in r.stderr.splitlines() if "ambiguous option: --no could match" in l), "")
    for name in ("--node-rank", "--no-python", "--no-pin", "--node-timeout"):
        assert name in line, r.stderr


def test_a_key_of_rdzv_conf_that_nothing_reads_is_named():
    r = run(["--rdzv-conf", "read_timeout=60,store_type=file", "--no-python", "true"])
    assert r.returncode == 0, r.stderr
    assert "--rdzv-conf: ignored store_type=file" in r.stderr, r.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_print_completion(shell, tmp_path):
    r = subprocess.run([str(RANKRUN), "--print-completion", shell], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    for option in ("--nproc-per-node", "--signals-to-handle", "--shutdown_timeout", "--print-completion"):
        assert option in r.stdout, (shell, option)
    if shell == "bash":
        script = tmp_path / "c.bash"
        script.write_text(r.stdout)
        check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    elif shutil.which(shell):
        script = tmp_path / f"c.{shell}"
        script.write_text(r.stdout)
        cmd = ["zsh", "-n", str(script)] if shell == "zsh" else ["tcsh", "-f", "-c", f"source {script}"]
        check = subprocess.run(cmd, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


# rankrun's answer to each torchrun option it does not take: the option is refused with this in the message.
REFUSED = {
    "--logs-specs": "rankrun does not load torchrun's LogsSpecs plugins",
    "--logs_specs": "rankrun does not load torchrun's LogsSpecs plugins",
}


@torch_only
def test_every_option_of_the_workers_torchrun_is_known_to_rankrun():
    """The option strings of torch.distributed.run's own parser (the torch the tests run: Debian's
    1.13 in the first pass, sid's 2.14 in the second), each known to rankrun's parser."""
    r = subprocess.run([PYTHON, "-c", "import json, torch, torch.distributed.run as r; "
                        "print(json.dumps([torch.__version__, [s for a in r.get_args_parser()._actions "
                        "for s in a.option_strings]]))"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    version, options = json.loads(r.stdout.splitlines()[-1])
    assert "--nproc-per-node" in options or "--nproc_per_node" in options, options
    help_text = subprocess.run([str(RANKRUN), "--help"], capture_output=True, text=True, timeout=30).stdout
    known = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", help_text))
    missing = [o for o in options if o not in known]
    assert not missing, f"torch {version}'s torchrun has options rankrun does not know: {missing}"
    for option, reason in REFUSED.items():
        if option in options:
            r = run([f"{option}=my_plugin", "--no-python", "true"])
            assert r.returncode == 2 and reason in r.stderr, (option, r.stderr)
