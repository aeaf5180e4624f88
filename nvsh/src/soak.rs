//! `nvsh soak`: a long run of mixed allreduces (random sizes, types, ops, algorithms, offsets,
//! in place or not), calls of the rest of the collective family (broadcast, allgather,
//! alltoall, reduce-scatter, reduce: random sizes and roots; alltoallv and allgatherv with
//! skewed counts, a grouped send/recv ring) and channel transfers, every result checked
//! against a CPU reference, with
//! host and device memory watched for growth. With `die` it is also the fault-injection test:
//! one PE kills itself (SIGKILL) at a chosen iteration and the others must end with a timeout
//! that names it.
//!
//! Every PE draws the same sequence of decisions from the same seed, so the collective calls
//! match; data depends on (PE, iteration, index) and is small integers, so every reduction is
//! exact in every type (f16 and bf16 included) and the reference is plain arithmetic.

use crate::bench::kind::in_family;
use crate::error::{ToolError, ToolResult};
use cudarc::driver::CudaSlice;
use nvshmem::tools::progress_label;
use nvshmem::tools::HostValue;
use nvshmem::tools::{AnyCall, AnyParts, Expected, Peers, Source, TableCollective};
use nvshmem::Channel;
use nvshmem::Nvshmem;
use nvshmem::Result;
use nvshmem::SymmetricBuffer;
use nvshmem::{Allreduce, AllreduceAlgo};
use nvshmem::{Placement, Shape, COLLECTIVES};
use nvshmem::{ReduceOp, Reducible};
use std::time::{Duration, Instant};

/// What the soak exercises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Allreduce,
    Channel,
    /// The table's other collectives that move data ([`in_family`]).
    Family,
    Mixed,
}

impl Workload {
    pub fn parse(s: &str) -> std::result::Result<Workload, String> {
        match s {
            "allreduce" => Ok(Workload::Allreduce),
            "channel" => Ok(Workload::Channel),
            "family" => Ok(Workload::Family),
            "mixed" => Ok(Workload::Mixed),
            _ => Err(format!(
                "{s:?}: expected allreduce, channel, family or mixed"
            )),
        }
    }
}

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub duration: Duration,
    pub workload: Workload,
    pub seed: u64,
    /// Largest allreduce, in bytes.
    pub max_bytes: usize,
    /// Largest channel message, in u32 elements.
    pub max_message: usize,
    /// Fault injection: PE `.0` kills itself with SIGKILL at iteration `.1`.
    pub die: Option<(i32, u64)>,
    /// Progress lines from PE 0 this often.
    pub report_every: Duration,
}

impl Default for SoakOptions {
    fn default() -> Self {
        SoakOptions {
            duration: Duration::from_secs(60),
            workload: Workload::Mixed,
            seed: 1,
            max_bytes: 16 << 20,
            max_message: 1 << 20,
            die: None,
            report_every: Duration::from_secs(30),
        }
    }
}

/// What a soak did and saw, on one PE.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    pub iterations: u64,
    pub allreduces: u64,
    /// Calls of the family round's collectives (`in_family`).
    pub family_calls: u64,
    pub messages: u64,
    pub bytes_reduced: u64,
    pub bytes_sent: u64,
    pub mismatches: u64,
    /// The first mismatches, described.
    pub first_mismatches: Vec<String>,
    /// Host resident set (KiB) and device memory in use (bytes) after warm-up and at the end.
    pub rss_kib: (u64, u64),
    pub device_used: (u64, u64),
    /// Symmetric buffers alive at the end (the soak's own).
    pub live_buffers: usize,
    pub elapsed: Duration,
}

impl SoakReport {
    /// Counts a wrong result; the first few are kept, described.
    fn mismatch(&mut self, describe: impl FnOnce() -> String) {
        self.mismatches += 1;
        if self.first_mismatches.len() < 8 {
            self.first_mismatches.push(describe());
        }
    }

    pub fn rss_growth_kib(&self) -> i64 {
        self.rss_kib.1 as i64 - self.rss_kib.0 as i64
    }

    pub fn device_growth(&self) -> i64 {
        self.device_used.1 as i64 - self.device_used.0 as i64
    }
}

