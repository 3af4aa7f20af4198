#!/usr/bin/env bash
# Installs, with apt, whatever the build (and, with --test, the tests) need and is missing.
# Idempotent: packages already installed are not touched, and apt is not called at all then.
set -euo pipefail
want=(cmake make g++ ccache pkg-config libboost-dev libcli11-dev libspdlog-dev nlohmann-json3-dev doctest-dev libssl-dev libmunge-dev)
if [[ "${1:-}" == "--test" ]]; then
  # python3-torch: real PyTorch for interoperability tests; clang + libclang-rt: the libFuzzer target;
  # iproute2: network namespaces; procps: ps/pgrep in tests; slurmctld, slurmd, slurm-client, munge:
  # the real-Slurm tests (tests/integration/slurm_rig.py runs its own daemons, never the system's);
  # systemd: the service test (a private manager) and systemd-analyze; lintian: the package test;
  # dpkg-dev, file: make package, which make test runs first; etcd-server: the etcd client's tests
  # (tests/integration/test_etcd_client.cpp runs its own etcd on free ports, never the system's); etcd-client:
  # etcdctl, which the elastic etcd tests use to read and cut etcd; openssl: the CA and certificates of the
  # etcd tests over https. prometheus: the metrics test's own server (started by the test, never the
  # system's) and promtool. clang-format: the layout check. mmdebstrap: the roots with
  # newer PyTorch (trixie's 2.6, sid's 2.14) that the torch tests also run on (tools/torch-root.sh),
  # and the bullseye root the portable binary runs in. python3-venv: the wheel's install test.
  want+=(python3 python3-torch python3-pytest python3-pytest-xdist clang libclang-rt-14-dev iproute2 procps
         slurmctld slurmd slurm-client munge systemd lintian dpkg-dev file etcd-server etcd-client openssl prometheus clang-format mmdebstrap python3-venv)
fi
if [[ "${1:-}" == "--package" ]]; then
  # make package: dpkg-shlibdeps (dpkg-dev) computes the .deb's Depends; CPack runs file on what it packs.
  # npm: zig, the release build's compiler (tools/install-zig.sh); binutils: objdump and strip;
  # python3-wheel: `wheel pack`, which writes the wheel (tools/make-dist.py).
  # (Debian's npm only where no npm is on PATH: a nodejs of another origin brings its own.)
  want+=(dpkg-dev file binutils python3-wheel)
  command -v npm >/dev/null || want+=(npm)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to install ${missing[*]} (run as root, or install them yourself)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # Installing a package must not start its service (munged, slurmctld, slurmd): where no
  # policy-rc.d says so already (Debian's container images have one, a plain machine does not),
  # one forbids it for the duration of the install and is removed afterwards.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# temporary, from rankrun tools/install-deps.sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'grep -q "rankrun tools/install-deps.sh" "$policy" 2>/dev/null && rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
