#!/usr/bin/env bash
# Elastic Model::fit across real processes (kolo_fit_elastic_worker under kolorun
# --min-np 1 --max-np 3 -np 3): workers killed with -9 mid-epoch, fit finishes on the
# survivors (the same processes: no new worker id, their logs span the generations), the
# chief's History has every epoch once, its values match an uninterrupted run (kolorun -np 3,
# plain fit) within rounding, and within every epoch each example was trained on exactly
# once, counting a step when no later generation went back to it or before it (work after
# the last commit is rolled back and done again).
#
#   fit_elastic_test.sh KOLORUN WORKER kill1|kill0then1
#     kill1:      worker id 1 killed in epoch 2 (3 -> 2 workers)
#     kill0then1: the chief (id 0) killed in epoch 2, then id 1 in epoch 3 (3 -> 2 -> 1; the
#                 survivor that becomes rank 0 takes over as chief)
# Also: plain fit inside an elastic job is refused with a clear message.
set -uo pipefail
kolorun=$1 worker=$2 mode=$3
work=$(mktemp -d)
job=
trap '[ -n "$job" ] && kill "$job" 2> /dev/null; rm -rf "$work"' EXIT
export KOLO_PEER_TIMEOUT_SECONDS=60 OMP_NUM_THREADS=1
epochs=5
status=0
fail() { echo "FAIL: $*"; status=1; }

# Waits (at most 120 s) until FILE has a line matching the extended regex RE.
wait_line() {
  local i
  for ((i = 0; i < 2400; ++i)); do
    grep -Eq "$2" "$1" 2> /dev/null && return 0
    sleep 0.05
  done
  fail "no line /$2/ in $1 after 120 s"
  return 1
}

# The uninterrupted run.
mkdir "$work/ref"
timeout 300 "$kolorun" -np 3 "$worker" plain "$work/ref" $epochs > "$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "the uninterrupted run failed"; exit 1; }

# Plain fit in an elastic job: refused, naming the option.
mkdir "$work/plain"
if timeout 120 "$kolorun" -np 2 --min-np 1 --max-np 2 "$worker" plain "$work/plain" 1 \
  > "$work/plain.out" 2>&1; then
  fail "plain fit in an elastic job was not refused"
fi
grep -q "worker of an elastic job.*FitOptions{.elastic = {.enabled = true}}" "$work/plain.out" &&
  echo "plain fit in an elastic job: refused" ||
  { cat "$work/plain.out"; fail "plain fit in an elastic job: no clear message"; }

# The elastic run, with kills.
mkdir "$work/run"
timeout 300 "$kolorun" -np 3 --min-np 1 --max-np 3 "$worker" elastic "$work/run" $epochs \
  > "$work/run.out" 2>&1 &
job=$!
for id in 0 1 2; do wait_line "$work/run/log.$id" '^batch 0 0 0 ' || break; done
original=$(cat "$work"/run/pid.* | sort | tr '\n' ' ')
case $mode in
kill1)
  wait_line "$work/run/log.0" '^batch 0 1 5 ' && kill -9 "$(cat "$work/run/pid.1")"
  survivors=2 killed=1
  ;;
kill0then1)
  wait_line "$work/run/log.1" '^batch 0 1 5 ' && kill -9 "$(cat "$work/run/pid.0")"
  wait_line "$work/run/log.2" '^batch [1-9][0-9]* 2 5 ' && kill -9 "$(cat "$work/run/pid.1")"
  survivors=1 killed=2
  ;;
*)
  fail "unknown mode $mode"
  exit 1
  ;;
esac
wait "$job"
rc=$?
job=
[ $rc = 0 ] || { tail -30 "$work/run.out"; fail "the elastic job ended with status $rc"; }
grep -c "was killed by signal 9" "$work/run.out" | grep -qx "$killed" ||
  fail "kolorun did not report $killed killed workers"

