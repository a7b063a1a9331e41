#!/usr/bin/python3
"""Recovery time of an elastic job after kill -9 of one worker: kolorun's elastic driver
against torchrun (torch.distributed.run --max_restarts), the harness of
bench/elastic_recovery.sh (issue 16's benchmark; results in docs/benchmarks.md).

    bench/elastic_recovery.py [--runs 5] [--sizes "2 3 4"] [--systems "torchrun kolo"]
        [--build-dir build] [--kolo-program core|fashion_mnist|"CMD ..."] [--json FILE]

Recovery time = from the kill -9 of one worker process (the one with the highest rank,
never rank 0 nor an agent or launcher) to the first completed training step after the job
re-formed, read from the lines the workers print per step (wall clock in ms, one clock:
every process is on this host):

  kolo      `kolorun --min-np 1 --max-np N -np N PROGRAM`; PROGRAM prints
            "gen G rank R size S step K ... pid P t_ms T" per step (tests/elastic/
            elastic_core_worker.cc does; so must `fashion_mnist --elastic`). The
            recovery point is the first line of a generation newer than the killed one:
            the survivors, N-1 of them (the failed worker's host is blacklisted, so no
            replacement starts on this one host), in the same processes.
  torchrun  `python3 -m torch.distributed.run --nnodes=1 --nproc_per_node=N
            --max_restarts=3 --rdzv_backend=c10d ...` over bench/peers/elastic_ddp.py
            (DDP over Gloo, the example's CNN), which prints "restart C rank R ... t_ms T";
            the recovery point is the first line with a higher restart count. torchrun
            stops and restarts every worker, so the job is N workers again, all new
            processes; its agent notices the failure by polling every
            --torch-monitor-interval seconds (torchrun's default, 5, unless given).

Each run starts a fresh job, waits until every rank completed --kill-after steps and then
a random 0 to --kill-jitter seconds (so that the kill falls anywhere in torchrun's monitor
period, as a real failure would), kills, waits for the recovery point and for every rank
of the new job to print a step, then ends the job (SIGTERM to its process group, SIGKILL
after 5 s). Every wait is bounded by --timeout seconds. A run that fails says why (and the
output's last lines) and counts in the table; when it failed before the kill (the job did
not start right) the rest of that system's runs at that size are skipped. Systems
alternate run by run. Prints a Markdown table (median, min, max seconds), the CPU, the
date and the load; --json writes every run's figures.

--self-test runs the kolo side against a stand-in for kolorun's elastic driver (this file
with --fake-kolorun: N forked workers that print the kolo lines and re-form without the
killed one after --fake-delay-ms), checking the harness's own measurement; it needs neither
kolo nor torch.
"""
import argparse
import json
import os
import platform
import queue
import random
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KOLO_LINE = re.compile(r"\bgen (\d+) rank (\d+) size (\d+) step (\d+)\b.*\bpid (\d+) t_ms (\d+)")
TORCH_LINE = re.compile(r"\brestart (\d+) rank (\d+) size (\d+) step (\d+) pid (\d+) t_ms (\d+)")
# elastic_ddp.py's first line, before it imports torch.
STARTED_LINE = re.compile(r"\bstarted restart (\d+) pid (\d+) t_ms (\d+)")


class RunFailed(Exception):
    """A run that measured nothing; after_kill: it failed only after the kill (the job
    started, so the other runs are worth trying)."""

    def __init__(self, message, after_kill=False):
        super().__init__(message)
        self.after_kill = after_kill


