#!/usr/bin/env python3
"""Separates rank skew from kolo's own latency in a 2-worker training step.

Reads the per-step timelines that `kolo_step_profile --timeline PREFIX` writes for rank 0
and rank 1 (PREFIX.0.csv, PREFIX.1.csv; steady_clock ns, one clock for both processes on a
host) and prints, over the steps after --skip:

  per gradient  latency: from the moment the *later* rank submitted it to the moment the
                first rank started moving it (negotiation plus the wait for a CPU; what
                kolo adds), and skew: how far apart the two ranks submitted it (what lock
                step costs, whatever the library);
  per step      how long after the later rank's backward ended the earlier synchronize()
                returned (kolo's part of the wait after backward), the backward-end skew,
                and each rank's forward / backward / step times (median, p10, p90).

  kolorun -np 2 build/bin/kolo_step_profile --max-steps 600 --timeline /tmp/tl
  bench/step_skew.py /tmp/tl

A diagnostic for docs/history/benchmarks.md, not a test.
"""
import argparse
import csv
import statistics as st


def load(path):
    with open(path, newline="") as f:
        return {int(row["step"]): {k: int(v) for k, v in row.items()} for row in csv.DictReader(f)}


def ms(ns):
    return ns / 1e6


def spread(values):
    s = sorted(values)
    return f"median {st.median(s):7.3f}  p10 {s[len(s) // 10]:7.3f}  p90 {s[9 * len(s) // 10]:7.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prefix", help="the --timeline PREFIX given to kolo_step_profile")
    ap.add_argument("--skip", type=int, default=5, help="leading steps to leave out")
    args = ap.parse_args()
    a, b = load(args.prefix + ".0.csv"), load(args.prefix + ".1.csv")
    steps = sorted(s for s in a if s in b and s >= args.skip)
    if not steps:
        raise SystemExit(f"{args.prefix}.0.csv / .1.csv have no common step >= {args.skip}")
    names = [k[: -len(".enq")] for k in a[steps[0]] if k.endswith(".enq")]

    print(f"{len(steps)} steps; ms")
    print("gradient      latency after the later submit            submit skew between ranks")
    for n in names:
        lat = [ms(min(a[s][n + ".start"], b[s][n + ".start"]) - max(a[s][n + ".enq"], b[s][n + ".enq"]))
               for s in steps]
        skew = [ms(abs(a[s][n + ".enq"] - b[s][n + ".enq"])) for s in steps]
        print(f"{n:12s}  {spread(lat)}   {spread(skew)}")
    wait = [ms(min(a[s]["sync_end"], b[s]["sync_end"]) - max(a[s]["backward_end"], b[s]["backward_end"]))
            for s in steps]
    skew = [ms(abs(a[s]["backward_end"] - b[s]["backward_end"])) for s in steps]
    print(f"synchronize() end after the later backward end: {spread(wait)}")
    print(f"backward end skew between ranks:                {spread(skew)}")
    for rank, t in (("rank 0", a), ("rank 1", b)):
        fwd = [ms(t[s]["forward_end"] - t[s]["start"]) for s in steps]
        bwd = [ms(t[s]["backward_end"] - t[s]["forward_end"]) for s in steps]
        tot = [ms(t[s]["item_end"] - t[s]["start"]) for s in steps]
        print(f"{rank}: forward {spread(fwd)} | backward {spread(bwd)} | step {spread(tot)}")


if __name__ == "__main__":
    main()
