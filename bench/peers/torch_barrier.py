#!/usr/bin/python3
"""Peer for bench/startup.sh: torch.distributed's smallest job, run under torchrun:
init_process_group("gloo") from torchrun's variables, one barrier, destroy_process_group.
Needs Debian's python3-torch (/usr/bin/python3)."""
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
