"""A data-parallel training step whose gradients are averaged by nvshmem_rs.allreduce instead
of NCCL's: every PE holds the whole model, takes its slice of each batch, and after backward
the gradients, packed into one symmetric tensor, are averaged over PEs in one call.

    nvsh run -n 2 -- python python/examples/data_parallel.py

The gradients live in a symmetric tensor (nvshmem_rs.zeros): the parameters' .grad are views
into it, so backward writes them there and the allreduce moves them without a copy. At the end
every PE holds the same parameters, which the script checks against a run of one process on
the whole batch (equal up to float32 summation order) and prints on PE 0.
"""

import sys

import torch

import nvshmem_rs as nv

STEPS, BATCH, LR = 20, 16, 0.05


def model():
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def bind_grads(net):
    """One symmetric tensor holding every gradient; each parameter's .grad a view of it."""
    params = list(net.parameters())
    flat = nv.zeros(sum(p.numel() for p in params), torch.float32)
    at = 0
    for p in params:
        p.grad = flat[at:at + p.numel()].view_as(p)
        at += p.numel()
    return flat


def run(steps=STEPS):
    """The training and its check, on a runtime that is up; (ok, max |difference|)."""
    me, world = nv.rank(), nv.world_size()
    torch.manual_seed(0)  # the same model and data on every PE
    net, ref = model().cuda(), model().cuda()
    ref.load_state_dict(net.state_dict())
    data = [(torch.randn(world * BATCH, 32), torch.randn(world * BATCH, 4)) for _ in range(steps)]
    flat = bind_grads(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    mine = slice(me * BATCH, (me + 1) * BATCH)
    for x, y in data:
        flat.zero_()  # in place: .grad stay views of the symmetric tensor
        torch.nn.functional.mse_loss(net(x[mine].cuda()), y[mine].cuda()).backward()
        nv.allreduce(flat, op="avg")  # on torch's current stream, no host wait
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x.cuda()), y.cuda()).backward()
        ref_opt.step()
    torch.cuda.synchronize()
    nv.check()
    got = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
    diff = (got - want).abs().max().item()
    ok = diff <= 1e-5 * max(1.0, want.abs().max().item())
    if me == 0:
        print(f"{steps} data-parallel steps on {world} PE(s): max |params - one process on the "
              f"whole batch| = {diff:.3g} ({'ok' if ok else 'TOO LARGE'})")
    return ok, diff


def main():
    nv.init()
    torch.cuda.set_device(nv.device())
    ok, _ = run()
    nv.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