def now_ms():
    return time.time() * 1000.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Torchrun:
    name = "torchrun"
    pattern = TORCH_LINE
    program_name = "elastic_ddp.py"

    def __init__(self, a):
        self.a = a

    def label(self):
        return f"torchrun (restarts all; monitor {self.a.torch_monitor_interval:g} s)"

    def command(self, n, logdir):
        return [self.a.python, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={n}",
                "--max_restarts=3", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}",
                f"--monitor_interval={self.a.torch_monitor_interval:g}", "--redirects", "2", "--tee", "2",
                "--log_dir", logdir, os.path.join(HERE, "peers", "elastic_ddp.py"), "--data", self.a.torch_data]

    def check(self):
        r = subprocess.run([self.a.python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return f"{self.a.python} cannot import torch (scripts/setup.sh --bench installs it)"
        self.version = r.stdout.strip()
        return None


class Kolo:
    name = "kolo"
    pattern = KOLO_LINE

    def __init__(self, a):
        self.a = a
        bin_ = os.path.join(a.build_dir, "bin")
        self.kolorun = a.kolorun or os.path.join(bin_, "kolorun")
        if a.kolo_program == "core":
            # STEPS (more than any run needs), SLEEP_MS between steps, CHECK_EVERY 0 (no
            # hosts_updated polls: nothing is added in this benchmark).
            self.program = [os.path.join(bin_, "kolo_elastic_core_worker"), "1000000", str(a.kolo_sleep_ms), "0"]
        elif a.kolo_program == "fashion_mnist":
            # Enough epochs to outlast any run; --print-steps gives the per-step lines.
            self.program = [os.path.join(bin_, "fashion_mnist"), "--elastic", "--print-steps",
                            "--epochs", "100", "--no-progress"]
        else:
            self.program = shlex.split(a.kolo_program)
        self.program_name = os.path.basename(self.program[0])

    def label(self):
        return f"kolo ({self.program_name})"

    def command(self, n, logdir):
        return [self.kolorun, "--min-np", "1", "--max-np", str(n), "-np", str(n)] + self.program

    def check(self):
        for f in (self.kolorun, self.program[0]):
            if not os.access(f, os.X_OK):
                return f"missing {f} (cd build && nice make {os.path.basename(f)})"
        return None


class Job:
    """One launcher process in its own session, its output read line by line by a thread."""

    def __init__(self, cmd, env, pattern):
        self.cmd, self.pattern = cmd, pattern
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=ROOT, start_new_session=True, text=True, errors="replace")
        self.lines = queue.Queue()
        self.all_lines = []
        self.pids = set()
        self.started = []  # (generation, pid, t_ms) of STARTED_LINE
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.all_lines.append(line.rstrip("\n"))
            m = STARTED_LINE.search(line)
            if m:
                self.started.append(tuple(int(v) for v in m.groups()))
                continue
            m = self.pattern.search(line)
            if m:
                step = tuple(int(v) for v in m.groups())  # gen, rank, size, step, pid, t_ms
                self.pids.add(step[4])
                self.lines.put(step)
        self.lines.put(None)

    def next_step(self, deadline, what):
        """The next parsed step line; RunFailed past the deadline or when the output ends."""
        left = deadline - time.monotonic()
        try:
            step = self.lines.get(timeout=max(left, 0.001))
        except queue.Empty:
            raise RunFailed(f"no {what} within the timeout") from None
        if step is None:
            self.proc.wait(timeout=10)
            raise RunFailed(f"the launcher ended (exit {self.proc.returncode}) before {what}")
        return step

    def tail(self, n=24):
        return "\n".join("    " + s for s in self.all_lines[-n:])

    def stop(self, program_name):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        # Workers a launcher moved out of its process group: those that printed a step and
        # still run this program.
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if program_name.encode() in f.read():
                        os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                pass


def run_once(system, n, a, logdir):
    """Seconds from the kill to the first step of the re-formed job, and what it became."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    job = Job(system.command(n, logdir), env, system.pattern)
    killed = False
    try:
        deadline = time.monotonic() + a.timeout
        first_gen, last = None, {}
        while len(last) < n or min(s[3] for s in last.values()) < a.kill_after:
            step = job.next_step(deadline, f"{a.kill_after} steps on each of {n} ranks")
            if first_gen is None:
                first_gen = step[0]
            if step[0] != first_gen:
                raise RunFailed(f"the job re-formed before the kill (generation {step[0]})")
            last[step[1]] = step
        victim = last[n - 1][4]
        before_pids = {s[4] for s in last.values()}
        pause = random.uniform(0, a.kill_jitter)
        time.sleep(pause)
        if job.proc.poll() is not None:
            raise RunFailed(f"the launcher ended (exit {job.proc.returncode}) before the kill")
        t_kill = now_ms()
        try:
            os.kill(victim, signal.SIGKILL)
            killed = True
        except ProcessLookupError:
            raise RunFailed(f"rank {n - 1}'s worker (pid {victim}) ended before the kill") from None
        deadline = time.monotonic() + a.timeout
        while True:
            step = job.next_step(deadline, "a step after the kill")
            if step[0] > first_gen:
                break
        gen, size = step[0], step[2]
        new = {step[1]: step}
        deadline = time.monotonic() + a.timeout
        while len(new) < size:
            s = job.next_step(deadline, f"a step on each of the {size} ranks after the kill")
            if s[0] == gen and s[1] not in new:
                new[s[1]] = s
        first = min(s[5] for s in new.values())
        after_pids = {s[4] for s in new.values()}
        restarted = [t for g, _, t in job.started if g > first_gen]
        return {
            "system": system.name, "before": n, "after": size, "seconds": (first - t_kill) / 1000.0,
            "kept_processes": after_pids <= before_pids - {victim},
            "new_processes": len(after_pids - before_pids), "generation": gen,
            "killed_rank": n - 1, "killed_pid": victim, "pause_before_kill_s": pause,
            # torchrun: from the kill to the first restarted worker's start (before it
            # imports torch), i.e. noticing the failure and stopping the others.
            "to_new_process_s": (min(restarted) - t_kill) / 1000.0 if restarted else None,
        }
    except RunFailed as e:
        when = "after the kill" if killed else "before the kill"
        raise RunFailed(f"{system.label()}, {n} workers, {when}: {e}\n  command: {shlex.join(job.cmd)}\n"
                        f"  last output:\n{job.tail()}", after_kill=killed) from None
    finally:
        job.stop(system.program_name)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def short(path):
    """path relative to the repository when it is inside it."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def report(systems, results, failures, a, started, load0):
    cpu = cpu_model()
    print()
    print("## Elastic recovery: kill -9 of one worker -> first step of the re-formed job")
    print()
    print(f"{time.strftime('%Y-%m-%d %H:%M', started)}-{time.strftime('%H:%M')}, {cpu}, "
          f"{os.cpu_count()} CPUs, load {load0} -> {loadavg()}; median of {a.runs} runs; "
          f"kill after {a.kill_after} steps on every rank")
    for s in systems:
        if s.name == "torchrun":
            print(f"torchrun: torch {getattr(s, 'version', '?')}, bench/peers/elastic_ddp.py (DDP over Gloo, "
                  f"batch 64, data {'fashion-mnist' if os.path.isdir(a.torch_data) else 'random'})")
        else:
            shown = [short(s.kolorun), "--min-np", "1", "--max-np", "N", "-np", "N", short(s.program[0])]
            print(f"kolo: {shlex.join(shown + s.program[1:])}")
    print()
    print("| workers | system | median s | min s | max s | runs | after the kill |")
    print("|---|---|---:|---:|---:|---:|---|")
    for n in a.sizes:
        for s in systems:
            rs = [r for r in results if r["system"] == s.name and r["before"] == n]
            failed = failures.get((s.name, n), [])
            tried = len(rs) + len(failed)
            if not rs:
                why = failed[0].splitlines()[0] if failed else "not run"
                print(f"| {n} -> ? | {s.label()} | - | - | - | 0 of {tried} | failed: {why} |")
                continue
            secs = [r["seconds"] for r in rs]
            afters = sorted({r["after"] for r in rs})
            after = "/".join(str(x) for x in afters)
            if all(r["kept_processes"] for r in rs):
                what = "survivors kept their processes"
            elif all(r["new_processes"] == r["after"] for r in rs):
                what = "every worker restarted (new processes)"
            else:
                what = "mixed: " + ", ".join(f"{r['new_processes']} new" for r in rs)
            if failed:
                what += f"; {len(failed)} of {tried} failed: {failed[0].splitlines()[0]}"
            runs = str(len(rs)) if not failed else f"{len(rs)} of {tried}"
            print(f"| {n} -> {after} | {s.label()} | {statistics.median(secs):.2f} | {min(secs):.2f} | "
                  f"{max(secs):.2f} | {runs} | {what} |")
    splits = False
    for n in a.sizes:
        split = [r["to_new_process_s"] for r in results
                 if r["before"] == n and r["to_new_process_s"] is not None]
        if split:
            splits = True
            print(f"\n{n} workers, torchrun: kill -> first restarted worker process started: median "
                  f"{statistics.median(split):.2f} s (min {min(split):.2f}, max {max(split):.2f}); the rest "
                  f"is the new workers' start-up (import torch, data, rendezvous, DDP) and a step", end="")
    if splits:
        print()
    for msgs in failures.values():
        for msg in msgs:
            print(f"\nfailed: {msg}")


def bench(a):
    systems = []
    for name in a.systems:
        systems.append(Torchrun(a) if name == "torchrun" else Kolo(a))
    problems = [f"{s.name}: {p}" for s in systems for p in [s.check()] if p]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    started, load0 = time.localtime(), loadavg()
    logroot = a.keep_logs or f"/tmp/kolo_elastic_recovery.{os.getpid()}"
    os.makedirs(logroot, exist_ok=True)
    results, failures, given_up = [], {}, set()
    for n in a.sizes:
        for i in range(a.runs):
            for s in systems:
                if (s.name, n) in given_up:
                    continue
                logdir = os.path.join(logroot, f"{s.name}.{n}.{i}")
                try:
                    r = run_once(s, n, a, logdir)
                except RunFailed as e:
                    failures.setdefault((s.name, n), []).append(str(e))
                    if not e.after_kill:  # it could not even start: no use trying again
                        given_up.add((s.name, n))
                    print(f"run {i + 1}/{a.runs} failed: {e}", file=sys.stderr, flush=True)
                    continue
                results.append(r)
                print(f"run {i + 1}/{a.runs}: {s.name} {n} -> {r['after']}: {r['seconds']:.3f} s", flush=True)
    report(systems, results, failures, a, started, load0)
    if failures:
        print(f"torchrun's worker logs: {logroot}")
    elif not a.keep_logs:
        shutil.rmtree(logroot, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu_model(), "date": time.strftime("%Y-%m-%dT%H:%M:%S", started), "runs": results,
                       "failures": [{"system": k[0], "before": k[1], "why": m} for k, v in failures.items()
                                    for m in v]}, f, indent=1)
    return 1 if failures else 0