/// splitmix64: a small, well-mixed generator; the same on every PE for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Log-uniform in 1..=max: small sizes as often as large ones.
    pub fn log_uniform(&mut self, max: usize) -> usize {
        let bits = usize::BITS - max.leading_zeros();
        let hi = 1usize << self.below(bits as u64);
        (hi + self.below(hi as u64) as usize).clamp(1, max)
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Element types of the soak: conversion to and from f64 (exact for the values used).
pub trait SoakValue: Reducible + HostValue {
    const SIGNED: bool;
    const FLOAT: bool;
}

macro_rules! soak_value {
    ($($t:ty: $signed:expr, $float:expr);*) => {$(
        impl SoakValue for $t {
            const SIGNED: bool = $signed;
            const FLOAT: bool = $float;
        }
    )*};
}
soak_value!(
    i32: true, false;
    i64: true, false;
    u32: false, false;
    u64: false, false;
    f32: true, true;
    f64: true, true;
    half::f16: true, true;
    half::bf16: true, true
);

/// Input value of `pe` at `index` in call `salt`: small integers (1 or 2 for products), so
/// sums, products, minima and maxima of up to 8 PEs are exact in every type.
pub fn input_value(pe: usize, index: usize, salt: u64, op: ReduceOp, signed: bool) -> f64 {
    let h = mix(salt ^ (pe as u64) << 48 ^ index as u64);
    match op {
        ReduceOp::Prod => 1.0 + (h % 2) as f64,
        _ if signed => (h % 7) as f64 - 3.0,
        _ => (h % 7) as f64,
    }
}

/// The reference result at `index` over `n` PEs.
pub fn expected_value<T: SoakValue>(n: usize, index: usize, salt: u64, op: ReduceOp) -> T {
    let vals = (0..n).map(|pe| input_value(pe, index, salt, op, T::SIGNED));
    let v = match op {
        ReduceOp::Sum => vals.sum(),
        ReduceOp::Prod => vals.product(),
        ReduceOp::Min => vals.fold(f64::INFINITY, f64::min),
        ReduceOp::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        ReduceOp::Avg => {
            let sum: f64 = vals.sum();
            if T::FLOAT {
                sum / n as f64
            } else {
                // Integer average truncates toward zero.
                (sum / n as f64).trunc()
            }
        }
    };
    T::from_f64(v)
}

/// Whether `got` matches `want`: exactly, except float averages over PE counts that are not
/// powers of two (the device divides in the accumulation type, then rounds once more).
fn matches<T: SoakValue>(got: T, want: T, op: ReduceOp, n: usize) -> bool {
    if got == want {
        return true;
    }
    if T::FLOAT && op == ReduceOp::Avg && !n.is_power_of_two() {
        let (g, w) = (got.to_f64(), want.to_f64());
        return (g - w).abs() <= 1e-2 * w.abs().max(1.0);
    }
    false
}

/// Host resident set in KiB (0 where /proc is unavailable).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn device_used() -> Result<u64> {
    let (free, total) = cudarc::driver::result::mem_get_info()?;
    Ok((total - free) as u64)
}

/// Per-type symmetric input and output buffers of `max_bytes` (+ room for an offset).
struct Buffers<'nv, T: SoakValue> {
    input: SymmetricBuffer<'nv, T>,
    output: SymmetricBuffer<'nv, T>,
}

impl<'nv, T: SoakValue> Buffers<'nv, T> {
    fn new(nv: &'nv Nvshmem, max_bytes: usize) -> Result<Self> {
        let len = max_bytes / std::mem::size_of::<T>() + OFFSET_ROOM;
        Ok(Buffers {
            input: nv.alloc::<T>(len)?,
            output: nv.alloc::<T>(len)?,
        })
    }
}

/// Displacements of parts of `counts` laid out back to back.
fn back_to_back(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            *at += c;
            Some(*at - c)
        })
        .collect()
}

/// Largest element offset at which a call's data starts (unaligned starts are exercised).
const OFFSET_ROOM: usize = 16;

/// The family's workspaces, one per row of [`in_family`] in the table's order (one each: their
/// step protocols are their own), called through the table.
struct Family<'nv> {
    rows: Vec<Box<dyn TableCollective<'nv> + 'nv>>,
}

impl<'nv> Family<'nv> {
    /// Collective over the world.
    fn new(nv: &'nv Nvshmem) -> Result<Self> {
        let rows = COLLECTIVES
            .iter()
            .filter(|r| in_family(r))
            .map(|r| r.collective.world(nv, 1 << 20))
            .collect::<Result<Vec<_>>>()?;
        Ok(Family { rows })
    }
}

