"""A PyTorch program as torchrun would start it, for the spmdrun tests.

init_process_group("gloo") reads env:// (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), and PyTorch's rank 0 then binds MASTER_PORT for its own
TCPStore: this works under spmdrun only if nothing else holds that port.
Each rank contributes rank + 1, so every element of the sum is n(n+1)/2.
One line per rank:

  TORCH rank=R world=N master=ADDR:PORT agent_store=HOST:PORT sum=S expected=E OK|WRONG
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1000,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    ok = bool(torch.all(t == expected))
    master = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    agent_store = os.environ.get("SPMD_AGENT_STORE", "<unset>")
    print(f"TORCH rank={rank} world={world} master={master} agent_store={agent_store} "
          f"sum={t[0].item():g} expected={expected:g} {'OK' if ok else 'WRONG'}", flush=True)
    dist.barrier()  # rank 0's store serves until every rank is done with it
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
