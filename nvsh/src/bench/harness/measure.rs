//! The measuring loop: [`Harness`] times and checks every candidate at every size, the PEs
//! agreeing on each step so that a failure on one never leaves the others waiting.

use super::collective::Collective;
use super::dtype::{BenchDtype, BenchElement};
use super::fill::fill_threads;
use super::plan::{iters_for, size_plan, slots_for};
use super::report::{after_compute_us, algbw_gbps, GroupTime, Outcome, Report, Row, Timing};
use super::slots::{On, Pools, RegisteredPair, RegistrablePair, Slots, WindowPair};
use crate::bench::{elapsed_ms, median};
use crate::nccl_baseline::HostExchange;
use cudarc::driver::CudaStream;
use nvshmem::Nvshmem;
use nvshmem::RegistrableBuffer;
use nvshmem::{Error, Result};
use std::sync::Arc;

/// Bytes each PE contributes to one host exchange: a flag, the wrong-output count and the
/// first mismatch (rep, call, element, got, expected).
const EXCHANGE_BYTES: usize = 64;

/// Bytes the compute kernel between calls writes.
pub const COMPUTE_BYTES: usize = 64 << 20;

/// What a run shares between dtypes, sizes and candidates.
pub struct Harness<'nv> {
    pub nv: &'nv Nvshmem,
    pub stream: Arc<CudaStream>,
    pub(crate) exchange: HostExchange<'nv>,
    /// What the compute kernel between calls writes ([`COMPUTE_BYTES`], a memset).
    compute: std::cell::RefCell<cudarc::driver::CudaSlice<u8>>,
    /// Timed groups per size and candidate.
    pub reps: usize,
    /// Untimed calls before them.
    pub warmup: usize,
    /// Host threads this PE computes its slots' values on ([`fill_threads`]).
    pub fill_threads: usize,
}

impl<'nv> Harness<'nv> {
    /// Collective.
    pub fn new(nv: &'nv Nvshmem, reps: usize, warmup: usize) -> Result<Self> {
        Ok(Harness {
            nv,
            stream: nv.stream().clone(),
            exchange: HostExchange::new(nv, EXCHANGE_BYTES)?,
            compute: std::cell::RefCell::new(nv.stream().alloc_zeros::<u8>(COMPUTE_BYTES)?),
            reps: reps.max(1),
            warmup: warmup.max(1),
            fill_threads: fill_threads(
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
                nv.n_pes(),
            ),
        })
    }

    /// Enqueues the compute kernel that separates calls in the second timing: a memset of
    /// [`COMPUTE_BYTES`] on the bench stream (bound by memory bandwidth, tens of microseconds).
    fn compute_kernel(&self) -> Result<()> {
        self.stream.memset_zeros(&mut *self.compute.borrow_mut())?;
        Ok(())
    }

    /// Calls per timed group for `call` (handed the call's index): [`iters_for`] of the time of
    /// the untimed warm-up calls, which it makes, PE 0's estimate being everyone's. The caller
    /// caps it where its calls need slots. Collective.
    pub fn group_size(&self, call: &mut dyn FnMut(usize) -> Result<()>) -> Result<usize> {
        self.nv.barrier_all()?;
        let ms = elapsed_ms(self.nv, &self.stream, || {
            for k in 0..self.warmup {
                call(k)?;
            }
            Ok(())
        })?;
        let iters = iters_for(ms * 1e3 / self.warmup as f64);
        Ok(self.exchange.broadcast_from_pe0(iters as u64)? as usize)
    }

    /// One timed group of `group` calls of `call` (handed the call's index 0..group), after a
    /// barrier so that skew between PEs is not timed. With `after_compute`, each call follows
    /// the compute kernel, and the compute kernels are then timed alone ([`after_compute_us`]
    /// takes the difference of the medians). Collective.
    pub fn time_group(
        &self,
        group: usize,
        after_compute: bool,
        call: &mut dyn FnMut(usize) -> Result<()>,
    ) -> Result<GroupTime> {
        let (nv, stream, group) = (self.nv, &*self.stream, group.max(1));
        nv.barrier_all()?;
        let mut host = std::time::Duration::ZERO;
        let ms = elapsed_ms(nv, stream, || {
            let t0 = std::time::Instant::now();
            for k in 0..group {
                if after_compute {
                    self.compute_kernel()?;
                }
                call(k)?;
            }
            host = t0.elapsed();
            Ok(())
        })?;
        let compute_us = if after_compute {
            let ms = elapsed_ms(nv, stream, || {
                for _ in 0..group {
                    self.compute_kernel()?;
                }
                Ok(())
            })?;
            Some(ms * 1e3 / group as f64)
        } else {
            None
        };
        Ok(GroupTime {
            us: ms * 1e3 / group as f64,
            compute_us,
            host_us: host.as_secs_f64() * 1e6 / group as f64,
        })
    }

