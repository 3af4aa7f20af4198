#!/usr/bin/env python3
"""The wheel and the tarball, from the release build (make wheel, make dist).

    tools/make-dist.py RELEASE_BUILD OUT_DIR

RELEASE_BUILD is the Makefile's release tree: the programs in it, the worker runtime in its
runtime/ subtree. Both are installed (cmake --install) into a staging folder, then:

  OUT_DIR/rankrun-VERSION-py3-none-manylinux_2_X_x86_64.whl
      rankrun-VERSION.data/scripts/{rankrun,rankrun-store}   pip puts them on the venv's PATH
      rankrun/*.py                                           import rankrun.data, rankrun.progress;
                                                             python -m rankrun [--cmake-dir ...]
      rankrun/include, rankrun/lib/...                       the worker runtime, its CMake package
                                                             and pkg-config file
      (its tree written here, packed and recorded by `wheel pack`, Debian's python3-wheel)
  OUT_DIR/rankrun-VERSION-linux-x86_64.tar.gz
      rankrun-VERSION/bin, lib/systemd, share/...            what the install rules install
      rankrun-VERSION/lib/..., include/                      the worker runtime, as a prefix holds it

The platform tag is measured, never assumed: 2_X is the highest GLIBC_ symbol version that any
file of the wheel needs (objdump -T), and the programs must need no shared library beyond
glibc's. Either check failing stops the build with the file and the symbol named.
"""

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ("rankrun", "rankrun-store")
# glibc's own libraries: all a program may need (the dynamic loader, libc and its former parts).
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
# The worker runtime also needs the C++ library and unwinder its trainers already load.
RUNTIME_LIBRARIES = GLIBC_LIBRARIES | {"libstdc++.so.6", "libgcc_s.so.1"}
# The newest libstdc++ the runtime may need: GCC 8's, manylinux_2_28's policy (RHEL 8 has 3.4.25).
RUNTIME_GLIBCXX = (3, 4, 24)
# The Python that python3-wheel installs into (Debian's), whichever python3 runs this script.
WHEEL_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
# Fixed times in the archives: the same build gives the same bytes.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "1700000000"))


def fail(message):
    sys.exit(f"make-dist: {message}")


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    match = re.search(r"project\(rankrun VERSION ([0-9.]+)", text)
    if not match:
        fail("no project(rankrun VERSION x.y.z) in CMakeLists.txt")
    return match.group(1)


def needed(path):
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def symbol_versions(path):
    """The versions of the dynamic symbols `path` takes from others, by prefix: GLIBC_2.17 ..."""
    out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        if "*UND*" not in line:
            continue
        match = re.search(r"\(?(GLIBC|GLIBCXX|CXXABI)_([0-9][0-9.]*)\)?\s+(\S+)$", line)
        if match:
            kind, version, symbol = match.groups()
            key = tuple(int(x) for x in version.split("."))
            if key > found.get(kind, ((), ""))[0]:
                found[kind] = (key, symbol)
    return found


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def unversioned_undefined(path):
    """The undefined dynamic symbols of `path` that carry no version and are not weak: a floor
    measured from the versions cannot see them (glibc 2.32's __libc_single_threaded, say)."""
    out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines():
        match = re.match(r"^[0-9a-f]+ (.{7}) \*UND\*\s+[0-9a-f]+\s+Base\s+(\S+)$", line)
        if match and "w" not in match.group(1):
            names.append(match.group(2))
    return sorted(names)