# The same processes: no worker id beyond the first three, and every survivor's log goes
# on past the kills (a restarted worker would have a new id and a new log).
ls "$work"/run/pid.* | grep -q 'pid\.[3-9]' && fail "a new worker was started: $(ls "$work/run")"
[ "$(cat "$work"/run/pid.* | sort | tr '\n' ' ')" = "$original" ] || fail "the pids changed"

python3 - "$work" "$epochs" "$survivors" << 'EOF' || status=1
import glob, os, sys
work, epochs, survivors = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ok = True
def bad(msg):
    global ok
    print("FAIL: " + msg)
    ok = False

def history(d):
    files = glob.glob(os.path.join(d, "history.*"))
    if len(files) != 1:
        bad("%s: %d history files, want the chief's one" % (d, len(files)))
        return None, None, None
    rows, workers = [], None
    for line in open(files[0]):
        f = line.split()
        if f[0] == "epoch":
            rows.append({"epoch": int(f[1]), **{f[i]: float(f[i + 1]) for i in range(2, len(f), 2)}})
        elif f[0] == "workers":
            workers = int(f[1])
    return rows, workers, int(files[0].rsplit(".", 1)[1])

ref, _, _ = history(os.path.join(work, "ref"))
run, workers, chief_pid = history(os.path.join(work, "run"))
if run is not None and ref is not None:
    if [r["epoch"] for r in run] != list(range(epochs)):
        bad("the History's epochs are %s, want each of 0..%d once" % ([r["epoch"] for r in run], epochs - 1))
    if workers != survivors:
        bad("the job ended with %s workers, want %d" % (workers, survivors))
    pids = [int(open(p).read()) for p in glob.glob(os.path.join(work, "run", "pid.*"))]
    if chief_pid not in pids:
        bad("the chief at the end (pid %d) is none of the workers started first" % chief_pid)
    for a, b in zip(run, ref):
        for k in ("loss", "val_loss"):
            if abs(a[k] - b[k]) > 1e-3 * max(1.0, abs(b[k])):
                bad("epoch %d: %s %.6f, uninterrupted %.6f" % (a["epoch"], k, a[k], b[k]))
        for k in ("accuracy", "val_accuracy"):
            if abs(a[k] - b[k]) > 0.011:
                bad("epoch %d: %s %.4f, uninterrupted %.4f" % (a["epoch"], k, a[k], b[k]))
    print("history: " + ", ".join("epoch %d loss %.4f val_accuracy %.3f" % (r["epoch"], r["loss"], r["val_accuracy"]) for r in run))

# Count what was trained on: (generation, epoch, batch) steps, each generation starting
# where the committed state was; a step is rolled back when a later generation starts at it
# or before it.
steps = []
for path in glob.glob(os.path.join(work, "run", "log.*")):
    for line in open(path):
        f = line.split()
        if f and f[0] == "batch":
            steps.append((int(f[1]), int(f[2]), int(f[3]), [int(i) for i in f[4:]]))
start = {}
for g, e, b, _ in steps:
    start[g] = min(start.get(g, (e, b)), (e, b))
gens = sorted(start)
if len(gens) < 2:
    bad("the run had generations %s: no reset happened" % gens)
for g in gens:
    print("generation %d starts at epoch %d batch %d" % (g, start[g][0] + 1, start[g][1]))
count = [[0] * 480 for _ in range(epochs)]
rolled = 0
for g, e, b, idx in steps:
    if any(start[h] <= (e, b) for h in gens if h > g):
        rolled += len(idx)
        continue
    for i in idx:
        count[e][i] += 1
for e in range(epochs):
    missing = [i for i, c in enumerate(count[e]) if c == 0]
    twice = [i for i, c in enumerate(count[e]) if c > 1]
    if missing or twice:
        bad("epoch %d: %d examples never trained on (first %s), %d more than once (first %s)"
            % (e + 1, len(missing), missing[:3], len(twice), twice[:3]))
print("%d examples of steps after the last commit were rolled back and done again" % rolled)
if ok:
    print("each example of each epoch trained on once")
sys.exit(0 if ok else 1)
EOF

[ $status = 0 ] && echo PASS || { tail -40 "$work/run.out"; }
exit $status
