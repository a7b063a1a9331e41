#!/usr/bin/python3
"""Merges the JSON files bench/compare.sh writes into one report: a table per rank count
(kolo vs MPI_Allreduce vs Gloo algbw, medians over repeats), the memory-bandwidth line and
the shared-memory allreduce bounds derived from it, the gradient-set and latency summaries,
and the goals of docs/benchmarks.md with PASS/MISS. Also writes summary.json.

    /usr/bin/python3 bench/peers/summarize.py RESULTS_DIR

Expected files in RESULTS_DIR (missing ones are reported as such, not fatal):
  stream.json                          kolo_peer_stream
  {kolo,mpi,gloo}_np<N>_r<K>.json      allreduce sweeps, N ranks, repeat K
  gradients_<model>_r<K>.json          kolo_bench gradients at 2 ranks
  latency_np2_r<K>.json                kolo_bench latency at 2 ranks

Only the standard library; not a general JSON tool.
"""
import glob
import json
import os
import re
import statistics
import sys

GOAL_BYTES = 64 << 20


def load(path):
    with open(path) as f:
        return json.load(f)


def sweeps(d, tool):
    """{ranks: {bytes: [algbw per repeat]}} for one tool."""
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "%s_np*_r*.json" % tool))):
        m = re.search(r"_np(\d+)_r\d+\.json$", path)
        for row in load(path):
            out.setdefault(int(m.group(1)), {}).setdefault(row["bytes"], []).append(row["algbw_gbps"])
    return out


def median_or_none(values):
    return statistics.median(values) if values else None


def shm_bounds(n, copy, add):
    """algbw (GB/s) bounds of an n-rank in-place allreduce of S bytes through shared memory
    (reduce-scatter + allgather), from the all-cores STREAM copy and add figures (B_copy,
    B_add; STREAM counting: a copy of S bytes moves 2S). All n ranks share the machine's
    memory bandwidth. Returns (blocked, streaming):

    blocked: the data are exchanged in cache-sized pieces, so DRAM sees only each rank
      reading its buffer once and writing the result once: 2S per rank in copy terms,
      time >= 2 n S / B_copy. No allreduce of data larger than the caches can do better.
    streaming: every phase goes through DRAM: publish the (n-1)/n of the buffer the others
      reduce (copy, 2(n-1)/n S), reduce the own chunk from n sources and write it to the
      segment and the buffer (add-like, S + 2S/n), copy the other reduced chunks back
      (copy, 2(n-1)/n S): time >= 4(n-1) S / B_copy + (n+2) S / B_add."""
    return copy / (2.0 * n), 1.0 / (4.0 * (n - 1) / copy + (n + 2) / add)


def fmt(x, spec="%.3f"):
    return spec % x if x is not None else "-"


def ratio(a, b):
    return a / b if a is not None and b else None