def check_and_measure(stage):
    """The glibc floor (major, minor) of every ELF file under `stage`, after checking the libraries
    each needs. Returns (floor, lines describing each file)."""
    floor, report = (2, 0), []
    for path in sorted(p for p in stage.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)):
        allowed = GLIBC_LIBRARIES if path.name in PROGRAMS else RUNTIME_LIBRARIES
        extra = sorted(set(needed(path)) - allowed)
        if extra:
            fail(f"{path.relative_to(stage)} needs {', '.join(extra)}: only glibc's libraries"
                 f"{'' if path.name in PROGRAMS else ', libstdc++ and libgcc_s'} may be needed (link it in)")
        unversioned = unversioned_undefined(path)
        if unversioned:
            fail(f"{path.relative_to(stage)} needs {', '.join(unversioned)} without a symbol version: the "
                 "library headers it was built with took them from a newer glibc, and the floor does not show "
                 "them (see worker_runtime/libstdcxx_floor.cpp)")
        versions = symbol_versions(path)
        glibc = versions.get("GLIBC", ((2, 0), ""))
        if glibc[0] > (2, 28):
            fail(f"{path.relative_to(stage)} needs GLIBC_{'.'.join(map(str, glibc[0]))} ({glibc[1]}): "
                 "the floor is glibc 2.28 (build it with the release build's toolchain, cmake/toolchains/)")
        cxx = versions.get("GLIBCXX", ((3, 4), ""))
        if cxx[0] > RUNTIME_GLIBCXX:
            fail(f"{path.relative_to(stage)} needs GLIBCXX_{'.'.join(map(str, cxx[0]))} ({cxx[1]}): newer than "
                 f"GLIBCXX_{'.'.join(map(str, RUNTIME_GLIBCXX))}, the libstdc++ of GCC 8 that RHEL 8 trainers load "
                 "(see worker_runtime/libstdcxx_floor.cpp)")
        floor = max(floor, glibc[0][:2])
        words = ", ".join(f"{kind}_{'.'.join(map(str, v))} ({s})" for kind, (v, s) in sorted(versions.items()))
        report.append(f"  {path.relative_to(stage)}: needs {', '.join(needed(path))}; newest {words}")
    return floor, report


def install(build, prefix, component=None):
    cmd = ["cmake", "--install", str(build), "--prefix", str(prefix), "--strip"]
    if component:
        cmd += ["--component", component]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def runtime_files(runtime_stage):
    """The runtime's installed files, relative to its prefix; the library once, by its soname,
    and the CMake and pkg-config files pointed at that one file (a wheel holds no symlinks)."""
    libs = sorted(runtime_stage.rglob("librankrun_worker.so*"))
    real = [p for p in libs if not p.is_symlink()]
    if len(real) != 1:
        fail(f"expected one librankrun_worker in {runtime_stage}, found {[str(p) for p in libs]}")
    real = real[0]
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]",
                       subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True,
                                      check=True).stdout).group(1)
    files = {}
    for path in sorted(runtime_stage.rglob("*")):
        if path.is_dir() or path.name.startswith("librankrun_worker.so"):
            continue
        rel = path.relative_to(runtime_stage).as_posix()
        data = path.read_bytes()
        if path.name.endswith(".cmake") and real.name.encode() in data:
            data = data.replace(real.name.encode(), soname.encode())
        if path.name.endswith(".pc"):
            text = data.decode()
            if "-lrankrun_worker" not in text:
                fail(f"{rel}: no -lrankrun_worker to point at {soname}")
            data = text.replace("-lrankrun_worker", f"${{libdir}}/{soname}").encode()
        files[rel] = (data, 0o644)
    files[(real.parent / soname).relative_to(runtime_stage).as_posix()] = (real.read_bytes(), 0o755)
    return files