struct Soak<'nv> {
    nv: &'nv Nvshmem,
    opts: SoakOptions,
    ar: Allreduce<'nv>,
    f32s: Buffers<'nv, f32>,
    f64s: Buffers<'nv, f64>,
    f16s: Buffers<'nv, half::f16>,
    bf16s: Buffers<'nv, half::bf16>,
    i32s: Buffers<'nv, i32>,
    i64s: Buffers<'nv, i64>,
    u32s: Buffers<'nv, u32>,
    u64s: Buffers<'nv, u64>,
    flag: SymmetricBuffer<'nv, u32>,
    family: Family<'nv>,
    channel: Channel<'nv, u32>,
    send_buf: CudaSlice<u32>,
    recv_buf: CudaSlice<u32>,
    report: SoakReport,
}

/// Runs the soak on this PE (every PE of the job calls it with the same options).
pub fn run(nv: &Nvshmem, opts: &SoakOptions) -> Result<SoakReport> {
    if let Some((pe, _)) = opts.die {
        nv.check_pe(pe)?;
    }
    let max_bytes = opts.max_bytes.max(64);
    let stream = nv.stream();
    let mut soak = Soak {
        nv,
        opts: opts.clone(),
        ar: nv.allreduce_workspace(1 << 20)?,
        f32s: Buffers::new(nv, max_bytes)?,
        f64s: Buffers::new(nv, max_bytes)?,
        f16s: Buffers::new(nv, max_bytes)?,
        bf16s: Buffers::new(nv, max_bytes)?,
        i32s: Buffers::new(nv, max_bytes)?,
        i64s: Buffers::new(nv, max_bytes)?,
        u32s: Buffers::new(nv, max_bytes)?,
        u64s: Buffers::new(nv, max_bytes)?,
        flag: nv.alloc::<u32>(1)?,
        family: Family::new(nv)?,
        channel: Channel::new(nv, 4, opts.max_message.max(1))?,
        send_buf: stream.alloc_zeros::<u32>(opts.max_message.max(1) * 4)?,
        recv_buf: stream.alloc_zeros::<u32>(opts.max_message.max(1) * 4)?,
        report: SoakReport::default(),
    };
    soak.run()
}

