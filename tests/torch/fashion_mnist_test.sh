#!/usr/bin/env bash
# The founding example across real workers (issue acceptance):
#   1. kolorun -np 2 fashion_mnist --epochs 1 reaches test accuracy >= 0.85;
#   2. a checkpoint written by 2 workers resumes on 3 workers and continues (epoch 2),
#      not restarts.
# Usage: fashion_mnist_test.sh KOLORUN FASHION_MNIST
set -euo pipefail
kolorun=$1 example=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KOLO_PEER_TIMEOUT_SECONDS=60 KOLO_STALL_SHUTDOWN_SECONDS=120

"$kolorun" -np 2 "$example" --epochs 1 --no-progress --summary-json "$work/one.json" | tee "$work/one.log"
field() { tr -d ' \n' <"$2" | sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p"; }
accuracy=$(field test_accuracy "$work/one.json")
world=$(field world_size "$work/one.json")
echo "test accuracy after 1 epoch on $world workers: $accuracy"
[ "$world" = 2 ] || { echo "FAIL: world_size $world, expected 2"; exit 1; }
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.85) }' || { echo "FAIL: accuracy $accuracy < 0.85"; exit 1; }

ck="$work/ck.pt"
"$kolorun" -np 2 "$example" --epochs 1 --max-steps 50 --no-progress --checkpoint "$ck" >"$work/a.log"
[ -f "$ck" ] || { echo "FAIL: no checkpoint at $ck"; exit 1; }
"$kolorun" -np 3 "$example" --epochs 2 --max-steps 50 --no-progress --checkpoint "$ck" --resume \
  --summary-json "$work/two.json" | tee "$work/b.log"
grep -q "resumed from $ck at epoch 1" "$work/b.log" || { echo "FAIL: did not resume at epoch 1"; exit 1; }
grep -q "epoch 1/" "$work/b.log" && { echo "FAIL: epoch 1 ran again after resume"; exit 1; }
grep -q "epoch 2/2" "$work/b.log" || { echo "FAIL: epoch 2 did not run"; exit 1; }
[ "$(field world_size "$work/two.json")" = 3 ] || { echo "FAIL: resumed run not on 3 workers"; exit 1; }
echo "PASS"
