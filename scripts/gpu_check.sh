#!/usr/bin/env bash
# Issue 3's CUDA check, in one call on a machine with a GPU and a current PyTorch (the
# device machine of /work/.library/device): builds the libtorch adapter against that
# PyTorch's libtorch and runs the adapter's checks on CUDA tensors, then the example.
#
#   scripts/gpu_check.sh --prepare     # here, first: header-only dependencies the GPU
#                                      # image may lack -> build-gpu-deps/ (git-ignored)
#   scripts/gpu_check.sh OUT_DIR       # there: device run, carry ["build-gpu-deps"],
#                                      # command "scripts/gpu_check.sh $OUT"
#
# Every step has a time bound and writes OUT_DIR/<step>.log; OUT_DIR/summary.txt has one
# line per step (ok / FAILED / skipped) and the script exits non-zero if any failed.
# Steps: configure (tests off: no GoogleTest needed), build, torch_worker on 1 rank and on
# 2 ranks sharing the one GPU (kolo stages CUDA tensors through host memory, so no NCCL),
# fashion_mnist --epochs 1 on 1 and 2 ranks; then the device layer (src/device, built with
# KOLO_CUDA=ON and GoogleTest, carried as sources if the image has none): its tests on
# cuda:0 (kernels, streams, events, NCCL at one rank) and on the host stand-in; in the
# same tree, built with KOLO_DEVICE_PATH=ON, torch_worker on 1 rank with CUDA tensors
# going through the device path (NCCL, kolo's stream, events) instead of host staging;
# then the CUDA-IPC path (2-4 ranks sharing the one GPU, which NCCL refuses): kolo_ipc_check
# (every collective against references, a rank SIGKILLed mid-collective), torch_worker on
# 2 ranks through the device path, and the path's allreduce bandwidth beside
# torch.distributed's (Gloo with CUDA tensors) on the same GPU; last, the strategies' fit
# on the GPU (kolo_train_worker's equivalence checks, keras_mnist).
set -uo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/build-gpu-deps

if [ "${1:-}" = "--prepare" ]; then
  rm -rf "$deps" && mkdir -p "$deps/include"
  for h in /usr/include/zlib.h /usr/include/zconf.h /usr/include/nlohmann /usr/include/CLI; do
    [ -e "$h" ] || { echo "missing $h: run scripts/setup.sh first" >&2; exit 1; }
    cp -r "$h" "$deps/include/"
  done
  # GoogleTest's sources, for the device layer's tests (the GPU image may lack GTest).
  cp -r /usr/src/googletest "$deps/googletest"
  # The GPU image has no Debian dataset package: Fashion-MNIST travels too (~31 MB).
  mkdir -p "$deps/fashion-mnist"
  cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$deps/fashion-mnist/"
  du -sh "$deps"
  exit 0
fi

out=${1:?usage: scripts/gpu_check.sh OUT_DIR | --prepare}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
failed=0
# step NAME SECONDS COMMAND...: runs it with a bound, logs it, records the outcome.
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    echo "$name ok ($((SECONDS - t0)) s)" | tee -a "$summary"
  else
    failed=1
    echo "$name FAILED rc=$rc ($((SECONDS - t0)) s); last lines:" | tee -a "$summary"
    tail -15 "$out/$name.log" | tee -a "$summary"
  fi
  return $rc
}

{
  echo "host: $(hostname), $(nproc) cores"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  echo "cmake: $(cmake --version 2>&1 | head -1); g++: $(g++ --version 2>&1 | head -1); mpirun: $(mpirun --version 2>&1 | head -1)"
} | tee -a "$summary"

prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
args=(-DCMAKE_BUILD_TYPE=Release -DKOLO_BUILD_TESTS=OFF "-DCMAKE_PREFIX_PATH=$prefix")
[ -d "$deps/include" ] && args+=("-DCMAKE_INCLUDE_PATH=$deps/include")
# zlib: the headers may only be in build-gpu-deps; the library is in every image.
if [ ! -e /usr/include/zlib.h ] && [ -e "$deps/include/zlib.h" ]; then
  libz=$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')
  args+=("-DZLIB_INCLUDE_DIR=$deps/include" "-DZLIB_LIBRARY=$libz")
