#!/usr/bin/env bash
# Installs what kolo needs to build and test on Debian 12 (idempotent; apt-get only when
# something is missing). Why each package is there: docs/dependencies.md.
set -euo pipefail
packages=(build-essential cmake libgtest-dev libgmock-dev libbenchmark-dev
          libopenmpi-dev openmpi-bin libcli11-dev nlohmann-json3-dev zlib1g-dev
          libtorch-dev libopenblas0-openmp dataset-fashion-mnist clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