def main():
    d = sys.argv[1]
    summary = {"dir": d}
    stream = load(os.path.join(d, "stream.json")) if os.path.exists(os.path.join(d, "stream.json")) else None
    if stream:
        one, allc = stream["threads"][0], stream["threads"][-1]
        print("memory bandwidth (STREAM-like, %d MiB arrays, best of %d): 1 thread copy %.2f add %.2f "
              "triad %.2f GB/s; %d threads copy %.2f add %.2f triad %.2f GB/s" % (
                  stream["array_mib"], stream["reps"], one["copy_gbps"], one["add_gbps"],
                  one["triad_gbps"], allc["threads"], allc["copy_gbps"], allc["add_gbps"],
                  allc["triad_gbps"]))
        summary["stream"] = stream
    kolo, mpi, gloo = sweeps(d, "kolo"), sweeps(d, "mpi"), sweeps(d, "gloo")
    kgloo = sweeps(d, "kologloo")  # kolo over Gloo without shared memory (KOLO_SHM=0)
    summary["allreduce"] = {}
    goals = []
    for n in sorted(set(kolo) | set(mpi) | set(gloo)):
        sizes = sorted(set(kolo.get(n, {})) | set(mpi.get(n, {})) | set(gloo.get(n, {})))
        bound, streaming = shm_bounds(n, allc["copy_gbps"], allc["add_gbps"]) if stream else (None, None)
        reps = max(len(v) for t in (kolo, mpi, gloo) for v in t.get(n, {}).values())
        print("\n%d ranks: algbw GB/s (median of %d repeat(s)); shared-memory bound %s GB/s "
              "(cache-blocked; %s if every phase streams through DRAM)" % (
                  n, reps, fmt(bound, "%.2f"), fmt(streaming, "%.2f")))
        print("%12s %10s %10s %10s %10s %9s %9s %9s %9s" % (
            "bytes", "kolo", "kolo-gloo", "mpi", "gloo", "kolo/mpi", "kolo/gloo", "kolo/bnd",
            "kg/gloo"))
        rows = []
        for b in sizes:
            k = median_or_none(kolo.get(n, {}).get(b, []))
            m = median_or_none(mpi.get(n, {}).get(b, []))
            g = median_or_none(gloo.get(n, {}).get(b, []))
            kg = median_or_none(kgloo.get(n, {}).get(b, []))
            row = {"bytes": b, "kolo_algbw_gbps": k, "kolo_gloo_algbw_gbps": kg,
                   "mpi_algbw_gbps": m, "gloo_algbw_gbps": g,
                   "kolo_over_mpi": ratio(k, m), "kolo_over_gloo": ratio(k, g),
                   "kolo_over_bound": ratio(k, bound), "kolo_gloo_over_gloo": ratio(kg, g)}
            rows.append(row)
            print("%12d %10s %10s %10s %10s %9s %9s %9s %9s" % (
                b, fmt(k), fmt(kg), fmt(m), fmt(g), fmt(row["kolo_over_mpi"], "%.2f"),
                fmt(row["kolo_over_gloo"], "%.2f"), fmt(row["kolo_over_bound"], "%.2f"),
                fmt(row["kolo_gloo_over_gloo"], "%.2f")))
            if b >= (1 << 20) and row["kolo_gloo_over_gloo"] is not None:
                goals.append(("%d ranks %d B kolo-gloo/gloo >= 1.2" % (n, b),
                              row["kolo_gloo_over_gloo"], 1.2, True))
            if n == 2 and b == GOAL_BYTES:
                goals += [("2 ranks 64 MiB kolo/mpi >= 2.5", row["kolo_over_mpi"], 2.5, True),
                          ("2 ranks 64 MiB kolo/gloo >= 4", row["kolo_over_gloo"], 4.0, True),
                          ("2 ranks 64 MiB kolo >= 0.7 x shm bound", row["kolo_over_bound"], 0.7, True)]
        summary["allreduce"][n] = {"shm_bound_gbps": bound, "shm_streaming_bound_gbps": streaming,
                                   "rows": rows}
        # Issue 17: no mid-size dip, small messages close to raw MPI_Allreduce.
        by = {r["bytes"]: r for r in rows}
        top = by.get(256 << 20, {}).get("kolo_algbw_gbps")
        for mib in (16, 32, 64):
            k = by.get(mib << 20, {}).get("kolo_algbw_gbps")
            if top and k is not None:
                goals.append(("%d ranks %d MiB >= 0.95 x 256 MiB" % (n, mib), k / top, 0.95, True))
        if n == 2 and by.get(GOAL_BYTES, {}).get("kolo_over_mpi") is not None:
            goals.append(("2 ranks 64 MiB kolo/mpi >= 4", by[GOAL_BYTES]["kolo_over_mpi"], 4.0, True))
        small = [by[b]["kolo_over_mpi"] for b in sorted(by)
                 if (4 << 10) <= b <= (256 << 10) and by[b]["kolo_over_mpi"] is not None]
        if small and n in (2, 4):
            want = 0.8 if n == 2 else 0.5
            goals.append(("%d ranks 4-256 KiB min kolo/mpi >= %.1f" % (n, want), min(small), want,
                          True))

    summary["gradients"] = {}
    for prefix, model, goal in (("gradients", "resnet50", 1.05), ("gradients", "bert-base", 1.05),
                                ("gradientsgloo", "resnet50", 1.10),
                                ("gradientsgloo", "bert-base", 1.10)):
        runs = [load(p) for p in sorted(glob.glob(os.path.join(d, "%s_%s_r*.json" % (prefix, model))))]
        if not runs:
            continue
        label = model if prefix == "gradients" else model + " over gloo alone"
        step = statistics.median(r["step_time_us_median"] for r in runs)
        single = statistics.median(r["single_time_us_median"] for r in runs)
        ratios = [r["ratio_step_single"] for r in runs]
        pairs = [r.get("ratio_step_single_pairs_median") for r in runs]
        g = {"tensors": runs[0]["tensors"], "parameters": runs[0]["parameters"],
             "bytes": runs[0]["bytes"], "ranks": runs[0]["ranks"], "step_time_us_median": step,
             "single_time_us_median": single, "ratio_step_single_median": statistics.median(ratios),
             "ratios": ratios, "pair_ratio_medians": pairs, "peak_rss_mib": [x / 1024 for x in runs[-1]["peak_rss_kib"]]}
        summary["gradients"][label] = g
        print("\ngradients %s (%d ranks): %d tensors, %d parameters; step %.1f ms, single allreduce "
              "%.1f ms, step/single %.3f (per repeat: %s; median of paired iterations: %s); peak RSS "
              "%s MiB" % (
                  label, g["ranks"], g["tensors"], g["parameters"], step / 1e3, single / 1e3,
                  g["ratio_step_single_median"], ", ".join("%.3f" % r for r in ratios),
                  ", ".join(fmt(p) for p in pairs),
                  "/".join("%.0f" % x for x in g["peak_rss_mib"])))
        goals.append(("%s step/single <= %.2f" % (label, goal), g["ratio_step_single_median"], goal,
                      False))

    lat = [load(p) for p in sorted(glob.glob(os.path.join(d, "latency_np2_r*.json")))]
    if lat:
        med = statistics.median(r["time_us_median"] for r in lat)
        summary["latency"] = {"time_us_median": med, "runs": lat}
        print("\nlatency (2 ranks, 4 bytes): median %.1f us (per repeat: %s; p10/p90 of the last "
              "%.1f/%.1f us); peak RSS %s MiB" % (
                  med, ", ".join("%.1f" % r["time_us_median"] for r in lat), lat[-1]["time_us_p10"],
                  lat[-1]["time_us_p90"], "/".join("%.0f" % (x / 1024) for x in lat[-1]["peak_rss_kib"])))
        goals.append(("4-byte latency at 2 ranks <= 3 us", med, 3.0, False))

    print("\ngoals:")
    summary["goals"] = []
    for name, value, target, at_least in goals:
        ok = value is not None and (value >= target if at_least else value <= target)
        summary["goals"].append({"goal": name, "value": value, "met": ok})
        print("  %-42s %8s  %s" % (name, fmt(value, "%.3f"), "PASS" if ok else "MISS"))
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
