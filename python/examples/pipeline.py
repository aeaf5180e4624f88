"""A two-stage pipeline over nvshmem_rs channels: PE 0 runs the first half of a model, PE 1
the second; activations go forward and their gradients back through two Channels, micro-batch
by micro-batch, all in stream order (no host waits between stages).

    nvsh run -n 2 -- python python/examples/pipeline.py      # any even number of PEs: pairs

Each step splits the batch into MICRO micro-batches. Stage 0 sends each micro-batch's
activation as soon as it is computed, then takes the gradients back in order and runs its
backward; stage 1 receives an activation, runs forward, loss and backward, and sends the
gradient of the activation back. With 2 slots per channel stage 0 runs at most 2 micro-batches
ahead (its third send waits on the GPU for a free slot). Both stages then step; the script
checks the parameters against one process training the whole model on the whole batch (equal
up to float32 summation order) and prints on PE 0. With more PEs, PEs 2k and 2k+1 form a
pipeline of their own over the same channels.
"""

import sys

import torch

import nvshmem_rs as nv

STEPS, BATCH, MICRO, LR, WIDTH = 10, 32, 4, 0.05, 64


def stages():
    torch.manual_seed(0)  # the same model on every PE
    first = torch.nn.Sequential(torch.nn.Linear(32, WIDTH), torch.nn.ReLU())
    second = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                                 torch.nn.Linear(WIDTH, 4))
    return first.cuda(), second.cuda()


def run(steps=STEPS):
    """The pipeline and its check on a runtime that is up (an even number of PEs);
    (ok, max |difference|)."""
    me, world = nv.rank(), nv.world_size()
    if world % 2:
        raise ValueError(f"the pipeline pairs PEs (stage 0, stage 1): {world} PEs is odd")
    stage, peer = me % 2, me ^ 1
    first, second = stages()
    ref = torch.nn.Sequential(*stages())
    torch.manual_seed(1)
    data = [(torch.randn(BATCH, 32), torch.randn(BATCH, 4)) for _ in range(steps)]
    rows = BATCH // MICRO
    # Collective: every PE makes both channels, in this order.
    fwd = nv.Channel(rows * WIDTH, torch.float32, slots=2)   # activations, stage 0 -> 1
    bwd = nv.Channel(rows * WIDTH, torch.float32, slots=2)   # their gradients, 1 -> 0
    mine = first if stage == 0 else second
    opt = torch.optim.SGD(mine.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    for x, y in data:
        opt.zero_grad()
        xs, ys = x.cuda().chunk(MICRO), y.cuda().chunk(MICRO)
        if stage == 0:
            acts = []
            for xm in xs:
                a = first(xm)
                fwd.send(a.detach().contiguous(), peer)
                acts.append(a)
            for a in acts:
                g = torch.empty_like(a)
                bwd.recv(g, peer)
                a.backward(g)
        else:
            keep = []
            for ym in ys:
                a = torch.empty(rows, WIDTH, device="cuda")
                fwd.recv(a, peer)
                a.requires_grad_()
                loss = torch.nn.functional.mse_loss(second(a), ym) / MICRO
                loss.backward()
                bwd.send(a.grad, peer)
                keep.append(a)  # alive until the stream has passed the send
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x.cuda()), y.cuda()).backward()
        ref_opt.step()
    torch.cuda.synchronize()
    fwd.check()
    bwd.check()
    got = torch.cat([p.detach().reshape(-1) for p in mine.parameters()])
    want_module = ref[0] if stage == 0 else ref[1]
    want = torch.cat([p.detach().reshape(-1) for p in want_module.parameters()])
    diff = (got - want).abs().max().item()
    ok = diff <= 1e-5 * max(1.0, want.abs().max().item())
    if me in (0, 1):
        print(f"PE {me} (stage {stage}): {steps} pipelined steps of {MICRO} micro-batches; max "
              f"|params - one process| = {diff:.3g} ({'ok' if ok else 'TOO LARGE'})")
    del fwd, bwd  # collective: every PE releases them here, in the same order
    return ok, diff


def main():
    nv.init()
    torch.cuda.set_device(nv.device())
    ok, _ = run()
    nv.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
