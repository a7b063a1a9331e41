#!/usr/bin/python3
"""Per-thread CPU time of running training processes (a diagnostic for docs/history/benchmarks.md).

    bench/thread_cpu.py [--interval S] EXE_PATH -- COMMAND...

Starts COMMAND, and every --interval seconds reads /proc/PID/task/TID/schedstat of every
process whose executable is EXE_PATH (e.g. the realpath of build/bin/fashion_mnist), until
COMMAND exits. Prints, per process, each thread's CPU seconds (user+system) at its last
sample, the share of one core it used over the sampled lifetime, how long it was runnable
but waiting for a CPU and how many times it was scheduled (/proc/.../schedstat). The
thread whose TID equals the PID is the main (training) thread.
"""
import os
import subprocess
import sys
import time


def threads_of(pid):
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            # schedstat: ns on a CPU, ns runnable but waiting for a CPU, timeslices run
            # (exact, unlike utime/stime in .../stat, which are sampled at clock ticks)
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run_ns, wait_ns, slices = (int(x) for x in f.read().split()[:3])
            out[int(tid)] = (run_ns / 1e9, wait_ns / 1e9, slices)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def main():
    args = sys.argv[1:]
    interval = 0.5
    if args[:1] == ["--interval"]:
        interval, args = float(args[1]), args[2:]
    exe, sep, cmd = args[0], args[1], args[2:]
    assert sep == "--" and cmd, __doc__
    exe = os.path.realpath(exe)
    proc = subprocess.Popen(cmd)
    seen = {}  # pid -> (first seen time, {tid: cpu})
    while proc.poll() is None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{pid}/exe") != exe:
                    continue
            except OSError:
                continue
            pid = int(pid)
            t = threads_of(pid)
            if t:
                first = seen.get(pid, (time.monotonic(), {}))[0]
                seen[pid] = (first, t, time.monotonic())
        time.sleep(interval)
    for pid, (first, t, last) in sorted(seen.items()):
        life = last - first
        print(f"pid {pid}: {life:.1f} s sampled, {len(t)} threads")
        for tid, (cpu, wait, slices) in sorted(t.items(), key=lambda kv: -kv[1][0]):
            if cpu < 0.05:
                continue
            tag = "main" if tid == pid else ""
            print(f"  tid {tid:>7} {tag:4} {cpu:7.2f} s cpu  {100 * cpu / life:5.1f}% of a core, "
                  f"{wait:6.2f} s runnable but waiting for a cpu, {slices} times scheduled")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
