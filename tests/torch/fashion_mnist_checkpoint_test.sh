#!/usr/bin/env bash
# fashion_mnist's checkpoints on 2 workers and tiny data (issue 11, defect 11):
#   1. an intact checkpoint resumes;
#   2. one with 10 bytes flipped inside tensor data is refused, and so is a truncated
#      one: every rank fails naming the file and the cause (not "rank 0 went away");
#   3. an unwritable --checkpoint path fails every rank before the first epoch trains.
# Usage: fashion_mnist_checkpoint_test.sh KOLORUN FASHION_MNIST
set -euo pipefail
kolorun=$1 example=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/tiny_idx.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KOLO_PEER_TIMEOUT_SECONDS=30 KOLO_STALL_SHUTDOWN_SECONDS=60
data=$work/data
tiny_dataset "$data" 64 16
fail() { echo "FAIL: $*"; exit 1; }
run() { "$kolorun" -np 2 "$example" --data "$data" --no-progress "$@"; }

# Runs the example with ARGS; expects it to fail before training, with TEXT on both ranks.
expect_failure() {
  local text=$1 log=$work/fail.log r
  shift
  if run "$@" >"$log" 2>&1; then cat "$log"; fail "'$*' succeeded"; fi
  for r in 0 1; do
    grep "^\[$r\] " "$log" | grep -qF -- "$text" || { cat "$log"; fail "rank $r does not say '$text'"; }
  done
  if grep -q "epoch 1/" "$log"; then cat "$log"; fail "trained before failing"; fi
  echo "failed as expected: $(grep -m1 "^\[1\] .*error" "$log")"
}

ck=$work/ck.pt
run --epochs 1 --checkpoint "$ck" >"$work/a.log" 2>&1 || { cat "$work/a.log"; fail "first run"; }
[ -f "$ck" ] && [ ! -e "$ck.tmp" ] || fail "no checkpoint at $ck, or its temp file left behind"
cp "$ck" "$work/good.pt"
run --epochs 2 --checkpoint "$ck" --resume >"$work/b.log" 2>&1 || { cat "$work/b.log"; fail "resume"; }
grep -q "resumed from $ck at epoch 1" "$work/b.log" || { cat "$work/b.log"; fail "did not resume"; }

# 10 bytes flipped in the middle of the file: inside the weights' or Adam's tensor data.
cp "$work/good.pt" "$ck"
at=$(($(stat -c %s "$ck") / 2))
for b in $(od -An -tu1 -j "$at" -N 10 "$ck"); do byte $((255 - b)); done |
  dd of="$ck" bs=1 seek="$at" conv=notrunc status=none
cmp -s "$ck" "$work/good.pt" && fail "the bytes were not flipped"
expect_failure "checkpoint $ck: damaged: the data's CRC-32" --epochs 2 --checkpoint "$ck" --resume

# Cut short (a copy that stopped half way): libtorch used to say only "failed finding
# central directory", on rank 0, without the file's name.
head -c $(($(stat -c %s "$work/good.pt") / 2)) "$work/good.pt" >"$ck"
expect_failure "checkpoint $ck: damaged:" --epochs 2 --checkpoint "$ck" --resume

# A directory that does not exist: used to fail only after the first epoch had trained.
expect_failure "checkpoint $work/missing/ck.pt: cannot be written" --epochs 1 \
  --checkpoint "$work/missing/ck.pt"
echo "PASS"
