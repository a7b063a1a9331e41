#!/usr/bin/env bash
# Coverage-guided fuzzing with clang's libFuzzer under ASan+UBSan, for a bounded time, of
# one of the fuzz targets in tests/fuzz:
#   coordinator   what the coordinator runs on peers' bytes (coordinator_fuzz.cc); run it
#                 after changing core/message.cc or core/negotiation.cc
#   store_wire    the TCP store's frame parser (store_wire_fuzz.cc); after changing
#                 rendezvous/tcp_store_wire.cc
#   store_server  a real TCP store server fed the same inputs over a socket
#                 (store_server_fuzz.cc); after changing rendezvous/tcp_store_server.cc
# New inputs that reach new code are added to the target's corpus under tests/fuzz/corpus
# (commit them: ctest replays each corpus under any compiler). A crash leaves its input in
# the current directory (crash-*) and fails the script. Not run by CI (it is a search,
# not a check).
#   scripts/fuzz.sh [TARGET] [SECONDS]      (default: coordinator, 60 s)
set -euo pipefail
cd "$(dirname "$0")/.."
target=coordinator
if [ $# -gt 0 ] && ! [[ $1 =~ ^[0-9]+$ ]]; then
  target=$1
  shift
fi
seconds=${1:-60}
case $target in
  coordinator) corpus=tests/fuzz/corpus/coordinator seeds=kolo_coordinator_fuzz_seeds ;;
  store_wire | store_server) corpus=tests/fuzz/corpus/store_wire seeds=kolo_store_fuzz_seeds ;;
  *)
    echo "fuzz.sh: unknown target '$target' (coordinator, store_wire, store_server)" >&2
    exit 2
    ;;
esac
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
cmake --build "$build" -j"$(nproc)" --target "kolo_${target}_fuzz" "$seeds"
mkdir -p "$corpus"
"$build/bin/$seeds" "$corpus"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# New inputs go to a scratch folder first; -merge keeps only those that reach code no
# input in the corpus reaches (edges, not hit counts: -use_counters=0), so a corpus stays
# at tens of inputs.
"$build/bin/kolo_${target}_fuzz" -max_total_time="$seconds" -max_len=4096 \
  -artifact_prefix="./" "$work" "$corpus"
"$build/bin/kolo_${target}_fuzz" -merge=1 -use_counters=0 "$corpus" "$work" >/dev/null 2>&1
echo "fuzz: ${target} ran ${seconds} s clean; corpus has $(ls "$corpus" | wc -l) inputs"