impl Soak<'_> {
    fn run(&mut self) -> Result<SoakReport> {
        let me = self.nv.my_pe();
        let start = Instant::now();
        let mut last_report = start;
        let warmup = (self.opts.duration / 20).min(Duration::from_secs(10));
        let mut baseline: Option<(u64, u64)> = None;
        let mut iter = 0u64;
        loop {
            if let Some((pe, at)) = self.opts.die {
                if pe == me && iter == at {
                    eprintln!(
                        "PE {me}: soak: fault injection: killing this process (SIGKILL) at \
                         iteration {iter}"
                    );
                    // SAFETY: plain syscalls on this process.
                    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                }
            }
            let mut rng = Rng::new(self.opts.seed ^ mix(iter.wrapping_add(1)));
            // Mixed: 4 in 8 allreduces, 2 family calls, 2 channel rounds.
            let round = match self.opts.workload {
                Workload::Allreduce => 0,
                Workload::Channel => 2,
                Workload::Family => 1,
                Workload::Mixed => [0, 0, 0, 0, 1, 1, 2, 2][rng.below(8) as usize],
            };
            match round {
                2 if self.nv.n_pes() > 1 => self.channel_round(&mut rng, iter)?,
                1 => self.family_round(&mut rng, iter)?,
                _ => self.allreduce_round(&mut rng, iter)?,
            }
            if iter % 64 == 63 {
                // Heap churn: a collective allocation and free of a random size.
                let len = rng.log_uniform(1 << 20);
                drop(self.nv.alloc::<u8>(len)?);
            }
            iter += 1;
            self.report.iterations = iter;
            let elapsed = start.elapsed();
            if baseline.is_none() && elapsed >= warmup {
                baseline = Some((rss_kib(), device_used()?));
            }
            if me == 0 && last_report.elapsed() >= self.opts.report_every {
                last_report = Instant::now();
                let (done, total) = (elapsed.as_secs_f64(), self.opts.duration.as_secs_f64());
                println!(
                    "soak: {:>6.1} s of {total:.0} s ({})  iterations {}  allreduces {}  \
                     family calls {}  messages {}  mismatches {}  host rss {} KiB  \
                     device used {} MiB",
                    done,
                    progress_label(done / total.max(1e-9), Some(total - done)),
                    iter,
                    self.report.allreduces,
                    self.report.family_calls,
                    self.report.messages,
                    self.report.mismatches,
                    rss_kib(),
                    device_used()? >> 20
                );
            }
            // Every PE stops at the same iteration: the max over PEs of "my time is up".
            if iter % 16 == 0 && self.all_done(elapsed >= self.opts.duration)? {
                break;
            }
        }
        self.nv.barrier_all()?;
        let (rss0, dev0) = baseline.unwrap_or((rss_kib(), device_used()?));
        self.report.rss_kib = (rss0, rss_kib());
        self.report.device_used = (dev0, device_used()?);
        self.report.live_buffers = nvshmem::tools::live_buffers().len();
        self.report.elapsed = start.elapsed();
        Ok(self.report.clone())
    }

    fn all_done(&mut self, mine: bool) -> Result<bool> {
        let stream = self.nv.stream().clone();
        self.flag.copy_from_host(&[mine as u32])?;
        self.ar
            .run_in_place(&self.flag, ReduceOp::Max, AllreduceAlgo::Auto, &stream)?;
        self.ar.sync(&stream)?;
        Ok(self.flag.to_vec()?[0] == 1)
    }

    fn allreduce_round(&mut self, rng: &mut Rng, iter: u64) -> Result<()> {
        macro_rules! by_type {
            ($($k:expr => $field:ident),*) => {
                match rng.below(8) {
                    $($k => {
                        let (opts_max, ar, report) = (self.opts.max_bytes, &mut self.ar, &mut self.report);
                        one_allreduce(self.nv, ar, &self.$field, report, rng, iter, opts_max)
                    })*
                    _ => unreachable!(),
                }
            };
        }
        by_type!(0 => f32s, 1 => f64s, 2 => f16s, 3 => bf16s, 4 => i32s, 5 => i64s, 6 => u32s, 7 => u64s)
    }

    /// One call of a family collective or exchange (drawn alike on every PE) on u32 data with a random
    /// count and root, checked where it lands: each element is a hash of (PE, iteration,
    /// index), so a block from the wrong PE or place shows; the reductions sum with wrapping.
    fn family_round(&mut self, rng: &mut Rng, iter: u64) -> Result<()> {
        let (me, n) = (self.nv.my_pe() as usize, self.nv.n_pes() as usize);
        let stream = self.nv.stream().clone();
        let k = rng.below(self.family.rows.len() as u64) as usize;
        let w = &mut self.family.rows[k];
        let coll = w.collective();
        let root = rng.below(n as u64) as usize;
        let room = self.u32s.input.len() - OFFSET_ROOM;
        let count = rng.log_uniform((room / n).max(1));
        let value =
            move |pe: usize, i: usize| mix(iter << 32 ^ (pe as u64) << 56 ^ i as u64) as u32;
        let host: Vec<u32> = (0..n * count).map(|i| value(me, i)).collect();
        let bufs = &self.u32s;
        bufs.input.view(..n * count)?.copy_from_host(&host)?;
        bufs.output
            .view(..n * count)?
            .copy_from_host(&vec![u32::MAX; n * count])?;
        let (input, output) = (&bufs.input, &bufs.output);
        let sum = move |i: usize| (0..n).fold(0u32, |a, p| a.wrapping_add(value(p, i)));
        let row = coll.row();
        let name = coll.name();
        // The v forms' skewed parts, drawn alike on every PE, for every member (the reference
        // reads the senders' parts): c(s, r) elements from s to r; allgatherv's member r
        // gives c(r, 0).
        let c = move |s: usize, r: usize| {
            mix(iter ^ (s as u64) << 40 ^ (r as u64) << 48) as usize % (count + 1)
        };
        let at = |counts: Vec<usize>| {
            let displs = back_to_back(&counts);
            (counts, displs)
        };
        let all_parts: Option<Vec<AnyParts>> = (row.placement == Placement::Parts).then(|| {
            (0..n)
                .map(|p| match row.shape {
                    Shape::Gather => AnyParts {
                        send: Default::default(),
                        recv: at((0..n).map(|r| c(r, 0)).collect()),
                    },
                    _ => AnyParts {
                        send: at((0..n).map(|r| c(p, r)).collect()),
                        recv: at((0..n).map(|s| c(s, p)).collect()),
                    },
                })
                .collect()
        });
        // Grouped send/recv as a ring: the whole input to the next PE, the output from the
        // previous.
        let peers = if row.placement == Placement::Peers {
            Peers::Ring
        } else {
            Peers::All
        };
        let (in_len, len) = match &all_parts {
            _ if peers == Peers::Ring => (count, count),
            // Allgatherv's input is its own part.
            Some(p) if row.shape == Shape::Gather => (p[me].recv.0[me], n * count),
            _ => (
                row.input_len(count, n as i32),
                row.output_len(count, n as i32),
            ),
        };
        let parts = all_parts.as_ref().map(|p| p[me].clone());
        // The library's host reference: the receiving PE's expected output (None where the
        // call defines none).
        let reference = Expected {
            n,
            count,
            root,
            peers,
            parts: all_parts.as_deref(),
        };
        let want = |i: usize| match reference.source(row, me, i) {
            Source::Input { pe, index } => Some(value(pe, index)),
            Source::Reduced { index } => Some(sum(index)),
            Source::Kept => None,
        };
        let call = AnyCall::new(input.view(..in_len)?, output.view(..len)?)
            .root(root as i32)
            .peers(peers);
        let call = match parts {
            Some(p) => call.parts(p),
            None => call,
        };
        w.run_any(call, &stream)?;
        stream.synchronize()?;
        w.check()?;
        let got = output.view(..len)?.to_vec()?;
        self.report.family_calls += 1;
        let bad = (0..len).find(|&i| want(i).is_some_and(|w| got[i] != w));
        if let Some(i) = bad {
            self.report.mismatch(|| {
                format!(
                    "iteration {iter}: {name} of {count} u32 per block (root {root}): element \
                     {i} is {:#x}, expected {:#x}",
                    got[i],
                    want(i).unwrap_or(0)
                )
            });
        }
        Ok(())
    }

    /// 1 to 4 messages from each PE to the next, back to back, then received and checked.
    fn channel_round(&mut self, rng: &mut Rng, iter: u64) -> Result<()> {
        let me = self.nv.my_pe();
        let n = self.nv.n_pes();
        let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
        let stream = self.nv.stream().clone();
        let count = 1 + rng.below(4) as usize;
        let max = self.opts.max_message.max(1);
        let lens: Vec<usize> = (0..count).map(|_| rng.log_uniform(max)).collect();
        let pattern = |pe: i32, k: usize, i: usize| {
            mix(iter << 20 ^ (pe as u64) << 8 ^ k as u64 ^ (i as u64) << 24) as u32
        };
        let mut host = vec![0u32; max * 4];
        for (k, &len) in lens.iter().enumerate() {
            for (i, v) in host[k * max..k * max + len].iter_mut().enumerate() {
                *v = pattern(me, k, i);
            }
        }
        stream.memcpy_htod(&host, &mut self.send_buf)?;
        for (k, &len) in lens.iter().enumerate() {
            let src = self.send_buf.slice(k * max..k * max + len);
            self.channel.send(next, &src, len, &stream)?;
            self.report.bytes_sent += 4 * len as u64;
        }
        for (k, &len) in lens.iter().enumerate() {
            let mut dst = self.recv_buf.slice_mut(k * max..k * max + len);
            self.channel.recv_into(prev, &mut dst, len, &stream)?;
        }
        self.channel.sync(&stream)?;
        let got = stream.clone_dtoh(&self.recv_buf)?;
        for (k, &len) in lens.iter().enumerate() {
            self.report.messages += 1;
            let bad = (0..len).find(|&i| got[k * max + i] != pattern(prev, k, i));
            if let Some(i) = bad {
                self.report.mismatch(|| {
                    format!(
                        "iteration {iter}: message {k} from PE {prev} ({len} u32): element {i} \
                         is {:#x}, sent {:#x}",
                        got[k * max + i],
                        pattern(prev, k, i)
                    )
                });
            }
        }
        Ok(())
    }
}

