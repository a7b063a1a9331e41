#!/usr/bin/env bash
# fashion_mnist refuses data it would have trained on silently (issue 11, defect 10):
# fewer labels than images, a label that is no class of the model, an empty test set,
# images of another size.
# Each case must fail (exit != 0) with a message naming the file and the numbers, before
# any training; a consistent tiny data set must still train. One worker, tiny files.
# Usage: fashion_mnist_data_test.sh FASHION_MNIST
set -euo pipefail
example=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/tiny_idx.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Runs the example on DIR; expects failure and every PATTERN (grep -E) in its output.
expect_refused() {
  local dir=$1 log=$work/out.log pattern
  shift
  if "$example" --data "$dir" --epochs 1 --no-progress >"$log" 2>&1; then
    cat "$log"; fail "trained on $dir instead of refusing it"
  fi
  for pattern; do grep -qE -- "$pattern" "$log" || { cat "$log"; fail "no '$pattern' in the output"; }; done
  if grep -q "^epoch " "$log"; then cat "$log"; fail "trained before refusing $dir"; fi
  echo "refused as expected: $(grep -m1 error "$log")"
}

ok=$work/ok
tiny_dataset "$ok" 64 16
"$example" --data "$ok" --epochs 1 --no-progress >"$work/ok.log" 2>&1 || { cat "$work/ok.log"; fail "the tiny data set does not train"; }
grep -q "^epoch 1/1 .*test_accuracy" "$work/ok.log" || { cat "$work/ok.log"; fail "no epoch line"; }

# 64 training images, 10 labels.
few=$work/few
tiny_dataset "$few" 64 16
tiny_split "$few" train 64 $(tiny_labels 10)
expect_refused "$few" "$few/train-images-idx3-ubyte.gz \(64 images\)" \
  "$few/train-labels-idx1-ubyte.gz \(10 labels\) do not match"

# A test label of 200 (10 classes).
bad=$work/bad
tiny_dataset "$bad" 64 4
tiny_split "$bad" t10k 4 1 2 200 3
expect_refused "$bad" "$bad/t10k-labels-idx1-ubyte.gz: label 200 at index 2 is not a class of 10"

# An empty test set (used to print test_accuracy -nan and exit 0).
empty=$work/empty
tiny_dataset "$empty" 64 16
tiny_split "$empty" t10k 0
expect_refused "$empty" "$empty/t10k-images-idx3-ubyte.gz: 0 images: the test set is empty"
# Images of another size than the model takes (32 x 32).
big=$work/big
TINY_SIDE=32 tiny_dataset "$big" 64 16
expect_refused "$big" "$big/train-images-idx3-ubyte.gz: images of 32 x 32 pixels; the model takes 28 x 28"

# --device: cpu trains; a name that is no device is refused naming it; cuda trains where this
# process sees a GPU, else is refused saying so (kolo::device(choice)).
"$example" --data "$ok" --epochs 1 --no-progress --device cpu >"$work/cpu.log" 2>&1 ||
  { cat "$work/cpu.log"; fail "--device cpu does not train"; }
grep -q "^epoch 1/1 .*test_accuracy" "$work/cpu.log" || { cat "$work/cpu.log"; fail "--device cpu: no epoch line"; }
grep -q "^training on cuda" "$work/cpu.log" && fail "--device cpu trained on a GPU"
if "$example" --data "$ok" --epochs 1 --no-progress --device gpu >"$work/gpu.log" 2>&1; then
  fail "--device gpu was taken"
fi
grep -q "kolo error (invalid argument): device 'gpu' on rank 0: expected auto, cpu, cuda" "$work/gpu.log" ||
  { cat "$work/gpu.log"; fail "--device gpu: not refused naming it"; }
if "$example" --data "$ok" --epochs 1 --no-progress --device cuda >"$work/cuda.log" 2>&1; then
  grep -q "^training on cuda:0" "$work/cuda.log" || { cat "$work/cuda.log"; fail "--device cuda: not on cuda:0"; }
else
  grep -q "device 'cuda' on rank 0: this process sees no CUDA device" "$work/cuda.log" ||
    { cat "$work/cuda.log"; fail "--device cuda failed without saying that no GPU is visible"; }
fi
echo "PASS"
