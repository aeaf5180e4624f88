"""The acceptance bench from Python: our allreduce on torch tensors against torch's own paths.

    nvsh run -n 2 -- python -m nvshmem_rs.bench                  # or -n 4
    torchrun --nproc-per-node 2 -m nvshmem_rs.bench              # NVSHMEM through torch's store
    python -m nvshmem_rs.bench --json out.json -d f32 -b 4K -e 1M

Candidates, each on the GPU's stream that torch has current (a stream of the bench's own):
  ours         nvshmem_rs.allreduce(t) in place on a symmetric tensor (nvshmem_rs.empty)
  ours-oop     nvshmem_rs.allreduce(t, output=o), both symmetric
  ours-staged  nvshmem_rs.allreduce(t) in place on an ordinary torch tensor (staged)
  nccl         torch.distributed.all_reduce(t) over the NCCL process group (in place)
  symm-1shot   torch.ops.symm_mem.one_shot_all_reduce_out(t, "sum", group, o) on a tensor of
               torch.distributed._symmetric_memory (rendezvoused once per size)
  symm-2shot   torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group), in place, the same

How (as nccl-tests and `nvsh bench` do): per size, `slots` buffers (as many as fit in --budget,
2 to 100); a timed group is one call per slot, so that no call finds the previous one's data.
Inputs are small integers, different on every PE and in every slot, so the sum is exact in f32
and bf16; before each group the in-place slots are refilled and the outputs poisoned (NaN), and
after it every slot is compared element-wise with the exact sum: every timed call is checked.
Groups are timed with CUDA events; each size reports the median of --reps groups, back to back
and with each call after a compute kernel (a 64 MiB fill; its own time subtracted), the slowest
PE's median. Then the Python call's host overhead at 4 KiB: a loop of calls of
nvshmem_rs.allreduce against the same number of calls of the Rust API made by a loop in Rust.
"""

import argparse
import json
import os
import statistics
import sys
import time

SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DTYPES = {"f32": "float32", "bf16": "bfloat16"}
OURS = ("ours", "ours-oop", "ours-staged")
THEIRS = ("nccl", "symm-1shot", "symm-2shot")
CANDIDATES = OURS + THEIRS
# The fill kernel between calls in the after-compute timing, as `nvsh bench`'s (COMPUTE_BYTES).
COMPUTE_BYTES = 64 << 20
MAX_SLOTS = 100


