#!/usr/bin/env bash
# Coverage-guided fuzzing of what the coordinator runs on peers' bytes
# (tests/fuzz/coordinator_fuzz.cc) with clang's libFuzzer under ASan+UBSan, for a bounded
# time; new inputs that reach new code are added to tests/fuzz/corpus/coordinator (commit
# them: ctest replays that corpus under any compiler). Not run by CI (it is a search,
# not a check); run it after changing message.cc or negotiation.cc.
#   scripts/fuzz.sh [SECONDS]      (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/setup.sh
for p in clang libclang-rt-14-dev; do
  if ! dpkg -s "$p" >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
    break
  fi
done
build=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKOLO_LIBFUZZER=ON -DKOLO_SANITIZE=address -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCH=OFF \
  >/dev/null
cmake --build "$build" -j"$(nproc)" --target kolo_coordinator_fuzz kolo_coordinator_fuzz_seeds
corpus=tests/fuzz/corpus/coordinator
mkdir -p "$corpus"
"$build"/bin/kolo_coordinator_fuzz_seeds "$corpus"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# New inputs go to a scratch folder first; -merge keeps only those that add coverage.
"$build"/bin/kolo_coordinator_fuzz -max_total_time="$seconds" -max_len=4096 \
  -artifact_prefix="$work/" "$work" "$corpus"
"$build"/bin/kolo_coordinator_fuzz -merge=1 "$corpus" "$work" >/dev/null 2>&1
echo "fuzz: ran ${seconds} s clean; corpus has $(ls "$corpus" | wc -l) inputs"
