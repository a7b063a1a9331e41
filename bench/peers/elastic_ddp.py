#!/usr/bin/python3
"""Worker of bench/elastic_recovery.sh's torchrun side: a PyTorch DDP (Gloo) job that
trains the founding example's CNN (bench/ddp_fashion_mnist.py's Net, the same network as
examples/fashion_mnist_model.h) under torch.distributed.run, printing one line per
completed step:

    restart C rank R size S step K pid P t_ms T

C is TORCHELASTIC_RESTART_COUNT (0 for the first start, +1 for each restart of the whole
job), T the wall clock (time.time) in ms after the step's optimizer update; and first of
all, before torch is imported, "started restart C pid P t_ms T". Started by the
harness as

    /usr/bin/python3 -m torch.distributed.run --nnodes=1 --nproc_per_node=N \\
        --max_restarts=3 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT \\
        --redirects 2 --tee 2 --log_dir DIR bench/peers/elastic_ddp.py [--data DIR]

(Debian 12's torch 1.13 spells the options with underscores; `--redirects 2 --tee 2` work
around its Std.from_str returning None for "0", the default, under Python 3.11.)

What a restarted worker does is what a torchrun job does after a failure: a new process
imports torch, reads the data set, joins the new rendezvous, builds DDP (a broadcast of
rank 0's parameters) and trains on. It does not load a checkpoint (a real job would: for
this 350k-parameter model that is milliseconds). Data: the Fashion-MNIST training set
from --data when its files are there ("data fashion-mnist" on rank 0's first line), else
random tensors of its shape ("data random"). Not a test: a load generator for the harness.
"""
import argparse
import os
import sys
import time

# First, before torch's import: when the process started (the harness splits torchrun's
# recovery into noticing the failure and restarting, and the new workers' start-up).
print(f"started restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} pid {os.getpid()} "
      f"t_ms {int(time.time() * 1000)}", flush=True)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from ddp_fashion_mnist import Net, load  # noqa: E402


def training_set(data_dir, seed):
    if os.path.exists(os.path.join(data_dir, "train-images-idx3-ubyte.gz")):
        x, y = load(data_dir, "train")
        return x, y, "fashion-mnist"
    g = torch.Generator().manual_seed(seed)
    return torch.rand(60000, 1, 28, 28, generator=g), torch.randint(0, 10, (60000,), generator=g), "random"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch-size", type=int, default=64, help="images per step per worker")
    p.add_argument("--steps", type=int, default=100000, help="steps before the worker ends")
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.seed)
    x, y, source = training_set(a.data, a.seed)
    if rank == 0:
        print(f"data {source} restart {restart} size {size}", flush=True)
    model = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 * size)
    # Each rank takes every size-th batch of one shuffled order (DistributedSampler's
    # sharding without its epoch bookkeeping; the run ends long before an epoch does).
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(a.seed))
    pid = os.getpid()
    per_step = a.batch_size * size
    for step in range(a.steps):
        start = (step * per_step + rank * a.batch_size) % (len(y) - a.batch_size)
        batch = order[start:start + a.batch_size]
        opt.zero_grad()
        F.nll_loss(model(x.index_select(0, batch)), y.index_select(0, batch)).backward()
        opt.step()
        print(f"restart {restart} rank {rank} size {size} step {step} pid {pid} "
              f"t_ms {int(time.time() * 1000)}", flush=True)
    # As in ddp_fashion_mnist.py: leave without DDP's teardown, which can hang in 1.13.
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
