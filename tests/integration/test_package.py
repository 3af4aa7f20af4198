"""The Debian package `make package` builds: unpacked into an empty root, it holds what it should,
its rankrun runs, an outside project builds against it, and lintian has no error to report.

Needs the package built first (`make package`, or $RANKRUN_PACKAGE_DIR naming the directory
that holds the .deb); skipped, with the reason, otherwise. The test does not build it itself:
a Release build of the whole project takes minutes.
"""
import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = Path(os.environ.get("RANKRUN_PACKAGE_DIR", ROOT / "build-package" / "package"))
CONSUMER = ROOT / "examples" / "external_consumer"


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*rankrun\s+VERSION\s+([0-9.]+)", text)
    assert m, "project(rankrun VERSION x.y.z) not found in CMakeLists.txt"
    return m.group(1)


VERSION = project_version()


def find_deb():
    debs = sorted(PACKAGE_DIR.glob("rankrun_*.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


DEB = find_deb()
pytestmark = pytest.mark.skipif(
    DEB is None or shutil.which("dpkg-deb") is None,
    reason=f"no rankrun_*.deb in {PACKAGE_DIR}: run `make package` first" if DEB is None else "dpkg-deb is missing")


def sh(args, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def multiarch():
    out = sh(["gcc", "-print-multiarch"]).stdout.strip()
    return out or "x86_64-linux-gnu"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The package's files, unpacked into an empty directory."""
    root = tmp_path_factory.mktemp("deb-root")
    r = sh(["dpkg-deb", "-x", DEB, root])
    assert r.returncode == 0, r.stderr
    return root


def control(field):
    r = sh(["dpkg-deb", "-f", DEB, field])
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_control_fields():
    assert control("Package") == "rankrun"
    assert control("Version").split("-")[0] == VERSION, "the package's version is not project(VERSION)"
    assert DEB.name.startswith(f"rankrun_{VERSION}-"), DEB.name
    assert control("Maintainer")
    assert control("Section")
    assert control("Description").startswith("launcher and supervisor for distributed training")
    depends = control("Depends")
    # Computed by dpkg-shlibdeps from the binaries' libraries, not written by hand.
    for lib in ("libc6", "libstdc++6"):
        assert lib in depends, depends


def test_files(root):
    ma = multiarch()
    lib = root / "usr" / "lib" / ma
    expected = [
        "usr/bin/rankrun",
        "usr/bin/rankrun-store",
        f"usr/lib/{ma}/librankrun_worker.so.{VERSION}",
        f"usr/lib/{ma}/librankrun_worker.so",
        "usr/include/rankrun/worker.h",
        "usr/include/rankrun/worker_session.hpp",
        "usr/include/rankrun/config.hpp",
        "usr/include/rankrun/rendezvous/store_client.hpp",
        f"usr/lib/{ma}/cmake/rankrun/rankrunConfig.cmake",
        f"usr/lib/{ma}/cmake/rankrun/rankrunConfigVersion.cmake",
        f"usr/lib/{ma}/pkgconfig/rankrun-worker.pc",
        "usr/share/man/man1/rankrun.1.gz",
        "usr/share/man/man1/rankrun-store.1.gz",
        "usr/share/bash-completion/completions/rankrun",
        "usr/share/doc/rankrun/README.md",
        "usr/share/doc/rankrun/docs/options.md",
        "usr/share/doc/rankrun/docs/gpus.md",
        "usr/share/doc/rankrun/docs/multi-node.md",
        "usr/share/doc/rankrun/docs/etcd.md",
        "usr/share/doc/rankrun/docs/security.md",
        "usr/share/doc/rankrun/docs/slurm.md",
        "usr/share/doc/rankrun/docs/systemd.md",
        "usr/share/doc/rankrun/docs/preflight.md",
        "usr/share/doc/rankrun/docs/output.md",
        "usr/share/doc/rankrun/docs/hangs.md",
        "usr/share/doc/rankrun/docs/store.md",
        "usr/share/doc/rankrun/docs/worker-runtime.md",
        "usr/share/doc/rankrun/docs/torchrun-differences.md",
        "usr/share/doc/rankrun/docs/building.md",
        "usr/share/doc/rankrun/docs/testing.md",
        "usr/share/doc/rankrun/docs/architecture.md",
        "usr/share/doc/rankrun/docs/events.md",
        "usr/share/doc/rankrun/docs/benchmarks.md",
        "usr/share/doc/rankrun/docs/benchmarks/launch.md",
        "usr/share/doc/rankrun/docs/benchmarks/store.md",
        "usr/share/doc/rankrun/docs/benchmarks/hosted-store.md",
        "usr/share/doc/rankrun/docs/benchmarks/multi-node.md",
        "usr/share/doc/rankrun/docs/benchmarks/scale.md",
        "usr/share/doc/rankrun/docs/benchmarks/elastic.md",
        "usr/share/doc/rankrun/docs/benchmarks/elastic-etcd.md",
        "usr/share/doc/rankrun/docs/benchmarks/sampler.md",
        "usr/share/doc/rankrun/docs/benchmarks/job-view.md",
        "usr/share/doc/rankrun/changelog.gz",
        "usr/share/doc/rankrun/copyright",
        "usr/share/doc/rankrun/examples/slurm/multi_node.sbatch",
        "usr/share/doc/rankrun/examples/slurm/single_node.sbatch",
    ]
    if (ROOT / "packaging" / "systemd" / "rankrun@.service").exists():
        expected.append("usr/lib/systemd/system/rankrun@.service")
    missing = [f for f in expected if not (root / f).exists()]
    assert not missing, f"missing from the package: {missing}"
    # The library's SONAME link, whatever its name.
    assert list(lib.glob("librankrun_worker.so.*")), "no librankrun_worker.so.* link"
    # Nothing outside /usr (and no build tree leaking in).
    top = sorted(p.name for p in root.iterdir())
    assert top == ["usr"], top


def test_binaries_are_stripped(root):
    if shutil.which("readelf") is None:
        pytest.skip("readelf is missing")
    ma = multiarch()
    for f in [root / "usr/bin/rankrun", root / "usr/bin/rankrun-store",
              root / f"usr/lib/{ma}/librankrun_worker.so.{VERSION}"]:
        sections = sh(["readelf", "-S", "-W", f]).stdout
        assert ".symtab" not in sections and ".debug_info" not in sections, f"{f.name} is not stripped"


def test_rankrun_version(root):
    r = sh([root / "usr/bin/rankrun", "--version"], timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"rankrun {VERSION}", r.stdout
    r = sh([root / "usr/bin/rankrun-store", "--help"], timeout=30)
    assert r.returncode == 0 and "--port" in r.stdout, r.stdout + r.stderr


def test_the_packages_rankrun_gives_its_workers_rankrun_data_and_progress(root, tmp_path):
    # The package's rankrun finds its own librankrun_worker (/usr/lib/<multiarch>) for its Python
    # workers, and writes them the rankrun package of its version.
    job = Path(__file__).resolve().parent / "scripts" / "runtime_import_job.py"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                            "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PYTHONPATH")}
    env["PYTHON_EXEC"] = "/usr/bin/python3"
    r = sh([root / "usr/bin/rankrun", "--nproc-per-node", "2", job], env=env, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    shards = []
    for rank in range(2):
        m = re.search(rf"rank {rank} python \S+ rankrun {re.escape(VERSION)} shard ([\d,]+) even 2 library (\S+)",
                      r.stdout)
        assert m, r.stdout + r.stderr
        assert m.group(2).startswith(str(root / "usr" / "lib")), m.group(2)
        shards += [int(i) for i in m.group(1).split(",")]
    assert sorted(shards) == list(range(10)), shards


def long_options(root):
    """The long options `rankrun --help` lists, both spellings."""
    out = sh([root / "usr/bin/rankrun", "--help"], timeout=30).stdout
    opts = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", out))
    assert "--nproc-per-node" in opts and "--nproc_per_node" in opts, out
    return opts


def test_man_page_lists_every_option_and_exit_code(root):
    with gzip.open(root / "usr/share/man/man1/rankrun.1.gz", "rt") as f:
        man = f.read()
    assert man.startswith(".\\\"") or man.startswith(".TH"), "not a roff man page"
    assert re.search(r'^\.TH RANKRUN 1 .*"rankrun ' + re.escape(VERSION) + '"', man, re.M), \
        "the man page's .TH does not carry the project version"
    text = man.replace("\\-", "-")
    missing = sorted(o for o in long_options(root) if o not in text)
    assert not missing, f"options of `rankrun --help` that rankrun(1) does not document: {missing}"
    exit_section = text.split(".SH EXIT STATUS", 1)[1].split(".SH ", 1)[0]
    for code in ("0", "2", "120", "121", "122", "123", "124", "125", "128+"):
        assert code in exit_section, f"exit code {code} not in rankrun(1)"
    for var in ("PET_", "RANKRUN_"):
        assert var in text
    if shutil.which("man") is None:
        pytest.skip("man is missing (apt-get install man-db): rankrun(1) was read, not formatted with man --warnings")
    r = sh(["man", "--warnings", "-l", root / "usr/share/man/man1/rankrun.1.gz"],
           env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "0"})
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr


def complete(root, line):
    """COMPREPLY for `line`, as bash computes it with the packaged completion."""
    script = r'''
source "$1"
line=$2
read -ra w <<<"$line"
[[ $line == *' ' ]] && w+=('')
COMP_LINE=$line; COMP_POINT=${#line}
COMP_WORDS=("${w[@]}"); COMP_CWORD=$((${#w[@]} - 1))
_rankrun rankrun "${w[COMP_CWORD]}" "${w[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"
'''
    r = sh(["bash", "-c", script, "bash", root / "usr/share/bash-completion/completions/rankrun", line], timeout=30)
    assert r.returncode == 0, r.stderr
    return [l for l in r.stdout.splitlines() if l]


def test_bash_completion(root):
    text = (root / "usr/share/bash-completion/completions/rankrun").read_text()
    missing = sorted(o for o in long_options(root) if not re.search(re.escape(o) + r"(?![\w-])", text))
    assert not missing, f"options the completion does not offer: {missing}"
    assert set(complete(root, "rankrun --store")) == {"--store-protocol", "--store_protocol", "--store-memory", "--store_memory",
                                                      "--store-connections-per-address", "--store_connections_per_address"}
    assert complete(root, "rankrun --store-protocol ") == ["auto", "1.13", "2.1", "2.2"]
    assert complete(root, "rankrun --preempt_signal ") == ["SIGUSR1", "SIGUSR2"]
    assert complete(root, "rankrun --rdzv-backend ") == ["static", "c10d", "etcd"]
    # After SCRIPT every word is the script's: no rankrun options are offered.
    assert complete(root, "rankrun --nproc-per-node 2 train.py --st") == []


def test_external_consumer_builds_against_the_package(root, tmp_path):
    """examples/external_consumer, with CMake (find_package) and with pkg-config, against the
    unpacked tree alone."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is missing")
    ma = multiarch()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "TORCHELASTIC_ERROR_FILE", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH")}
    build = tmp_path / "cmake-build"
    r = sh(["cmake", "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={root / 'usr'}"], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    cache = (build / "CMakeCache.txt").read_text()
    found = re.search(r"^rankrun_DIR:PATH=(.*)$", cache, re.M).group(1)
    assert found == str(root / "usr" / "lib" / ma / "cmake" / "rankrun"), f"found rankrun elsewhere: {found}"
    r = sh(["cmake", "--build", build], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    run_env = {**env, "LD_LIBRARY_PATH": str(root / "usr" / "lib" / ma)}
    r = sh([build / "consumer"], env=run_env, timeout=60)
    assert r.returncode == 0 and "consumer rank 0/1 reads 10 samples" in r.stdout, r.stdout + r.stderr
    r = sh([build / "consumer_c"], env=run_env, timeout=60)
    assert r.returncode == 0 and "consumer_c rank 0/1" in r.stdout, r.stdout + r.stderr

    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is missing (apt-get install pkg-config): the consumer built with CMake, "
                    "the one with pkg-config could not be built")
    pc_env = {**env, "PKG_CONFIG_PATH": str(root / "usr" / "lib" / ma / "pkgconfig")}
    flags = sh(["pkg-config", "--cflags", "--libs", "rankrun-worker"], env=pc_env)
    assert flags.returncode == 0, flags.stderr
    assert str(root) in flags.stdout, f"pkg-config does not point into the unpacked tree: {flags.stdout}"
    exe = tmp_path / "consumer_pc"
    r = sh(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", CONSUMER / "main.cpp", "-o", exe,
            *flags.stdout.split()], env=pc_env)
    assert r.returncode == 0, r.stderr
    r = sh([exe], env=run_env, timeout=60)
    assert r.returncode == 0 and "consumer rank 0/1 reads 10 samples" in r.stdout, r.stdout + r.stderr


def test_lintian():
    """lintian on the .deb: no error. Warnings are printed (pytest -s, or -rA) but do not fail."""
    if shutil.which("lintian") is None:
        pytest.skip("lintian is not installed (apt-get install lintian)")
    r = sh(["lintian", "--tag-display-limit", "0", DEB], timeout=600)
    print(r.stdout + r.stderr)
    errors = [l for l in r.stdout.splitlines() if l.startswith("E:")]
    assert not errors, "lintian errors:\n" + "\n".join(errors)
