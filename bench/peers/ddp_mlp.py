#!/usr/bin/python3
"""PyTorch DistributedDataParallel (Gloo) peer of kolo_train's fit for bench/fit_compare.sh.

    /usr/bin/python3 bench/peers/ddp_mlp.py --workers 2 [--epochs 1] [--steps-per-epoch N]

examples/keras_mnist.cc's model and training in PyTorch: Linear(784, 64) + ReLU +
Linear(64, 10) (PyTorch's own initialisation), Adam(lr, eps 1e-7), cross-entropy from
logits, a GLOBAL batch of --batch-size cut into one consecutive slice per worker (rank r
takes its [r * b / n, (r + 1) * b / n) of every global batch of a randperm seeded with
seed + epoch, as fit does), DDP averaging the gradients. Per step it reads the loss and
the number of correct predictions (.item()), as bench/mlp_loop.cc does; they are summed
over the workers after training.

The script starts the workers itself: --workers processes of this file with MASTER_ADDR,
MASTER_PORT, RANK and WORLD_SIZE set (init_method env://; Debian's torchrun is broken
under Python 3.11). Each worker uses --threads intra-op threads (torch.set_num_threads,
and OMP_NUM_THREADS for its start-up) and one inter-op thread.

images_per_sec is timed as keras_mnist times it: rank 0's wall time of each epoch's
training (the permutation and every step, the first included; not start-up, not
evaluation), images = every worker's images. Prints one JSON line on stdout (rank 0).
The IDX .gz files are read with gzip + numpy, into float32 in [0, 1] like kolo's loader.
"""
import argparse
import gzip
import json
import os
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    if magic >> 8 != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


def my_slice(n, size, rank):
    """Rank's part of a global batch of n: the first n % size ranks take one more."""
    base, extra = divmod(n, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def worker(args):
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    x, y = load(args.data, "train")
    x_test, y_test = load(args.data, "t10k")
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters
    opt = torch.optim.Adam(ddp.parameters(), lr=args.learning_rate, eps=1e-7)

    seconds, loss_sum, correct, seen, images = 0.0, 0.0, 0.0, 0.0, 0
    for epoch in range(args.epochs):
        start = time.perf_counter()
        gen = torch.Generator().manual_seed(args.seed + epoch)
        order = torch.randperm(len(y), generator=gen)
        steps = (len(y) + args.batch_size - 1) // args.batch_size
        if args.steps_per_epoch >= 0:
            steps = min(steps, args.steps_per_epoch)
        for s in range(steps):
            lo = s * args.batch_size
            n = min(len(y), lo + args.batch_size) - lo
            a, b = my_slice(n, size, rank)
            idx = order[lo + a:lo + b]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad()
            logits = ddp(xb)
            loss = F.cross_entropy(logits, yb)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            correct += logits.detach().argmax(1).eq(yb).sum().item()
            seen += len(idx)
            images += n
        seconds += time.perf_counter() - start

    totals = torch.tensor([loss_sum, correct, seen], dtype=torch.float64)
    dist.all_reduce(totals)
    with torch.no_grad():
        test_correct = sum(int(model(xt).argmax(1).eq(yt).sum())
                           for xt, yt in zip(x_test.split(1000), y_test.split(1000)))
    if rank == 0:
        n = max(totals[2].item(), 1.0)
        print(json.dumps({
            "program": "ddp_mlp", "torch": torch.__version__, "workers": size,
            "threads": torch.get_num_threads(), "epochs": args.epochs,
            "train_loss": totals[0].item() / n, "train_accuracy": totals[1].item() / n,
            "test_accuracy": test_correct / len(y_test),
            "parameter_sum": sum(p.abs().sum().item() for p in model.parameters()),
            "images_per_sec": images / seconds if seconds > 0 else 0.0}), flush=True)
    # Leave without tearing DDP down: in torch 1.13, ~Reducer -> ~ProcessGroupGloo can hang
    # in exit once a peer has gone (see bench/ddp_fashion_mnist.py). Every rank is done
    # after the barrier.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, argv):
    """Starts the workers (this file, with RANK set) and waits for all of them, bounded."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(args.workers), OMP_NUM_THREADS=str(args.threads))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv,
                              env=dict(env, RANK=str(r))) for r in range(args.workers)]
    deadline = time.monotonic() + args.timeout
    status = 0
    for r, p in enumerate(procs):
        try:
            rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"ddp_mlp: worker {r} still running after {args.timeout} s; killing all",
                  file=sys.stderr)
            for q in procs:
                q.kill()
            return 1
        if rc != 0:
            print(f"ddp_mlp: worker {r} exited with status {rc}", file=sys.stderr)
            status = 1
    return status


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps-per-epoch", type=int, default=-1, help="-1: the whole data")
    p.add_argument("--batch-size", type=int, default=32, help="GLOBAL batch size")
    p.add_argument("--learning-rate", type=float, default=0.001)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per worker")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--timeout", type=float, default=600, help="seconds for the whole run")
    argv = sys.argv[1:]
    args = p.parse_args(argv)
    if "RANK" in os.environ:
        worker(args)
        return 0
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