def write_wheel(out, version, tag, programs, runtime, stage):
    """The wheel's tree in `stage`, packed by `wheel pack` (Debian's python3-wheel), which writes
    its RECORD and names it by the WHEEL file's tag."""
    tree = stage / f"rankrun-{version}"
    dist_info = tree / f"rankrun-{version}.dist-info"

    def put(rel, data, mode=0o644):
        path = tree / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)

    package = ROOT / "packaging" / "python" / "rankrun"
    for source in sorted(package.glob("*.py")):
        put(f"rankrun/{source.name}", source.read_bytes().replace(b"@RANKRUN_VERSION@", version.encode()))
    for rel, (data, mode) in sorted(runtime.items()):
        put(f"rankrun/{rel}", data, mode)
    for program, data in programs.items():
        put(f"rankrun-{version}.data/scripts/{program}", data, 0o755)
    readme = (ROOT / "README.md").read_text()
    put(f"{dist_info.name}/METADATA", (
        "Metadata-Version: 2.1\n"
        "Name: rankrun\n"
        f"Version: {version}\n"
        "Summary: Launcher and supervisor for distributed training: torchrun's options, the root cause "
        "of a failure, hangs diagnosed, nothing left behind\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.8\n"
        "Description-Content-Type: text/markdown\n\n" + readme).encode())
    put(f"{dist_info.name}/WHEEL", (
        "Wheel-Version: 1.0\n"
        "Generator: rankrun tools/make-dist.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: py3-none-{tag}\n").encode())
    put(f"{dist_info.name}/top_level.txt", b"rankrun\n")
    # SOURCE_DATE_EPOCH: wheel pack's fixed time in the zip, the same build gives the same bytes.
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
    packed = subprocess.run([WHEEL_PYTHON, "-m", "wheel", "pack", str(tree), "--dest-dir", str(out)], env=env,
                            capture_output=True, text=True)
    if packed.returncode != 0:
        fail(f"wheel pack failed (python3-wheel: apt-get install python3-wheel): {packed.stderr.strip()}")
    name = out / f"rankrun-{version}-py3-none-{tag}.whl"
    if not name.is_file():
        fail(f"wheel pack did not write {name}: {packed.stdout.strip()}")
    return name


def write_tarball(out, version, launcher_stage, runtime):
    """What the release build installs (its install rules are the list), with the worker runtime
    beside bin/ as an install prefix has it: rankrun finds its librankrun_worker there for its
    Python workers (rankrun.data, rankrun.progress)."""
    top = f"rankrun-{version}"
    path = out / f"rankrun-{version}-linux-x86_64.tar.gz"

    def member(name, data, mode):
        info = tarfile.TarInfo(f"{top}/{name}")
        info.size, info.mode, info.mtime = len(data), mode, EPOCH
        info.uname = info.gname = "root"
        return info, io.BytesIO(data)

    files = {}
    for source in sorted(launcher_stage.rglob("*")):
        if source.is_file():
            files[source.relative_to(launcher_stage).as_posix()] = (source.read_bytes(),
                                                                      0o755 if os.access(source, os.X_OK) else 0o644)
    files["README.md"] = ((ROOT / "README.md").read_bytes(), 0o644)
    files.update(runtime)
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel, (data, mode) in sorted(files.items()):
            tf.addfile(*member(rel, data, mode))
    return path


def main():
    if len(sys.argv) != 3:
        fail("usage: tools/make-dist.py RELEASE_BUILD OUT_DIR")
    build, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    if not (build / "runtime" / "CMakeCache.txt").exists():
        fail(f"{build} is not the release build (no runtime/ tree): run make release")
    version = project_version()
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob(f"rankrun-{version}-*.whl"):
        old.unlink()  # another floor's wheel of this version: one wheel per build
    with tempfile.TemporaryDirectory(prefix="rankrun-dist-") as tmp:
        launcher_stage, runtime_stage = Path(tmp) / "launcher", Path(tmp) / "runtime"
        install(build, launcher_stage)
        install(build / "runtime", runtime_stage, component="worker")
        programs = {}
        for program in PROGRAMS:
            path = launcher_stage / "bin" / program
            if not path.exists():
                fail(f"{path} is missing: the release build did not install it")
            programs[program] = path.read_bytes()
        checked = Path(tmp) / "checked"
        (checked / "bin").mkdir(parents=True)
        for program in PROGRAMS:
            shutil.copy2(launcher_stage / "bin" / program, checked / "bin" / program)
        shutil.copytree(runtime_stage, checked / "runtime", symlinks=True)
        (major, minor), report = check_and_measure(checked)
        tag = f"manylinux_{major}_{minor}_x86_64"
        runtime = runtime_files(runtime_stage)
        wheel = write_wheel(out, version, tag, programs, runtime, Path(tmp))
        tarball = write_tarball(out, version, launcher_stage, runtime)
    print(f"make-dist: glibc floor {major}.{minor}, measured:")
    print("\n".join(report))
    print(f"make-dist: {wheel}")
    print(f"make-dist: {tarball}")


if __name__ == "__main__":
    main()
