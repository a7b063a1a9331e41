#!/usr/bin/python3
"""Peer for bench/startup.sh: torch.distributed's smallest job: N processes that each
init_process_group("gloo") from torch-style variables (env://), run one barrier and
destroy_process_group.

    /usr/bin/python3 bench/peers/torch_barrier.py -np 4

Starts the N workers itself with MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK and
WORLD_SIZE, as torchrun would (torchrun itself fails at start in Debian 12's
python3-torch 1.13 under Python 3.11: torch.distributed.elastic's Std.from_str raises
"'NoneType' object has no attribute 'get'"), and exits non-zero if any worker failed.
Needs Debian's python3-torch (/usr/bin/python3)."""
import argparse
import os
import socket
import subprocess
import sys


def worker():
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-np", type=int, default=2)
    p.add_argument("--worker", action="store_true")
    a = p.parse_args()
    if a.worker:
        worker()
        return 0
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(a.np):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(a.np), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(a.np))
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker"], env=env))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