fi
# Extra configure arguments, e.g. to try the script on a machine without a GPU:
# KOLO_GPU_CHECK_CMAKE_ARGS="-DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON"
read -r -a extra <<<"${KOLO_GPU_CHECK_CMAKE_ARGS:-}"
args+=("${extra[@]}")
build=build-gpu
step configure 300 cmake -S . -B "$build" "${args[@]}" || { cat "$summary"; exit 1; }
step build 420 cmake --build "$build" -j"$(nproc)" --target kolo_torch_worker fashion_mnist kolorun ||
  { cat "$summary"; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export KOLO_PEER_TIMEOUT_SECONDS=60 KOLO_STALL_CHECK_SECONDS=10 KOLO_STALL_SHUTDOWN_SECONDS=30
bin=$build/bin
# torch_worker prints "<check> OK" / "<check> FAILED: why"; its exit status counts failures.
step worker_np1 180 "$bin/kolo_torch_worker"
step worker_np2 240 "$bin/kolorun" -np 2 "$bin/kolo_torch_worker"
grep -h "cuda" "$out"/worker_np*.log | sort | uniq -c | tee -a "$summary"
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] || data=$deps/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  step mnist_np1 300 "$bin/fashion_mnist" --epochs 1 --data "$data" --no-progress \
    --summary-json "$out/np1.json"
  step mnist_np2 300 "$bin/kolorun" -np 2 "$bin/fashion_mnist" --epochs 1 --data "$data" \
    --no-progress --summary-json "$out/np2.json"
  cat "$out"/np*.json 2>/dev/null | tee -a "$summary"
else
  echo "mnist skipped: no Fashion-MNIST here (scripts/gpu_check.sh --prepare copies it)" | tee -a "$summary"
fi

# The device layer (src/device) on the GPU: its tests run on the host stand-in and on
# cuda:0 (NCCL at one rank); a CUDA case that skips here is a failure.
dev_args=(-DCMAKE_BUILD_TYPE=Release -DKOLO_CUDA=ON -DKOLO_DEVICE_PATH=ON -DKOLO_BUILD_TRAIN=ON
          -DKOLO_BUILD_EXAMPLES=ON -DKOLO_BUILD_BENCH=ON -DKOLO_BUILD_TRANSPORT_CHECKS=ON
          "-DCMAKE_PREFIX_PATH=$prefix" "${extra[@]}")
[ -d "$deps/include" ] && dev_args+=("-DCMAKE_INCLUDE_PATH=$deps/include")
if [ ! -e /usr/include/gtest/gtest.h ] && [ ! -e /usr/local/include/gtest/gtest.h ] &&
  [ -d "$deps/googletest" ]; then
  step gtest 300 sh -c "cmake -S '$deps/googletest' -B build-gpu-gtest -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX='$PWD/build-gpu-gtest/install' >/dev/null &&
    cmake --build build-gpu-gtest -j$(nproc) --target install"
  dev_args+=("-DGTest_ROOT=$PWD/build-gpu-gtest/install")