def parse_size(text):
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1] if text and text[-1] in SIZE_UNITS else ""
    number = text[: len(text) - len(unit)]
    try:
        return int(float(number) * SIZE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (4K, 1M, 256M)") from None


def size_label(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def arguments(argv):
    p = argparse.ArgumentParser(
        prog="python -m nvshmem_rs.bench",
        description="nvshmem_rs.allreduce on torch tensors against torch.distributed (NCCL) and "
                    "torch's SymmetricMemory one-shot and two-shot, every timed call checked.")
    p.add_argument("-b", "--begin", type=parse_size, default=4 << 10, help="smallest size (4K)")
    p.add_argument("-e", "--end", type=parse_size, default=256 << 20, help="largest size (256M)")
    p.add_argument("-f", "--factor", type=int, default=4, help="size step factor (4)")
    p.add_argument("-d", "--dtypes", default="f32,bf16", help="f32,bf16")
    p.add_argument("-n", "--reps", type=int, default=5, help="timed groups per size (5)")
    p.add_argument("-w", "--warmup", type=int, default=2, help="untimed groups first (2)")
    p.add_argument("--candidates", default=",".join(CANDIDATES),
                   help="which of " + ", ".join(CANDIDATES))
    p.add_argument("--budget", type=parse_size, default=256 << 20,
                   help="bytes of slots per buffer set (256M): slots = budget / size, 2..100")
    p.add_argument("--slot", type=parse_size, default=8 << 20,
                   help="receive-slot bytes of our workspaces (8M, as `nvsh bench allreduce`)")
    p.add_argument("--algo", default="auto", help="our algorithm (auto)")
    p.add_argument("--overhead-calls", type=int, default=200,
                   help="calls per timed loop of the overhead measurement (200)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-': stdout)")
    a = p.parse_args(argv)
    a.dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    for d in a.dtypes:
        if d not in DTYPES:
            p.error(f"dtype {d!r}: the bench runs {', '.join(DTYPES)}")
    a.candidates = [c.strip() for c in a.candidates.split(",") if c.strip()]
    for c in a.candidates:
        if c not in CANDIDATES:
            p.error(f"candidate {c!r}: expected some of {', '.join(CANDIDATES)}")
    if a.begin < 1 or a.end < a.begin or a.factor < 2:
        p.error("sizes: 1 <= --begin <= --end and --factor >= 2")
    return a


def sizes(a):
    out, n = [], a.begin
    while n <= a.end:
        out.append(n)
        n *= a.factor
    return out


class Bench:
    """The job's place (ranks, groups), the stream, and the timing and checking of groups."""

    def __init__(self, a):
        # Before NVSHMEM comes up: a heap that holds the largest slots of a candidate (the
        # out-of-place one holds two sets) beside the workspaces; NVSHMEM's own collectives
        # without NCCL, which torch has loaded too (ours never use NCCL).
        os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", str(max(4 << 30, 3 * a.budget + (2 << 30))))
        os.environ.setdefault("NVSHMEM_DISABLE_NCCL", "1")
        try:
            import torch
            import torch.distributed as dist
        except ImportError as err:
            raise SystemExit("nvshmem_rs.bench compares with PyTorch's paths and needs torch "
                             f"with CUDA in this Python ({sys.executable}): {err}") from None

        import nvshmem_rs as nv

        self.a, self.torch, self.dist, self.nv = a, torch, dist, nv
        self.launch = self._start()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        if (nv.rank(), nv.world_size()) != (self.rank, self.world):
            raise RuntimeError(f"NVSHMEM placed this process as PE {nv.rank()} of "
                               f"{nv.world_size()}, torch as rank {self.rank} of {self.world}")
        self.device = torch.device("cuda", nv.device())
        nv.configure(slot_bytes=a.slot)
        self.stream = torch.cuda.Stream(self.device)
        self.scratch = torch.empty(COMPUTE_BYTES, dtype=torch.uint8, device=self.device)
        self.group_name = dist.group.WORLD.group_name

    def _start(self):
        """NVSHMEM and the NCCL group. Under `nvsh run` (or alone) NVSHMEM from the launcher's
        environment, and NCCL over a FileStore named from the job; under torchrun NCCL from
        torch's env:// rendezvous and NVSHMEM through its store (init_with_store)."""
        torch, dist, nv = self.torch, self.dist, self.nv
        if "NVSH_RANK" in os.environ or "RANK" not in os.environ:
            nv.init()
            torch.cuda.set_device(nv.device())
            from nvshmem_rs.distributed import default_store

            dist.init_process_group("nccl", store=default_store(nv.world_size()),
                                    rank=nv.rank(), world_size=nv.world_size())
            return "nvsh run" if "NVSH_RANK" in os.environ else "one process"
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
        nv.init_with_store(dist.distributed_c10d._get_default_store())
        return "torchrun (NVSHMEM's unique ID through torch's store)"

    # --- agreement over PEs (through NCCL: it is the reference, not the measured path) -------

    def reduce(self, values, op):
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=op)
        return t.tolist()

    def all_ok(self, ok):
        return self.reduce([1.0 if ok else 0.0], self.dist.ReduceOp.MIN)[0] == 1.0

    def align(self):
        self.torch.cuda.synchronize(self.device)
        self.nv.barrier_all()

    # --- data -----------------------------------------------------------------------------

    def pattern(self, slots, n):
        """(slots, n) int64: (i + 3 s) % 13 per slot s and element i."""
        torch = self.torch
        i = torch.arange(n, dtype=torch.int64, device=self.device)
        s = torch.arange(slots, dtype=torch.int64, device=self.device).unsqueeze(1)
        return (i + 3 * s) % 13

    def fill(self, pool, rank=None):
        """PE `rank`'s inputs: pattern + rank + 1 (at most 13 + world: exact in bf16)."""
        rank = self.rank if rank is None else rank
        slots, n = pool.shape
        pool.copy_(self.pattern(slots, n) + (rank + 1))

    def poison(self, pool):
        pool.fill_(float("nan"))

    def wrong(self, pool):
        """Elements of `pool` (slots x n) that differ from the exact sum over PEs."""
        slots, n = pool.shape
        w = self.world
        exact = (self.pattern(slots, n) + 1) * w + w * (w - 1) // 2
        return int((pool.double() != exact.double()).sum().item())

    # --- timing ---------------------------------------------------------------------------

    def events(self):
        return (self.torch.cuda.Event(enable_timing=True),
                self.torch.cuda.Event(enable_timing=True))

    def group(self, call, iters, compute):
        """One timed group on the bench stream: (GPU us per call, host us per call)."""
        self.align()
        start, end = self.events()
        zero = self.scratch.zero_
        start.record()
        t0 = time.perf_counter()
        if compute:
            for j in range(iters):
                zero()
                call(j)
        else:
            for j in range(iters):
                call(j)
        host = time.perf_counter() - t0
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / iters, host * 1e6 / iters

    def compute_alone(self, iters):
        self.align()
        start, end = self.events()
        zero = self.scratch.zero_
        start.record()
        for _ in range(iters):
            zero()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / iters


class Candidate:
    """One way of running the allreduce at one size and dtype: its buffers, its call, and
    the buffer that holds the results to check."""

    def __init__(self, bench, name, dtype, slots, n):
        self.b, self.name, self.slots, self.n = bench, name, slots, n
        torch, nv = bench.torch, bench.nv
        dev = bench.device
        shape = (slots, n)
        self.inputs = self.outputs = None
        self.algo = None
        if name == "ours":
            self.inputs = nv.empty(shape, dtype)
        elif name == "ours-oop":
            self.inputs = nv.empty(shape, dtype)
            self.outputs = nv.empty(shape, dtype)
        elif name in ("ours-staged", "nccl"):
            self.inputs = torch.empty(shape, dtype=dtype, device=dev)
        else:
            import torch.distributed._symmetric_memory as sm

            # One allocation per size, rendezvoused once; the slots are rows of it.
            flat = sm.empty(slots * n, dtype=dtype, device=dev)
            sm.rendezvous(flat, bench.group_name)
            self.inputs = flat.view(shape)
            if name == "symm-1shot":
                self.outputs = torch.empty(shape, dtype=dtype, device=dev)
        self.call = self._call()

    def _call(self):
        b, nv, torch = self.b, self.b.nv, self.b.torch
        i, o, g = self.inputs, self.outputs, self.b.group_name
        algo = b.a.algo
        if self.name in ("ours", "ours-staged"):
            return lambda j: nv.allreduce(i[j], algo=algo)
        if self.name == "ours-oop":
            return lambda j: nv.allreduce(i[j], output=o[j], algo=algo)
        if self.name == "nccl":
            return lambda j: b.dist.all_reduce(i[j])
        ops = torch.ops.symm_mem
        if self.name == "symm-1shot":
            return lambda j: ops.one_shot_all_reduce_out(i[j], "sum", g, o[j])
        return lambda j: ops.two_shot_all_reduce_(i[j], "sum", g)

    def prepare(self):
        """Inputs refilled (in place, the previous group summed them), outputs poisoned."""
        self.b.fill(self.inputs)
        if self.outputs is not None:
            self.b.poison(self.outputs)

    def result(self):
        return self.inputs if self.outputs is None else self.outputs

    def first(self):
        """The first call (makes our workspace), and our algorithm's name."""
        out = self.call(0)
        if self.name.startswith("ours"):
            self.algo = out


def run_size(bench, name, dtype, nbytes, es):
    """Times and checks `name` at one size: a record, or one with `error` where it cannot
    run on some PE (every PE then skips it alike)."""
    a, torch = bench.a, bench.torch
    n = nbytes // es
    slots = max(2, min(MAX_SLOTS, a.budget // nbytes))
    rec = {"candidate": name, "bytes": nbytes, "slots": slots}
    cand, error = None, None
    try:
        with torch.cuda.stream(bench.stream):
            cand = Candidate(bench, name, dtype, slots, n)
            cand.prepare()
            cand.first()
            torch.cuda.synchronize(bench.device)
    except Exception as err:  # noqa: BLE001  (reported as n/a, on every PE alike)
        error = f"{type(err).__name__}: {err}".splitlines()[0][:160]
    if not bench.all_ok(error is None):
        rec["error"] = error or "failed on another PE"
        del cand
        torch.cuda.synchronize(bench.device)
        return rec
    rec["algo"] = cand.algo
    wrong = checked = 0
    times = {False: [], True: []}
    hosts, alone = [], []
    with torch.cuda.stream(bench.stream):
        for rep in range(a.warmup):
            cand.prepare()
            bench.group(cand.call, slots, False)
        for compute in (False, True):
            for rep in range(a.reps):
                cand.prepare()
                us, host = bench.group(cand.call, slots, compute)
                times[compute].append(us)
                if not compute:
                    hosts.append(host)
                wrong += bench.wrong(cand.result())
                checked += slots
                if compute:
                    alone.append(bench.compute_alone(slots))
    del cand
    torch.cuda.synchronize(bench.device)
    us = statistics.median(times[False])
    after = max(0.0, statistics.median(times[True]) - statistics.median(alone))
    # The slowest PE's medians; every PE's wrong elements and checked calls.
    us, after, host = bench.reduce([us, after, statistics.median(hosts)], bench.dist.ReduceOp.MAX)
    wrong, checked = bench.reduce([wrong, checked], bench.dist.ReduceOp.SUM)
    rec.update(us=us, us_after_compute=after, host_us=host, wrong=int(wrong),
               checked_calls=int(checked))
    return rec


def overhead(bench):
    """Host time per call at 4 KiB (f32, in place, symmetric): the Python API
    (nvshmem_rs.allreduce), the extension's function without the Python wrapper, and the Rust
    API called by a loop in Rust. Loops short enough that the GPU's queue never fills, so the
    host's time is what is measured; the median of --reps loops, the slowest PE's."""
    a, torch, nv = bench.a, bench.torch, bench.nv
    from nvshmem_rs import _native

    calls = a.overhead_calls
    x = nv.zeros(1024, torch.float32)  # zeros: a sum of any number of calls stays exact
    res = {"python": [], "extension": [], "rust": []}
    with torch.cuda.stream(bench.stream):
        raw = bench.stream.cuda_stream
        allreduce, native = nv.allreduce, _native.allreduce
        allreduce(x, algo=a.algo)
        for rep in range(a.warmup + a.reps):
            bench.align()
            t0 = time.perf_counter()
            for _ in range(calls):
                allreduce(x, algo=a.algo)
            py = time.perf_counter() - t0
            bench.align()
            t0 = time.perf_counter()
            for _ in range(calls):
                native(x, None, "sum", a.algo, raw)
            ext = time.perf_counter() - t0
            bench.align()
            rust = _native._allreduce_host_loop(x, calls, "sum", a.algo, raw)
            bench.align()
            if rep >= a.warmup:
                res["python"].append(py * 1e6 / calls)
                res["extension"].append(ext * 1e6 / calls)
                res["rust"].append(rust * 1e6 / calls)
    wrong = int((x != 0).sum().item())
    med = bench.reduce([statistics.median(res[k]) for k in ("python", "extension", "rust")],
                       bench.dist.ReduceOp.MAX)
    wrong = int(bench.reduce([wrong], bench.dist.ReduceOp.SUM)[0])
    out = dict(zip(("python_us", "extension_us", "rust_us"), med))
    out.update(calls=calls, overhead_us=med[0] - med[2], wrong=wrong)
    return out


def cell(rec, key="us"):
    if rec is None:
        return "-"
    if "error" in rec:
        return "n/a"
    v = rec[key]
    return f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def ratio(records, key):
    """Ours over the fastest of NCCL and SymmetricMemory that ran with every output right."""
    theirs = [r[key] for r in records if r["candidate"] in THEIRS and "error" not in r
              and r["wrong"] == 0]
    ours = [r for r in records if r["candidate"] == "ours" and "error" not in r]
    if not theirs or not ours:
        return None
    best = min(theirs)
    return ours[0][key] / best if best > 0 else None


def describe(bench):
    """The run's facts for the report's header."""
    torch = bench.torch
    return {"world_size": bench.world, "launch": bench.launch,
            "gpu": torch.cuda.get_device_name(bench.device), "torch": torch.__version__,
            "nccl": ".".join(map(str, v)) if isinstance(v := torch.cuda.nccl.version(), tuple)
            else str(v),
            "nvshmem": bench.nv.nvshmem_version()}


def report(a, info, results, over, out=sys.stdout):
    """Prints the tables and the acceptance lines; True when every checked output was right
    (the exit status: a slower size is a finding, a wrong output a failure)."""
    p = lambda *x: print(*x, file=out)  # noqa: E731
    p(f"# nvshmem_rs.bench: allreduce (sum), {info['world_size']} PE(s), {info['launch']}; "
      f"{info['gpu']}; torch {info['torch']}, NCCL {info['nccl']}, NVSHMEM {info['nvshmem']}")
    p(f"# our workspace slots {size_label(a.slot)}, algo {a.algo}; {a.reps} timed groups per "
      f"size after {a.warmup} warm-up groups; a group = one call per slot (slots = "
      f"{size_label(a.budget)} / size, 2..{MAX_SLOTS})")
    p("# checked: every output of every timed call (warm-up excluded), element by element "
      "against the exact sum over PEs of inputs that are small integers (exact in f32 and "
      "bf16), inputs refilled and outputs poisoned with NaN before each group")
    total = sum(r.get("checked_calls", 0) for r in results)
    bad = sum(r.get("wrong", 0) for r in results)
    p(f"# result: {bad} wrong element(s) in {total} checked call(s) over all PEs")
    p("# cells: median us per call, back to back (after a 64 MiB fill kernel, its time "
      "subtracted); the slowest PE's. ratio: ours (in place) / the fastest of nccl, "
      "symm-1shot, symm-2shot; below 1.00 ours is faster")
    cands = [c for c in CANDIDATES if c in a.candidates]
    losses = []
    for dt in a.dtypes:
        p("")
        p(f"## {dt}")
        p("| size | " + " | ".join(cands) + " | ours picks | ratio | after compute |")
        p("|---" * (len(cands) + 4) + "|")
        for nbytes in sizes(a):
            recs = [r for r in results if r["dtype"] == dt and r["bytes"] == nbytes]
            by = {r["candidate"]: r for r in recs}
            cells = [f"{cell(by.get(c))} ({cell(by.get(c), 'us_after_compute')})"
                     if by.get(c) and "error" not in by[c] else cell(by.get(c)) for c in cands]
            r1, r2 = ratio(recs, "us"), ratio(recs, "us_after_compute")
            for r, what in ((r1, "back to back"), (r2, "after compute")):
                if r is None or r >= 1.0:
                    losses.append(f"{size_label(nbytes)} {dt} {what}"
                                  + ("" if r is None else f" ({r:.2f})"))
            algo = by.get("ours", {}).get("algo") or "-"
            p(f"| {size_label(nbytes)} | " + " | ".join(cells) + f" | {algo} | "
              + ("-" if r1 is None else f"{r1:.2f}") + " | "
              + ("-" if r2 is None else f"{r2:.2f}") + " |")
        for r in [r for r in results if r["dtype"] == dt and "error" in r]:
            p(f"- n/a: {r['candidate']} at {size_label(r['bytes'])}: {r['error']}")
    p("")
    if over is not None:
        p(f"## Python call overhead (4K f32 in place, symmetric; {over['calls']} calls a loop, "
          "host time per call, median of the loops, the slowest PE)")
        p(f"- nvshmem_rs.allreduce (Python API): {over['python_us']:.2f} us")
        p(f"- nvshmem_rs._native.allreduce (extension, no wrapper): {over['extension_us']:.2f} us")
        p(f"- Allreduce::run_in_place in a Rust loop: {over['rust_us']:.2f} us")
        p(f"- overhead of the Python call over the Rust call: {over['overhead_us']:.2f} us "
          f"({'within' if over['overhead_us'] <= 2.0 else 'OVER'} the 2 us target); "
          f"wrong elements after the loops: {over['wrong']}")
    p(f"## acceptance: ours faster than every other path at every size and dtype, both "
      f"timings: {'yes' if not losses else 'no'}"
      + ("" if not losses else "; not at: " + ", ".join(losses)))
    if over is not None:
        p(f"## acceptance: Python call overhead <= 2 us at 4 KiB: "
          f"{'yes' if over['overhead_us'] <= 2.0 else 'no'} ({over['overhead_us']:.2f} us)")
    p(f"## acceptance: every checked output right: {'yes' if bad == 0 else 'no'}")
    return bad == 0 and (over is None or over["wrong"] == 0)


def main(argv=None):
    a = arguments(sys.argv[1:] if argv is None else argv)
    bench = Bench(a)
    torch = bench.torch
    results = []
    for dt in a.dtypes:
        dtype = getattr(torch, DTYPES[dt])
        es = torch.tensor([], dtype=dtype).element_size()
        for nbytes in sizes(a):
            for name in a.candidates:
                rec = run_size(bench, name, dtype, nbytes, es)
                rec["dtype"] = dt
                results.append(rec)
                if bench.rank == 0 and os.environ.get("NVSHMEM_RS_BENCH_PROGRESS"):
                    print("progress:", json.dumps(rec), file=sys.stderr, flush=True)
    over = overhead(bench) if a.overhead_calls > 0 else None
    ok = True
    if bench.rank == 0:
        info = describe(bench)
        ok = report(a, info, results, over)
        if a.json:
            doc = dict(info, slot_bytes=a.slot, reps=a.reps, results=results, overhead=over)
            if a.json == "-":
                json.dump(doc, sys.stdout, indent=1)
                print()
            else:
                with open(a.json, "w") as f:
                    json.dump(doc, f, indent=1)
    torch.cuda.synchronize(bench.device)
    bench.dist.destroy_process_group()
    bench.nv.finalize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
