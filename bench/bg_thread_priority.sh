#!/usr/bin/env bash
# Experiment for docs/history/benchmarks.md: does kolo's background thread lose time waiting for a
# CPU behind the training threads? Runs COMMAND and, once its workers (processes whose
# executable is EXE) have trained for a moment, gives each worker's kolo background thread
# a higher scheduling priority, then waits for COMMAND.
#
#   bench/bg_thread_priority.sh MODE EXE -- COMMAND...
#   MODE: none (measure only), nice:N (renice the thread to N, e.g. nice:-10),
#         fifo:P (SCHED_FIFO priority P, e.g. fifo:1; needs root)
#
# The background thread is found as the worker's non-main thread with the most context
# switches after ~DELAY seconds (default 4; it cycles every KOLO_CYCLE_TIME_MS, the
# OpenMPI and torch threads hardly run). Diagnostic only: kolo itself does not do this.
set -euo pipefail
mode=$1 exe=$(realpath "$2"); shift 2
[ "$1" = "--" ] && shift
delay=${DELAY:-4}
"$@" &
cmd=$!
sleep "$delay"
for proc in /proc/[0-9]*; do
  pid=${proc##*/}
  [ "$(readlink "$proc/exe" 2>/dev/null)" = "$exe" ] || continue
  best="" most=-1
  for task in /proc/$pid/task/*; do
    tid=${task##*/}
    [ "$tid" = "$pid" ] && continue
    n=$(awk '/ctxt_switches/ {s += $2} END {print s + 0}' "$task/status" 2>/dev/null || echo 0)
    if [ "$n" -gt "$most" ]; then most=$n best=$tid; fi
  done
  [ -n "$best" ] || continue
  case $mode in
    none) ;;
    nice:*) renice -n "${mode#nice:}" -p "$best" >/dev/null ;;
    fifo:*) chrt -f -p "${mode#fifo:}" "$best" ;;
    *) echo "unknown mode $mode" >&2; exit 2 ;;
  esac
  echo "worker $pid: background thread $best ($most context switches so far): $mode" >&2
done
wait "$cmd"