    /// Agrees on a step's result across PEs: Ok(Some(value)) when it worked everywhere,
    /// Ok(None) with `why` when it failed everywhere, an error when only some PEs failed (they
    /// can no longer run the same sequence of calls).
    pub fn agree<V>(&self, what: &str, step: Result<V>) -> Result<std::result::Result<V, String>> {
        let failed = self.exchange.failed_pes(step.is_ok())?;
        match step {
            Err(e) if failed.len() == self.nv.n_pes() as usize => Ok(Err(e.to_string())),
            Err(e) => Err(e),
            Ok(_) if !failed.is_empty() => Err(failed_elsewhere(what, &failed)),
            Ok(v) => Ok(Ok(v)),
        }
    }

    /// [`Harness::run_dtypes`] with PE 0's report: `full(rows, gpu)` builds it from the rows and
    /// the GPU's name, handed to `partial` after every row (the rows so far) and returned at
    /// the end; None on the other PEs. Collective.
    pub fn run_reported<K, C>(
        &self,
        coll: &mut C,
        candidates: &[K],
        sizes: &[usize],
        dtypes: &[BenchDtype],
        full: &dyn Fn(Vec<Row>, String) -> Report,
        partial: &mut dyn FnMut(&Report),
    ) -> Result<Option<Report>>
    where
        K: Copy,
        C: Collective<f32, Candidate = K>
            + Collective<half::bf16, Candidate = K>
            + Collective<half::f16, Candidate = K>
            + Collective<f64, Candidate = K>
            + Collective<i32, Candidate = K>
            + Collective<u32, Candidate = K>
            + Collective<i64, Candidate = K>
            + Collective<u64, Candidate = K>
            + Collective<u8, Candidate = K>,
    {
        let pe0 = self.nv.my_pe() == 0;
        let gpu = gpu_name_on_pe0(self.nv);
        let mut on_row = |rows: &[Row]| {
            if pe0 {
                partial(&full(rows.to_vec(), gpu.clone()));
            }
        };
        let rows = self.run_dtypes(coll, candidates, sizes, dtypes, &mut on_row)?;
        self.nv.barrier_all()?;
        if !pe0 {
            return Ok(None);
        }
        Ok(Some(full(rows, self.nv.context().name()?)))
    }

