#!/usr/bin/env bash
# Installs what kolo needs to build and test on Debian 12 (idempotent; apt-get only when
# something is missing). Why each package is there: docs/dependencies.md.
#
#   scripts/setup.sh           build and test (README, CI)
#   scripts/setup.sh --demo    only what the README's main job (scripts/demo.sh) builds
#                              and runs: no MPI, ssh server or formatter
#   scripts/setup.sh --bench   also what bench/ runs besides kolo: python3 with torch and
#                              numpy (the PyTorch DDP and torch.distributed peers, the
#                              scripts' tables); the bench scripts call this themselves
set -euo pipefail
# What configuring kolo and building kolorun and fashion_mnist needs (GoogleTest too:
# configuring with the tests on keeps one build/ for the demo and scripts/test.sh).
demo_packages=(build-essential cmake libgloo-dev libgtest-dev libgmock-dev libcli11-dev
               nlohmann-json3-dev zlib1g-dev libtorch-dev libopenblas0-openmp
               dataset-fashion-mnist libzmq3-dev cppzmq-dev pkg-config)
packages=("${demo_packages[@]}" libbenchmark-dev libopenmpi-dev openmpi-bin clang-format
          openssh-server)
bench_packages=(python3 python3-torch python3-numpy)
case ${1:-} in
  "") ;;
  --demo) packages=("${demo_packages[@]}") ;;
  --bench) packages+=("${bench_packages[@]}") ;;
  *) echo "setup.sh: unknown argument '$1' (usage: scripts/setup.sh [--demo | --bench])" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  # (dpkg -s also succeeds for a removed package whose configuration files remain)
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]} (apt-get; see docs/dependencies.md)"
  # Wait (bounded) for another apt or dpkg on the machine rather than fail at once.
  apt=(apt-get -o DPkg::Lock::Timeout=300)
  $sudo "${apt[@]}" update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${missing[@]}" >/dev/null
fi