fi
if step device_configure 300 cmake -S . -B build-gpu-device "${dev_args[@]}" &&
  step device_build 420 cmake --build build-gpu-device -j"$(nproc)" \
    --target kolo_device_tests kolo_torch_worker; then
  step device_tests 300 build-gpu-device/bin/kolo_device_tests
  if grep -q "SKIPPED.*cuda" "$out/device_tests.log"; then
    failed=1
    echo "device_tests FAILED: CUDA cases skipped on a GPU machine:" | tee -a "$summary"
    grep "SKIPPED" "$out/device_tests.log" | head -5 | tee -a "$summary"
  fi
  step path_worker_np1 180 build-gpu-device/bin/kolo_torch_worker
  grep -h "cuda" "$out/path_worker_np1.log" | sort | uniq -c | tee -a "$summary"

  # The CUDA-IPC path: ranks that share the GPU. Launched by kolorun where the tree has
  # Gloo, else by mpirun (the check's control plane is the job's base transport).
  dev=build-gpu-device/bin
  if grep -q "^Gloo_DIR:PATH=/" build-gpu-device/CMakeCache.txt; then
    launch="$dev/kolorun --grace-seconds 30 -np"
  else
    launch="mpirun --allow-run-as-root --oversubscribe --enable-recovery -np"
  fi
  if step ipc_build 300 cmake --build build-gpu-device -j"$(nproc)" \
    --target kolo_ipc_check kolorun; then
    for np in 2 3 4; do
      step ipc_np$np 120 $launch $np $dev/kolo_ipc_check --device cuda --half 65536
    done
    # Rank 1 SIGKILLs itself mid-allreduce: both survivors must print PASS (named, fast).
    step ipc_kill_np3 120 bash -c "$launch 3 $dev/kolo_ipc_check --device cuda --kill-test \
      --kill-rank 1 >$out/ipc_kill.out 2>&1; cat $out/ipc_kill.out;
      test \$(grep -c 'PASS \[rank [0-9]*\] ipc kill-test' $out/ipc_kill.out) -eq 2"
    step path_worker_np2 240 $launch 2 $dev/kolo_torch_worker
    grep -h "cuda" "$out/path_worker_np2.log" | sort | uniq -c | tee -a "$summary"
    step ipc_bench 240 $launch 2 $dev/kolo_ipc_check --device cuda --half 16777216 --bench
    step torch_gloo_cuda_bench 240 python3 bench/peers/torch_allreduce.py -np 2 --device cuda \
      --min-bytes 4096 --max-bytes 64M --step 4 --iters 10
    grep -h "bench:" "$out/ipc_bench.log" | tee -a "$summary"
    tail -9 "$out/torch_gloo_cuda_bench.log" | tee -a "$summary"
  fi

  # kolo's device collectives against raw NCCL calls (one rank), and kolo's per-step
  # overhead on the founding CNN against plain libtorch on the GPU (the goal: at most 2%):
  # one worker through the device path, two epochs, interleaved twice.
  if [ -f "$data/train-images-idx3-ubyte.gz" ] &&
    step overhead_build 300 cmake --build build-gpu-device -j"$(nproc)" \
      --target fashion_mnist plain_fashion_mnist kolo_bench_nccl; then
    step nccl_bench 180 $dev/kolo_bench_nccl
    tail -8 "$out/nccl_bench.log" | tee -a "$summary"
    for round in 1 2; do
      step plain_gpu_$round 180 $dev/plain_fashion_mnist --device cuda:0 --epochs 2 \
        --data "$data" --summary-json "$out/plain_$round.json"
      step kolo_gpu_$round 180 $dev/fashion_mnist --device cuda:0 --epochs 2 --data "$data" \
        --no-progress --summary-json "$out/kolo_$round.json"
    done
    for f in "$out"/plain_?.json "$out"/kolo_?.json; do
      echo "$(basename "$f"): $(cat "$f" 2>/dev/null)"
    done | tee -a "$summary"
  fi

  # The strategies on the GPU (last: the train library is the longest build): fit with
  # MultiWorkerMirrored on gpu:0 against one replica on gpu:0, in one process and in two
  # sharing the GPU (gradients through the device path's IPC collectives), Horovod's way
  # on kolo::device(), and keras_mnist's epoch on the GPU (accuracy as on the CPU).
  if step train_build 420 cmake --build build-gpu-device -j"$(nproc)" \
    --target kolo_train_worker keras_mnist kolorun; then
    step train_mwms_np1 240 $dev/kolo_train_worker equivalence gpu:0
    step train_mwms_np2 300 $launch 2 $dev/kolo_train_worker equivalence gpu:0
    step train_horovod_np2 300 $launch 2 $dev/kolo_train_worker horovod
    grep -h "equivalence\|custom loop" "$out"/train_*.log | tee -a "$summary"
    if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
      step keras_mnist_gpu_np2 300 $launch 2 $dev/keras_mnist --strategy multiworker \
        --devices gpu:0 --epochs 1 --data "$data" --verbose 2 \
        --summary-json "$out/keras_gpu.json"
      cat "$out/keras_gpu.json" 2>/dev/null | tee -a "$summary"
    fi
  fi
fi
exit $failed
