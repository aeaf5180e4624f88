"""DistributedDataParallel with backend="nvsh": DDP's gradient buckets are averaged by this
runtime's allreduce.

    nvsh run -n 2 -- python python/examples/ddp.py
    torchrun --nproc-per-node 2 python/examples/ddp.py     # NVSHMEM through torch's store

ddp_parity.py beside it trains the same model over NCCL as well and compares the parameters.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import nvshmem_rs as nv
import nvshmem_rs.distributed as nvd


def main():
    nvd.init_process_group()                       # backend "nvsh", rank and size of the job
    torch.cuda.set_device(nvd.runtime_call(nv.device))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)).cuda()
    ddp = DDP(model, device_ids=[torch.cuda.current_device()])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    torch.manual_seed(1 + rank)                    # each rank its own data
    for step in range(20):
        x, y = torch.randn(16, 32, device="cuda"), torch.randn(16, 4, device="cuda")
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()                            # buckets allreduced by nvshmem_rs
        opt.step()
        dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
        if rank == 0 and step % 5 == 0:
            print(f"step {step}: mean loss over {world} rank(s) {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
