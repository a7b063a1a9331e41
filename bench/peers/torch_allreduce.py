#!/usr/bin/python3
"""Peer for `kolo_bench allreduce`: torch.distributed's all_reduce with the Gloo backend
(TCP on this host), in place, SUM, float32, over the same size sweep and timed the same way,
so that bench/compare.sh can put kolo's numbers next to Gloo's from the same run.

    /usr/bin/python3 bench/peers/torch_allreduce.py -np 2 [--min-bytes 4]
        [--max-bytes 268435456] [--step 2|4] [--iters N] [--json FILE] [--device cuda]

With --device cuda the buffer is a CUDA tensor on GPU 0 for every rank (the peer of
kolo's CUDA-IPC path, kolo_ipc_check --bench, where the ranks share one GPU: NCCL refuses
that, Gloo stages through host memory), and each call is timed to torch.cuda.synchronize().

Starts -np local processes itself (torch.multiprocessing, MASTER_ADDR=127.0.0.1 and a free
MASTER_PORT), each with torch.set_num_threads(1). Per size: warm-up, then timed
back-to-back all_reduce calls without barriers; an iteration's time is one rank's wall time
of the call, the reported time is the maximum over ranks per iteration (an all_reduce(MAX)
of the times after the loop), then the median over iterations. Default iterations follow
kolo_bench's rule (~1 GiB per size, between 5 and 1000; warm-up iters/10 in [2, 50]).
Rank 0 prints a table and writes a JSON list with the keys bytes, dtype, ranks,
time_us_median, algbw_gbps, busbw_gbps. Needs Debian's python3-torch (/usr/bin/python3).
"""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def default_iters(nbytes):
    return max(5, min(1000, (1 << 30) // max(nbytes, 1)))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def percentile(sorted_values, q):
    return sorted_values[int(round(q * (len(sorted_values) - 1)))]


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.np)
    n = args.np
    cuda = args.device == "cuda"
    buf = torch.zeros(args.max_bytes // 4, dtype=torch.float32,
                      device="cuda:0" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    if rank == 0:
        print("gloo all_reduce: %d ranks, f32, SUM, in place, %s tensors; time = max over ranks "
              "per iteration, median over iterations" % (n, args.device))
        print("%12s %7s %12s %12s %12s %10s %10s" % ("bytes", "iters", "median_us", "p10_us",
                                                     "p90_us", "algbw_GB/s", "busbw_GB/s"),
              flush=True)
    for _ in range(300):  # start-up noise stays out of the first row, as in kolo_bench
        dist.all_reduce(buf[:1])
    b = args.min_bytes
    while b <= args.max_bytes:
        nbytes = b // 4 * 4
        t = buf[: nbytes // 4]
        iters = args.iters or default_iters(nbytes)
        warmup = max(2, min(50, iters // 10))
        for _ in range(warmup):
            dist.all_reduce(t)
        times = torch.zeros(iters, dtype=torch.float64)
        for i in range(iters):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            sync()
            times[i] = (time.perf_counter() - t0) * 1e6
        times = times.to(buf.device)
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        s = sorted(times.tolist())
        med = statistics.median(s)
        alg = nbytes / med / 1e3
        bus = alg * 2 * (n - 1) / n if n > 1 else alg
        rows.append({"bytes": nbytes, "dtype": "f32", "ranks": n, "op": "sum", "iters": iters,
                     "time_us_median": med, "time_us_p10": percentile(s, 0.1),
                     "time_us_p90": percentile(s, 0.9), "algbw_gbps": alg, "busbw_gbps": bus,
                     "timing": "max over ranks per iteration"})
        if rank == 0:
            print("%12d %7d %12.2f %12.2f %12.2f %10.3f %10.3f" % (
                nbytes, iters, med, percentile(s, 0.1), percentile(s, 0.9), alg, bus), flush=True)
        b *= args.step
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
            f.write("\n")
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-np", type=int, default=2, help="local processes (default 2)")
    p.add_argument("--min-bytes", type=parse_size, default=4)
    p.add_argument("--max-bytes", type=parse_size, default=256 << 20)
    p.add_argument("--step", type=int, choices=(2, 4), default=2)
    p.add_argument("--iters", type=int, default=0, help="timed iterations (default: by size)")
    p.add_argument("--json", default="")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the tensors live (cuda: GPU 0 for every rank)")
    args = p.parse_args()
    if args.min_bytes < 4 or args.max_bytes < args.min_bytes:
        p.error("need 4 <= --min-bytes <= --max-bytes")
    mp.spawn(worker, args=(args, free_port()), nprocs=args.np, join=True)


if __name__ == "__main__":
    main()