# --- the stand-in for kolorun's elastic driver (--self-test) ---------------------------

def fake_worker(plan_path, sleep_ms):
    """Prints the kolo step lines under the newest plan ("G pid pid ..." in plan_path)."""
    pid, step = os.getpid(), 0
    while True:
        with open(plan_path) as f:
            words = f.read().split()
        gen, members = int(words[0]), [int(w) for w in words[1:]]
        if not members:  # plan 0 is written once every worker is forked
            time.sleep(0.01)
            continue
        if pid not in members:
            os._exit(0)
        rank, size = members.index(pid), len(members)
        line = f"[{rank}] gen {gen} rank {rank} size {size} step {step} ok 1 pid {pid} t_ms {int(now_ms())}\n"
        os.write(1, line.encode())
        step += 1
        time.sleep(sleep_ms / 1000.0)


def fake_kolorun(argv):
    """`--fake-kolorun DELAY_MS --min-np 1 --max-np N -np N PROGRAM...`: N forked workers;
    when one is killed, the survivors go on in generation + 1 after DELAY_MS."""
    delay_ms = int(argv[0])
    n = int(argv[argv.index("-np") + 1])
    plan_path = f"/tmp/kolo_fake_plan.{os.getpid()}"
    with open(plan_path, "w") as f:
        f.write("0")
    members = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            fake_worker(plan_path, 10)
        members.append(pid)

    def write_plan(gen):
        with open(plan_path + ".tmp", "w") as f:
            f.write(" ".join(str(x) for x in [gen] + members))
        os.rename(plan_path + ".tmp", plan_path)

    write_plan(0)
    signal.signal(signal.SIGTERM, lambda *_: (os.unlink(plan_path), os._exit(0)))
    gen = 0
    while members:
        pid, _ = os.wait()
        members.remove(pid)
        time.sleep(delay_ms / 1000.0)
        gen += 1
        write_plan(gen)
    os.unlink(plan_path)
    return 0


