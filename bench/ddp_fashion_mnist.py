#!/usr/bin/python3
"""PyTorch DistributedDataParallel (Gloo) baseline of bench/train_bench.sh.

    /usr/bin/python3 bench/ddp_fashion_mnist.py --workers 2 --max-steps 300

Same model, data, batch size per worker, optimizer (Adam, lr 0.001 x workers), seed and
loop as examples/fashion_mnist.cc: each worker is a process with torch.set_num_threads(1),
holds the whole training set as one float tensor in [0, 1] and indexes its
DistributedSampler shard batch by batch (no DataLoader, no worker processes).
images_per_sec = images processed by all workers in the measured steps / rank 0's wall
time of those steps; the first --warmup-steps steps (DDP's first step builds its buckets)
are run but not measured. Prints one JSON line on stdout (rank 0) and writes it to
--summary-json when given. Reads the IDX .gz files itself (gzip + numpy).
"""
import argparse
import gzip
import json
import os
import socket
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
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
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load(data_dir, split):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)  # [N, 1, 28, 28]
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


class Net(nn.Module):
    """conv 3x3 (1 -> 32) + ReLU, max-pool 2, linear (5408 -> 64) + ReLU, linear (64 -> 10)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 3)
        self.fc1 = nn.Linear(32 * 13 * 13, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2).flatten(1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def worker(rank, args):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.workers)
    size = dist.get_world_size()
    torch.manual_seed(args.seed)
    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "t10k")

    model = Net()
    ddp = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3 * size)
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(len(y_train)), num_replicas=size, rank=rank, shuffle=True, seed=args.seed,
        drop_last=True)
    sampler.set_epoch(0)
    order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
    total_steps = (len(order) + args.batch_size - 1) // args.batch_size
    steps = min(total_steps, args.warmup_steps + args.max_steps) if args.max_steps > 0 else total_steps

    def step(s):
        batch = order[s * args.batch_size:(s + 1) * args.batch_size]
        opt.zero_grad()
        loss = F.nll_loss(ddp(x_train.index_select(0, batch)), y_train.index_select(0, batch))
        loss.backward()
        opt.step()
        return loss.item(), len(batch)

    for s in range(min(args.warmup_steps, steps)):
        step(s)
    start = time.perf_counter()
    loss_sum, images, measured = 0.0, 0, 0
    for s in range(min(args.warmup_steps, steps), steps):
        loss, n = step(s)
        loss_sum += loss
        images += n
        measured += 1
    seconds = time.perf_counter() - start

    totals = torch.tensor([loss_sum, float(measured), float(images)], dtype=torch.float64)
    dist.all_reduce(totals)

    with torch.no_grad():  # test accuracy over this rank's shard, summed
        model.eval()
        idx = torch.arange(rank, len(y_test), size)
        correct = sum(int(model(x_test.index_select(0, b)).argmax(1).eq(
            y_test.index_select(0, b)).sum()) for b in idx.split(1000))
        correct_t = torch.tensor([correct], dtype=torch.int64)
        dist.all_reduce(correct_t)
    if rank == 0:
        summary = {
            "framework": "pytorch-ddp-gloo",
            "torch": torch.__version__,
            "world_size": size,
            "warmup_steps": args.warmup_steps,
            "measured_steps_per_worker": measured,
            "train_loss": totals[0].item() / max(totals[1].item(), 1.0),
            "test_accuracy": int(correct_t) / len(y_test),
            "images_per_sec": totals[2].item() / seconds,
        }
        line = json.dumps(summary)
        print(line, flush=True)
        if args.summary_json:
            with open(args.summary_json, "w") as f:
                f.write(line + "\n")
    # Leave without tearing DDP down: in torch 1.13, ~Reducer -> ~ProcessGroupGloo joins a
    # thread that waits for the GIL held by the destructor's caller, and the TCPStore
    # thread spins once a peer has gone, so a worker can hang in exit for good. Every
    # rank is done after the barrier; os._exit skips that teardown (exit code 0 for spawn).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="images per step per worker")
    p.add_argument("--max-steps", type=int, default=300, help="measured steps per worker (0 = whole epoch)")
    p.add_argument("--warmup-steps", type=int, default=5, help="steps run before the measurement")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--summary-json", default="")
    args = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    # One intra-op thread per worker also for the start-up before set_num_threads.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(worker, args=(args,), nprocs=args.workers, join=True)


if __name__ == "__main__":
    sys.exit(main())