fn one_allreduce<T: SoakValue>(
    nv: &Nvshmem,
    ar: &mut Allreduce<'_>,
    bufs: &Buffers<'_, T>,
    report: &mut SoakReport,
    rng: &mut Rng,
    iter: u64,
    max_bytes: usize,
) -> Result<()> {
    let n = ar.n_pes() as usize;
    let me = nv.my_pe() as usize;
    let stream = nv.stream().clone();
    let op = ReduceOp::ALL[rng.below(ReduceOp::ALL.len() as u64) as usize];
    let algo = match rng.below(8) {
        0 => AllreduceAlgo::OneShot,
        1 => AllreduceAlgo::TwoShot,
        2 => AllreduceAlgo::Ring,
        3 => AllreduceAlgo::RecursiveDoubling,
        _ => AllreduceAlgo::Auto,
    };
    let count = rng.log_uniform((max_bytes / std::mem::size_of::<T>()).max(1));
    let offset = if rng.below(2) == 0 {
        0
    } else {
        rng.below(OFFSET_ROOM as u64) as usize
    };
    let in_place = rng.below(4) == 0;
    let salt = mix(iter ^ 0x5eed);
    let host: Vec<T> = (0..count)
        .map(|i| T::from_f64(input_value(me, i, salt, op, T::SIGNED)))
        .collect();
    let input = bufs.input.view(offset..offset + count)?;
    input.copy_from_host(&host)?;
    let output = if in_place {
        input
    } else {
        bufs.output.view(offset..offset + count)?
    };
    let used = ar.run(input, output, op, algo, &stream)?;
    ar.sync(&stream)?;
    let got = output.to_vec()?;
    report.allreduces += 1;
    report.bytes_reduced += (count * std::mem::size_of::<T>()) as u64;
    let bad = (0..count).find(|&i| !matches(got[i], expected_value::<T>(n, i, salt, op), op, n));
    if let Some(i) = bad {
        report.mismatch(|| {
            format!(
                "iteration {iter}: {} {op:?} of {count} elements by {} (offset {offset}, in place \
                 {in_place}): element {i} is {:?}, expected {:?}",
                std::any::type_name::<T>(),
                used.name(),
                got[i],
                expected_value::<T>(n, i, salt, op)
            )
        });
    }
    Ok(())
}

