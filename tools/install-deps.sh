#!/usr/bin/env bash
# Installs, with apt, whatever the build (and, with --test, the tests) need and is missing.
# Idempotent: packages already installed are not touched, and apt is not called at all then.
set -euo pipefail
want=(cmake make g++ pkg-config libboost-dev libcli11-dev libspdlog-dev doctest-dev)
if [[ "${1:-}" == "--test" ]]; then
  # python3-torch: real PyTorch for interoperability tests; clang + libclang-rt: the libFuzzer target;
  # iproute2: network namespaces; procps: ps/pgrep in tests.
  want+=(python3 python3-torch python3-pytest python3-pytest-xdist clang libclang-rt-14-dev iproute2 procps)
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
