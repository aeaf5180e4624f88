"""DDP over backend "nvsh" against DDP over NCCL: the same model, init and data, 50 steps each,
then the parameters compared.

    nvsh run -n 2 -- python python/examples/ddp_parity.py       # or -n 4
    torchrun --nproc-per-node 2 python/examples/ddp_parity.py   # NVSHMEM through torch's store

One run holds both process groups: the default group is "nvsh", and an NCCL group over the same
ranks (dist.new_group(backend="nccl")) carries the second model's gradients. Both models start
from one state_dict and see the same batches (each rank its slice), with SGD and momentum.

What to expect: DDP pre-divides each gradient by the world size and sums the buckets over
ranks. Over 2 ranks every sum is fl(a + b), which no algorithm can order differently, so the
parameters come out bit for bit equal. Over more ranks NCCL (a ring or tree) and ours (one-shot,
two-shot: in rank order) add the same terms in other orders, and float32 rounding differs in
the last bits; those differences then propagate through later steps. The bound checked is
that the two runs differ by less than NCCL's own run differs from a single-process run of the
same steps on the whole batch (the same arithmetic with yet another summation order: the
batch mean inside one GEMM instead of a sum over ranks), with a floor of a few float32 ulps.
The float64 run beside them shows that neither is closer to the exact result than the other.

Exit status 0 when the check holds, 1 when not; rank 0 prints the figures.
"""

import os
import sys

os.environ.setdefault("NVSHMEM_DISABLE_NCCL", "1")  # NVSHMEM's own collectives; torch has NCCL

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import nvshmem_rs as nv
import nvshmem_rs.distributed as nvd

STEPS, BATCH, SEED, LR = 50, 8, 1234, 0.05


class Model(torch.nn.Module):
    """A small MLP: three Linear layers, so that DDP's buckets carry several tensors."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, 64), torch.nn.ReLU(),
            torch.nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


def problem(world, steps=STEPS, batch=BATCH, seed=SEED):
    """The initial state and the batches (world x batch rows each), the same on every rank."""
    torch.manual_seed(seed)
    init = Model().state_dict()
    g = torch.Generator().manual_seed(seed + 1)
    data = [(torch.randn(world * batch, 32, generator=g),
             torch.randn(world * batch, 4, generator=g)) for _ in range(steps)]
    return init, data


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_ddp(init, data, group, rank, batch=BATCH, lr=LR, bucket_cap_mb=0.01):
    """DDP over `group` from `init`; this rank takes its slice of each batch. Small buckets,
    so that each step is several allreduces, as in a real model."""
    dev = torch.device("cuda", torch.cuda.current_device())
    model = Model().to(dev)
    model.load_state_dict(init)
    ddp = DDP(model, device_ids=[dev.index], process_group=group, bucket_cap_mb=bucket_cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    mine = slice(rank * batch, (rank + 1) * batch)
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(ddp(x[mine].to(dev)), y[mine].to(dev)).backward()
        opt.step()
    torch.cuda.synchronize()
    return flat(model)


def train_alone(init, data, dtype, lr=LR):
    """One process on the whole batch: the gradient of the mean over every rank's rows."""
    dev = torch.device("cuda", torch.cuda.current_device())
    model = Model().to(dev)
    model.load_state_dict(init)
    model = model.to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x.to(dev, dtype)), y.to(dev, dtype)).backward()
        opt.step()
    torch.cuda.synchronize()
    return flat(model)


def same_on_every_rank(t, group):
    """Whether every rank holds `t` bit for bit (gathered over `group`)."""
    world = dist.get_world_size(group)
    every = torch.empty(world * t.numel(), dtype=t.dtype, device=t.device)
    dist.all_gather_into_tensor(every, t, group=group)
    every = every.view(world, -1)
    return all(torch.equal(every[p], every[0]) for p in range(world))


def compare(steps=STEPS, nccl_group=None):
    """Both trainings and the comparison; a dict of figures. Needs the default group to be
    "nvsh" and `nccl_group` an NCCL group over the same ranks."""
    rank, world = dist.get_rank(), dist.get_world_size()
    init, data = problem(world, steps)
    ours = train_ddp(init, data, None, rank)              # the default group: nvsh
    theirs = train_ddp(init, data, nccl_group, rank)
    alone32 = train_alone(init, data, torch.float32)
    alone64 = train_alone(init, data, torch.float64)
    scale = alone64.abs().max().item()
    # A floor for the bound: a few float32 ulps of the largest parameter.
    floor = 8 * torch.finfo(torch.float32).eps * scale
    diff = (ours - theirs).abs().max().item()
    bound = max((theirs - alone32).abs().max().item(), floor)
    return {
        "world_size": world, "steps": steps, "parameters": ours.numel(),
        "equal": bool(torch.equal(ours, theirs)),
        "max_abs_nvsh_vs_nccl": diff,
        "max_abs_nccl_vs_single_f32": (theirs - alone32).abs().max().item(),
        "max_abs_nvsh_vs_f64": (ours.double() - alone64).abs().max().item(),
        "max_abs_nccl_vs_f64": (theirs.double() - alone64).abs().max().item(),
        "max_abs_parameter": scale,
        "bound": bound,
        "within_bound": diff <= bound,
        "nvsh_same_on_every_rank": same_on_every_rank(ours, None),
        "nccl_same_on_every_rank": same_on_every_rank(theirs, nccl_group),
    }


def start():
    """The default group "nvsh" (under `nvsh run`: NVSHMEM from its environment; under
    torchrun: through torch's store) and an NCCL group over the same ranks."""
    nvd.init_process_group()
    torch.cuda.set_device(nvd.runtime_call(nv.device))
    return dist.new_group(backend="nccl")


def main():
    nccl = start()
    r = compare(nccl_group=nccl)
    ok = r["within_bound"] and r["nvsh_same_on_every_rank"] and r["nccl_same_on_every_rank"]
    if r["world_size"] == 2:
        ok = ok and r["equal"]
    if dist.get_rank() == 0:
        print(f"DDP parity, {r['world_size']} rank(s), {r['steps']} steps, "
              f"{r['parameters']} parameters (SGD, momentum 0.9)")
        print(f"  nvsh vs nccl: {'bit for bit equal' if r['equal'] else 'not equal'}, max |diff| "
              f"{r['max_abs_nvsh_vs_nccl']:.3g}")
        print(f"  bound: {r['bound']:.3g} (nccl vs one process on the whole batch, float32: "
              f"{r['max_abs_nccl_vs_single_f32']:.3g}; floor 8 ulps of "
              f"{r['max_abs_parameter']:.3g})")
        print(f"  vs float64 single process: nvsh {r['max_abs_nvsh_vs_f64']:.3g}, nccl "
              f"{r['max_abs_nccl_vs_f64']:.3g}")
        print(f"  same parameters on every rank: nvsh {r['nvsh_same_on_every_rank']}, nccl "
              f"{r['nccl_same_on_every_rank']}")
        print("PASS" if ok else "FAIL")
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