/// `Err(DataMismatch)` if the soak saw any wrong result.
pub fn verdict(report: &SoakReport) -> ToolResult<()> {
    if report.mismatches == 0 {
        return Ok(());
    }
    Err(ToolError::DataMismatch {
        what: format!(
            "soak: {} of {} results wrong; first: {}",
            report.mismatches,
            report.allreduces + report.family_calls + report.messages,
            report.first_mismatches.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_log_uniform_stays_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            let v = a.log_uniform(1000);
            b.log_uniform(1000);
            assert!((1..=1000).contains(&v), "{v}");
        }
        let mut r = Rng::new(1);
        let small = (0..10_000)
            .filter(|_| r.log_uniform(1 << 20) < 1024)
            .count();
        assert!(small > 3000, "log-uniform favours no size: {small}");
    }

    #[test]
    fn references_are_exact_small_integers() {
        for op in ReduceOp::ALL {
            for i in 0..200 {
                let vals: Vec<f64> = (0..2).map(|pe| input_value(pe, i, 9, op, true)).collect();
                let want = match op {
                    ReduceOp::Sum => vals[0] + vals[1],
                    ReduceOp::Prod => vals[0] * vals[1],
                    ReduceOp::Min => vals[0].min(vals[1]),
                    ReduceOp::Max => vals[0].max(vals[1]),
                    ReduceOp::Avg => (vals[0] + vals[1]) / 2.0,
                };
                assert_eq!(expected_value::<f32>(2, i, 9, op), want as f32);
                assert_eq!(
                    expected_value::<half::bf16>(2, i, 9, op),
                    half::bf16::from_f64(want)
                );
                if op == ReduceOp::Avg {
                    // Integer average truncates toward zero: -5 / 2 = -2.
                    assert_eq!(expected_value::<i32>(2, i, 9, op), (want.trunc()) as i32);
                }
            }
        }
        assert!((0..100).all(|i| input_value(0, i, 1, ReduceOp::Sum, false) >= 0.0));
    }

    #[test]
    fn mismatches_make_the_verdict_fail() {
        let mut r = SoakReport::default();
        assert!(verdict(&r).is_ok());
        r.mismatches = 1;
        r.allreduces = 10;
        r.first_mismatches.push("iteration 3".into());
        let err = verdict(&r).unwrap_err().to_string();
        assert!(
            err.contains("1 of 10") && err.contains("iteration 3"),
            "{err}"
        );
    }
}