def self_test(a):
    """The kolo side against the stand-in: the measured time must be the stand-in's delay
    (plus at most a step, the scheduling and the line's trip), the job N-1 survivors."""
    delay = a.fake_delay_ms
    a.kill_jitter = min(a.kill_jitter, 0.2)
    a.kolorun = None
    a.kolo_program = "true"
    kolo = Kolo(a)
    kolo.command = lambda n, logdir: [sys.executable, os.path.abspath(__file__), "--fake-kolorun", str(delay),
                                      "--min-np", "1", "--max-np", str(n), "-np", str(n), "true"]
    kolo.program_name = os.path.basename(__file__)
    bad = 0
    for n in a.sizes:
        r = run_once(kolo, n, a, "/tmp")
        ok = (r["after"] == n - 1 and r["kept_processes"] and r["generation"] == 1
              and delay / 1000.0 <= r["seconds"] <= delay / 1000.0 + 1.0)
        bad += not ok
        print(f"self-test {n} -> {r['after']}: {r['seconds']:.3f} s (stand-in delay {delay / 1000.0:.3f} s), "
              f"kept processes {r['kept_processes']}: {'ok' if ok else 'WRONG'}")
    print("self-test " + ("passed" if not bad else f"wrong in {bad} of {len(a.sizes)} sizes"))
    return 1 if bad else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--fake-kolorun":
        return fake_kolorun(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs per system and size (default 5)")
    p.add_argument("--sizes", default="2 3 4", help='workers before the kill (default "2 3 4")')
    p.add_argument("--systems", default="torchrun kolo", help='"torchrun kolo" (default), or one of them')
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--kolorun", default=None, help="kolorun to run (default BUILD/bin/kolorun)")
    p.add_argument("--kolo-program", default="core",
                   help="core: kolo_elastic_core_worker (default); fashion_mnist: fashion_mnist --elastic; "
                        "else a command line")
    p.add_argument("--kolo-sleep-ms", type=int, default=10, help="kolo_elastic_core_worker's pause per step")
    p.add_argument("--python", default="/usr/bin/python3", help="the python with torch for torchrun")
    p.add_argument("--torch-data", default="/usr/share/datasets/fashion-mnist",
                   help="Fashion-MNIST for the DDP workers (random tensors of its shape when missing)")
    p.add_argument("--torch-monitor-interval", type=float, default=5.0,
                   help="torchrun's --monitor_interval in seconds (default 5, torchrun's own)")
    p.add_argument("--kill-after", type=int, default=20, help="steps every rank completes before the kill")
    p.add_argument("--kill-jitter", type=float, default=5.0,
                   help="then a random pause of 0 to this many seconds before the kill, so that it falls "
                        "anywhere in torchrun's monitor period (default 5)")
    p.add_argument("--timeout", type=float, default=120.0, help="bound of each wait of a run, seconds")
    p.add_argument("--json", default="", help="write every run's figures here")
    p.add_argument("--keep-logs", default="", help="torchrun's --log_dir root, kept (default: a folder under /tmp, removed "
                        "unless a run failed)")
    p.add_argument("--self-test", action="store_true", help="check the harness against a stand-in kolorun")
    p.add_argument("--fake-delay-ms", type=int, default=300, help="the stand-in's re-forming time")
    a = p.parse_args()
    try:
        a.sizes = [int(x) for x in a.sizes.split()]
    except ValueError:
        p.error(f"--sizes '{a.sizes}': give worker counts separated by spaces, e.g. \"2 3 4\"")
    if not a.sizes or min(a.sizes) < 2:
        p.error(f"--sizes '{' '.join(map(str, a.sizes))}': every size must be at least 2 (one worker is killed)")
    a.systems = a.systems.split()
    for s in a.systems:
        if s not in ("torchrun", "kolo"):
            p.error(f"--systems: unknown system '{s}' (torchrun, kolo)")
    if a.runs < 1:
        p.error(f"--runs {a.runs}: at least 1")
    a.build_dir = os.path.abspath(a.build_dir)
    return self_test(a) if a.self_test else bench(a)


if __name__ == "__main__":
    sys.exit(main())