    /// [`Harness::run_dtype`] for each of `dtypes` in turn: the report's rows, each handed
    /// with the ones before it to `on_row` as soon as it is measured. Collective. The caller
    /// has refused the types its collective does not take ([`check_dtypes`]).
    ///
    /// [`check_dtypes`]: super::check_dtypes
    pub fn run_dtypes<K, C>(
        &self,
        coll: &mut C,
        candidates: &[K],
        sizes: &[usize],
        dtypes: &[BenchDtype],
        on_row: &mut dyn FnMut(&[Row]),
    ) -> Result<Vec<Row>>
    where
        K: Copy,
        C: Collective<f32, Candidate = K>
            + Collective<half::bf16, Candidate = K>
            + Collective<half::f16, Candidate = K>
            + Collective<f64, Candidate = K>
            + Collective<i32, Candidate = K>
            + Collective<u32, Candidate = K>
            + Collective<i64, Candidate = K>
            + Collective<u64, Candidate = K>
            + Collective<u8, Candidate = K>,
    {
        let mut rows = Vec::new();
        for &dtype in dtypes {
            let rows = &mut rows;
            match dtype {
                BenchDtype::F32 => {
                    self.run_dtype::<f32, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::Bf16 => {
                    self.run_dtype::<half::bf16, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::F16 => {
                    self.run_dtype::<half::f16, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::F64 => {
                    self.run_dtype::<f64, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::I32 => {
                    self.run_dtype::<i32, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::U32 => {
                    self.run_dtype::<u32, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::I64 => {
                    self.run_dtype::<i64, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::U64 => {
                    self.run_dtype::<u64, _>(coll, candidates, sizes, rows, on_row)?
                }
                BenchDtype::U8 => self.run_dtype::<u8, _>(coll, candidates, sizes, rows, on_row)?,
            }
        }
        Ok(rows)
    }

    /// Times and checks every candidate at every size in `sizes` (bytes asked for) for element
    /// type `T`, appending one row per size and handing all rows so far to `on_row` after
    /// each. Collective.
    pub fn run_dtype<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &mut C,
        candidates: &[C::Candidate],
        sizes: &[usize],
        rows: &mut Vec<Row>,
        on_row: &mut dyn FnMut(&[Row]),
    ) -> Result<()> {
        let (nv, n) = (self.nv, self.nv.n_pes());
        let elem = std::mem::size_of::<T>();
        let plan = size_plan(coll, sizes, elem, n);
        // One pool of each kind for the whole dtype; each size takes a prefix as its slots.
        let pool = |len: &dyn Fn(usize) -> usize| {
            plan.iter()
                .map(|&(count, bytes)| slots_for(bytes) * len(count))
                .max()
                .unwrap_or(0)
        };
        let in_pool = pool(&|c| coll.input_len(c, n));
        let out_pool = pool(&|c| coll.output_len(c, n));
        if in_pool == 0 || out_pool == 0 {
            return Ok(());
        }
        let inputs = nv.alloc::<T>(in_pool)?;
        let outputs = nv.alloc::<T>(out_pool)?;
        let windows = self.nccl_windows(&*coll, candidates, in_pool, out_pool)?;
        let own = self.registrable_pools(&*coll, candidates, in_pool, out_pool)?;
        let registered = match &own {
            None => None,
            Some(Err(why)) => Some(Err(why.clone())),
            Some(Ok((i, o))) => Some(self.register_pools(i, o)?),
        };
        for (count, bytes) in plan {
            let pools = Pools {
                inputs: &inputs,
                outputs: &outputs,
                windows: windows.as_ref(),
                registered: registered.as_ref(),
            };
            let mut slots =
                Slots::new(coll, pools, count, slots_for(bytes), nv, self.fill_threads)?;
            let mut row = Row {
                bytes,
                count,
                dtype: T::BENCH_DTYPE,
                tolerance: slots.tolerance,
                results: Vec::new(),
                note: None,
            };
            for &c in candidates {
                let outcome = self.measure(coll, c, &mut slots, &mut row.note)?;
                row.results.push((coll.name(c), outcome));
            }
            rows.push(row);
            on_row(rows);
        }
        Ok(())
    }

    /// NCCL's buffers for a candidate that runs on them ([`Collective::nccl_window`]): a pool
    /// of `in_len` input and one of `out_len` output elements, each registered as a symmetric
    /// window; None when no candidate asks for them, the reason when they could not be made
    /// (the same on every PE). Collective.
    #[allow(clippy::type_complexity)]
    fn nccl_windows<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &C,
        candidates: &[C::Candidate],
        in_len: usize,
        out_len: usize,
    ) -> Result<Option<std::result::Result<WindowPair<'nv, T>, String>>> {
        // Decided from state every PE shares, so all of them make windows or none does.
        let Some((nccl, _)) = candidates
            .iter()
            .filter(|&&c| coll.available(c).is_ok())
            .find_map(|&c| coll.nccl_window(c))
        else {
            return Ok(None);
        };
        let made = nccl.mem_alloc::<T>(self.nv, in_len).and_then(|i| {
            let o = nccl.mem_alloc::<T>(self.nv, out_len)?;
            Ok((i, o))
        });
        let (mut i, mut o) = match self.agree("ncclMemAlloc", made)? {
            Ok(pair) => pair,
            Err(why) => return Ok(Some(Err(why))),
        };
        // Collective: every PE registers the same two windows in the same order.
        let registered = i.register().and_then(|()| o.register());
        Ok(Some(
            self.agree("ncclCommWindowRegister", registered)?
                .map(|()| (i, o)),
        ))
    }

    /// This PE's memory for a candidate that runs on registered memory
    /// ([`Collective::registered`]): a pool of `in_len` input and one of `out_len` output
    /// elements from `alloc_registrable` (each rounded up to NVSHMEM's granularity, 512 MiB by
    /// default); None when no candidate asks for them, the reason when they could not be made
    /// on any PE. Collective (the PEs agree).
    #[allow(clippy::type_complexity)]
    fn registrable_pools<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &C,
        candidates: &[C::Candidate],
        in_len: usize,
        out_len: usize,
    ) -> Result<Option<std::result::Result<RegistrablePair<'nv, T>, String>>> {
        // Decided from state every PE shares, so all of them make pools or none does.
        if !candidates
            .iter()
            .any(|&c| coll.available(c).is_ok() && coll.registered(c))
        {
            return Ok(None);
        }
        let made = self.nv.alloc_registrable::<T>(in_len).and_then(|i| {
            let o = self.nv.alloc_registrable::<T>(out_len)?;
            Ok((i, o))
        });
        Ok(Some(self.agree("alloc_registrable", made)?))
    }

    /// Registers both pools into the symmetric heap, once, before any timing; the reason on
    /// every PE when NVSHMEM's registration is refused (every PE refuses alike). Collective.
    #[allow(clippy::type_complexity)]
    fn register_pools<'b, T: BenchElement>(
        &self,
        inputs: &'b RegistrableBuffer<'nv, T>,
        outputs: &'b RegistrableBuffer<'nv, T>,
    ) -> Result<std::result::Result<RegisteredPair<'b, T>, String>> {
        let registered = self.nv.register_symmetric(inputs).and_then(|i| {
            let o = self.nv.register_symmetric(outputs)?;
            Ok((i, o))
        });
        match registered {
            Ok(pair) => Ok(Ok(pair)),
            Err(e @ Error::NotRegistrable { .. }) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// One call of `c` on slot `k`: on the symmetric buffers, or for a candidate of NCCL's
    /// windows or of registered memory on those.
    fn call_slot<T: BenchElement, C: Collective<T>>(
        coll: &mut C,
        c: C::Candidate,
        slots: &Slots<'_, T>,
        k: usize,
        stream: &CudaStream,
    ) -> Result<Option<&'static str>> {
        match coll.nccl_window(c) {
            Some((nccl, call)) => {
                let w = slots.windows()?;
                nccl.run(call, w.input(k)?, w.output(k)?).map(|()| None)
            }
            None if coll.registered(c) => {
                let (i, o) = slots.registered(k)?;
                coll.call(c, i, o, stream)
            }
            None => coll.call(c, slots.input(k)?, slots.output(k)?, stream),
        }
    }

    /// Times one candidate at one size in checked groups. Collective.
    fn measure<T: BenchElement, C: Collective<T>>(
        &self,
        coll: &mut C,
        c: C::Candidate,
        slots: &mut Slots<'_, T>,
        note: &mut Option<&'static str>,
    ) -> Result<Outcome> {
        let (nv, stream, n) = (self.nv, &*self.stream, self.nv.n_pes());
        if let Err(why) = coll.available(c) {
            return Ok(Outcome::Unavailable(why));
        }
        let window = if coll.nccl_window(c).is_some() {
            On::NcclWindows
        } else if coll.registered(c) {
            On::Registered
        } else {
            On::Symmetric
        };
        if let Err(e) = slots.usable(window) {
            return Ok(Outcome::Unavailable(e.to_string()));
        }
        // A first call tells whether the candidate runs at all; the PEs agree before anyone
        // waits on the GPU, since a PE whose call launched may be waiting for the others.
        nv.barrier_all()?;
        let probe = Self::call_slot(coll, c, slots, 0, stream);
        match self.agree(coll.name(c), probe)? {
            Err(why) => return Ok(Outcome::Unavailable(why)),
            Ok(Some(picked)) => *note = Some(picked),
            Ok(None) => {}
        }
        stream.synchronize()?;

        let n_slots = slots.n_slots;
        let iters = self.group_size(&mut |k| {
            Self::call_slot(coll, c, slots, k % n_slots, stream).map(|_| ())
        })?;
        let group = iters.min(n_slots);
        slots.expect_first(coll.values(), group);

        let mut us = Vec::with_capacity(self.reps);
        let (mut with_compute, mut compute_alone) = (Vec::new(), Vec::new());
        let mut host_us = Vec::with_capacity(self.reps);
        let mut wrong = 0u64;
        let mut first: Option<Mismatch> = None;
        let host_len = if slots.checks {
            group * slots.out_len
        } else {
            0
        };
        let mut host = vec![T::default(); host_len];
        // Back to back, then each call after a compute kernel; every timed call is checked.
        for (rep, after_compute) in (0..self.reps)
            .map(|r| (r, false))
            .chain((0..self.reps).map(|r| (r, true)))
        {
            // NaN in every output, so a call that writes nothing (or only part) is caught.
            slots.poison(window, group)?;
            nv.context().synchronize()?;
            let t = self.time_group(group, after_compute, &mut |k| {
                Self::call_slot(coll, c, slots, k, stream).map(|_| ())
            })?;
            match t.compute_us {
                Some(alone) => {
                    with_compute.push(t.us);
                    compute_alone.push(alone);
                }
                None => {
                    us.push(t.us);
                    host_us.push(t.host_us);
                }
            }
            if !slots.checks {
                continue;
            }
            slots.read_outputs(window, group, &mut host)?;
            for (k, got) in host.chunks(slots.out_len).enumerate() {
                if let Some((i, got, expected)) = slots.first_mismatch(k, got) {
                    wrong += 1;
                    first.get_or_insert(Mismatch {
                        rep,
                        call: k,
                        element: i,
                        got,
                        expected,
                    });
                }
            }
        }
        let (wrong, wrong_detail) = self.gather_wrong(wrong, first)?;
        let us_after_compute = after_compute_us(&with_compute, &compute_alone);
        let us = median(&us);
        let algbw = algbw_gbps(slots.bytes, us);
        Ok(Outcome::Timed(Timing {
            iters: group,
            us,
            us_after_compute,
            algbw,
            busbw: algbw * coll.busbw_factor(n),
            host_us: median(&host_us),
            checked: (2 * group * self.reps) as u64,
            checked_pes: (0..n).filter(|&pe| coll.checks_output(pe, n)).count() as i32,
            wrong,
            wrong_detail,
        }))
    }

    /// Every PE's wrong-output count and first mismatch: the total and a description.
    fn gather_wrong(&self, wrong: u64, first: Option<Mismatch>) -> Result<(u64, Option<String>)> {
        let mut mine = wrong.to_le_bytes().to_vec();
        if let Some(m) = first {
            mine.extend((m.rep as u32).to_le_bytes());
            mine.extend((m.call as u32).to_le_bytes());
            mine.extend((m.element as u64).to_le_bytes());
            mine.extend(m.got.to_le_bytes());
            mine.extend(m.expected.to_le_bytes());
        }
        let all = self.exchange.all_gather(&mine)?;
        let word = |m: &[u8], at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&m[at..at + 8]);
            w
        };
        let half = |m: &[u8], at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&m[at..at + 4]);
            u32::from_le_bytes(w)
        };
        let mut total = 0u64;
        let mut details = Vec::new();
        for (pe, m) in all.iter().enumerate() {
            let count = u64::from_le_bytes(word(m, 0));
            total += count;
            if count > 0 {
                details.push(format!(
                    "PE {pe}: {count} wrong, first in group {} call {} element {} = {} \
                     (expected {})",
                    half(m, 8),
                    half(m, 12),
                    u64::from_le_bytes(word(m, 16)),
                    f64::from_le_bytes(word(m, 24)),
                    f64::from_le_bytes(word(m, 32))
                ));
            }
        }
        Ok((total, (!details.is_empty()).then(|| details.join(", "))))
    }
}

/// A wrong output element on this PE.
#[derive(Debug, Clone, Copy)]
struct Mismatch {
    rep: usize,
    call: usize,
    element: usize,
    got: f64,
    expected: f64,
}

/// The GPU's name for PE 0's reports, empty on the other PEs. A failure here is PE 0's alone,
/// so it must not stop the run (the other PEs would wait for it): the name is only text.
pub fn gpu_name_on_pe0(nv: &Nvshmem) -> String {
    if nv.my_pe() == 0 {
        nv.context().name().unwrap_or_default()
    } else {
        String::new()
    }
}

/// The error for a step that worked here but failed on other PEs: the job cannot go on
/// together (this PE's stream may wait on them forever).
pub fn failed_elsewhere(what: &str, failed: &[i32]) -> Error {
    Error::Io {
        what: format!("benchmark, {what}"),
        message: format!(
            "failed on PE(s) {failed:?} but not on this one; stopping, since the PEs can no \
             longer run the same sequence of calls"
        ),
    }
}
