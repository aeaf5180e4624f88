//! The buffers the timed calls run on: a dtype's pools (symmetric, NCCL's windows, registered),
//! one size's slots in them, and its expected outputs with the comparison against them.

use super::collective::Collective;
use super::dtype::BenchElement;
use super::fill::{threads_for, SlotShape, SlotValues};
use super::plan::message_bytes;
use crate::nccl_baseline::{NcclBuf, NcclWindow};
use nvshmem::Nvshmem;
use nvshmem::{Error, Result};
use nvshmem::{Registered, RegistrableBuffer};
use nvshmem::{SymView, SymmetricBuffer};

/// NCCL's input and output pools of one dtype, registered as windows.
pub(super) type WindowPair<'nv, T> = (NcclWindow<'nv, T>, NcclWindow<'nv, T>);

/// This PE's own input and output pools of one dtype, registrable.
pub(super) type RegistrablePair<'nv, T> = (RegistrableBuffer<'nv, T>, RegistrableBuffer<'nv, T>);

/// The same pools registered into the symmetric heap.
pub(super) type RegisteredPair<'b, T> = (Registered<'b, T>, Registered<'b, T>);

/// One size's slots in registered memory: all its inputs, all its outputs.
type SymPair<'p, T> = (SymView<'p, T>, SymView<'p, T>);

/// Which buffers a candidate runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum On {
    Symmetric,
    NcclWindows,
    Registered,
}

/// One dtype's buffer pools, of which each size takes a prefix.
pub(super) struct Pools<'p, 'nv, T: BenchElement> {
    pub(super) inputs: &'p SymmetricBuffer<'nv, T>,
    pub(super) outputs: &'p SymmetricBuffer<'nv, T>,
    /// NCCL's, where a candidate runs on them (or why they could not be made).
    pub(super) windows: Option<&'p std::result::Result<WindowPair<'nv, T>, String>>,
    /// The caller's own, registered, where a candidate runs on them (or why they could not
    /// be made or registered).
    pub(super) registered: Option<&'p std::result::Result<RegisteredPair<'p, T>, String>>,
}

/// One size's slots in NCCL's windows.
pub(super) struct WindowSlots<'p, T> {
    inputs: NcclBuf<'p, T>,
    outputs: NcclBuf<'p, T>,
    in_len: usize,
    out_len: usize,
}

impl<'p, T: BenchElement> WindowSlots<'p, T> {
    pub(super) fn input(&self, k: usize) -> Result<NcclBuf<'p, T>> {
        self.inputs.view(k * self.in_len..(k + 1) * self.in_len)
    }

    pub(super) fn output(&self, k: usize) -> Result<NcclBuf<'p, T>> {
        self.outputs.view(k * self.out_len..(k + 1) * self.out_len)
    }
}

/// One size's input/output buffer pairs, inputs written, expected outputs on the host.
pub(super) struct Slots<'p, T: BenchElement> {
    inputs: SymView<'p, T>,
    outputs: SymView<'p, T>,
    /// The same slots in NCCL's windows, holding the same inputs (or why there are none).
    nccl: Option<std::result::Result<WindowSlots<'p, T>, String>>,
    /// The same slots in registered memory (inputs, outputs), holding the same inputs (or why
    /// there are none).
    reg: Option<std::result::Result<SymPair<'p, T>, String>>,
    /// Buffer pairs.
    pub(super) n_slots: usize,
    /// nccl-tests' size of the message (the larger buffer), bytes.
    pub(super) bytes: usize,
    in_len: usize,
    pub(super) out_len: usize,
    /// Whether this PE's output is defined and compared.
    pub(super) checks: bool,
    /// This PE's expected outputs of the slots groups have reached so far.
    expected: Expected<T>,
    /// How far an output element may be from its expected value ([`Collective::tolerance`]).
    pub(super) tolerance: f64,
}

impl<'p, T: BenchElement> Slots<'p, T> {
    /// Writes every slot's input on this PE, computed on up to `threads` host threads; the
    /// expected outputs come later, as far as a candidate's groups reach
    /// ([`Slots::expect_first`]). Collective.
    pub(super) fn new<C: Collective<T>>(
        coll: &C,
        pools: Pools<'p, '_, T>,
        count: usize,
        n_slots: usize,
        nv: &Nvshmem,
        threads: usize,
    ) -> Result<Self> {
        let (me, n) = (nv.my_pe(), nv.n_pes());
        let (in_len, out_len) = (coll.input_len(count, n), coll.output_len(count, n));
        let bytes = message_bytes(in_len, out_len, std::mem::size_of::<T>());
        let checks = coll.checks_output(me, n);
        let shape = SlotShape {
            me,
            n_pes: n,
            count,
            bytes,
            in_len,
            out_len,
        };
        let mut host = vec![T::default(); n_slots * in_len];
        let fill = threads_for(host.len(), threads);
        shape.fill_inputs(coll.values(), 0, &mut host, fill);
        let inputs = pools.inputs.view(..n_slots * in_len)?;
        inputs.copy_from_host(&host)?;
        let nccl = match pools.windows {
            None => None,
            Some(Err(why)) => Some(Err(why.clone())),
            Some(Ok((win_in, win_out))) => {
                let w = WindowSlots {
                    inputs: win_in.view(0..n_slots * in_len)?,
                    outputs: win_out.view(0..n_slots * out_len)?,
                    in_len,
                    out_len,
                };
                // The same inputs as the symmetric buffers'.
                // SAFETY: a device range of NCCL's of exactly host's length, on this PE.
                unsafe {
                    cudarc::driver::result::memcpy_htod_sync(
                        w.inputs.as_device_ptr() as cudarc::driver::sys::CUdeviceptr,
                        &host,
                    )
                }?;
                Some(Ok(w))
            }
        };
        let reg = match pools.registered {
            None => None,
            Some(Err(why)) => Some(Err(why.clone())),
            Some(Ok((reg_in, reg_out))) => {
                let inputs = reg_in.view(..n_slots * in_len)?;
                inputs.copy_from_host(&host)?;
                Some(Ok((inputs, reg_out.view(..n_slots * out_len)?)))
            }
        };
        // A synchronous copy from pageable memory may return before the data lands.
        nv.context().synchronize()?;
        // Nobody reads a peer's inputs before the peer wrote them.
        nv.barrier_all()?;
        Ok(Slots {
            inputs,
            outputs: pools.outputs.view(..n_slots * out_len)?,
            nccl,
            reg,
            n_slots,
            bytes,
            in_len,
            out_len,
            checks,
            expected: Expected::new(shape, checks, threads),
            tolerance: coll.tolerance(T::BENCH_DTYPE, n),
        })
    }

    /// Makes the expected outputs of the first `group` slots ready ([`Expected::reach`]).
    pub(super) fn expect_first<V: SlotValues>(&mut self, values: V, group: usize) {
        self.expected.reach(values, group.min(self.n_slots));
    }

    pub(super) fn input(&self, k: usize) -> Result<SymView<'p, T>> {
        self.inputs.view(k * self.in_len..(k + 1) * self.in_len)
    }

    pub(super) fn output(&self, k: usize) -> Result<SymView<'p, T>> {
        self.outputs.view(k * self.out_len..(k + 1) * self.out_len)
    }

    /// The slots in NCCL's windows; an error saying why there are none.
    pub(super) fn windows(&self) -> Result<&WindowSlots<'p, T>> {
        match &self.nccl {
            Some(Ok(w)) => Ok(w),
            Some(Err(why)) => Err(Error::Driver {
                message: why.clone(),
            }),
            None => Err(Error::Driver {
                message: "no NCCL windows were made for this run".into(),
            }),
        }
    }

    /// Slot `k` in registered memory (input, output); an error saying why there is none.
    pub(super) fn registered(&self, k: usize) -> Result<SymPair<'p, T>> {
        match &self.reg {
            Some(Ok((i, o))) => Ok((
                i.view(k * self.in_len..(k + 1) * self.in_len)?,
                o.view(k * self.out_len..(k + 1) * self.out_len)?,
            )),
            Some(Err(why)) => Err(Error::Driver {
                message: why.clone(),
            }),
            None => Err(Error::Driver {
                message: "no registered memory was made for this run".into(),
            }),
        }
    }

    /// Ok when the buffers a candidate runs on (`on`) exist; the reason why not.
    pub(super) fn usable(&self, on: On) -> Result<()> {
        match on {
            On::Symmetric => Ok(()),
            On::NcclWindows => self.windows().map(|_| ()),
            On::Registered => self.registered(0).map(|_| ()),
        }
    }

    /// The symmetric outputs a candidate on `on` writes: the symmetric buffers' or the
    /// registered ones' (None for NCCL's windows).
    fn symmetric_outputs(&self, on: On) -> Result<Option<SymView<'p, T>>> {
        match on {
            On::Symmetric => Ok(Some(self.outputs)),
            On::Registered => self.registered(0).map(|_| match &self.reg {
                Some(Ok((_, o))) => Some(*o),
                _ => None,
            }),
            On::NcclWindows => Ok(None),
        }
    }

    /// The first `group` outputs of the buffers of `on`.
    fn first_outputs(&self, on: On, group: usize) -> Result<NcclBuf<'p, T>> {
        match self.symmetric_outputs(on)? {
            Some(o) => Ok(o.view(..group * self.out_len)?.into()),
            None => self.windows()?.outputs.view(0..group * self.out_len),
        }
    }

    /// Copies the first `group` outputs (of the buffers of `on`) into `host`.
    pub(super) fn read_outputs(&self, on: On, group: usize, host: &mut [T]) -> Result<()> {
        if let Some(o) = self.symmetric_outputs(on)? {
            return o.view(..group * self.out_len)?.copy_to_host(host);
        }
        let first = self.first_outputs(on, group)?;
        if first.len() != host.len() {
            return Err(Error::HostLengthMismatch {
                what: "NCCL window outputs",
                host: host.len(),
                device: first.len(),
            });
        }
        // SAFETY: a device range of NCCL's of host's length; the calls that wrote it are done
        // (the group's stop event was waited for).
        unsafe {
            cudarc::driver::result::memcpy_dtoh_sync(
                host,
                first.as_device_ptr() as cudarc::driver::sys::CUdeviceptr,
            )
        }?;
        Ok(())
    }

    /// Fills the first `group` outputs (of the buffers of `on`) with a value no correct output
    /// holds ([`BenchDtype::poison_byte`]: NaN for floats).
    ///
    /// [`BenchDtype::poison_byte`]: super::BenchDtype::poison_byte
    pub(super) fn poison(&self, on: On, group: usize) -> Result<()> {
        let first = self.first_outputs(on, group)?;
        if first.is_empty() {
            return Ok(());
        }
        // SAFETY: a valid device range of num_bytes bytes on this PE.
        unsafe {
            cudarc::driver::result::memset_d8_sync(
                first.as_device_ptr() as cudarc::driver::sys::CUdeviceptr,
                T::BENCH_DTYPE.poison_byte(),
                first.num_bytes(),
            )
        }?;
        Ok(())
    }

    /// The first element of slot `k`'s output `got` outside the tolerance: (index, got,
    /// expected). NaN is always wrong.
    pub(super) fn first_mismatch(&self, k: usize, got: &[T]) -> Option<(usize, f64, f64)> {
        let expected = self.expected.slot(k);
        // Equal bytes are equal values, and comparing bytes runs near memory speed; only an
        // output that differs is compared element by element (which accepts avg's rounding).
        if as_bytes(got) == as_bytes(expected) {
            return None;
        }
        got.iter()
            .zip(expected)
            .enumerate()
            .find_map(|(i, (&g, &e))| {
                let (g, e) = (g.value(), e.value());
                let ok = g == e || (g - e).abs() <= self.tolerance;
                (!ok).then_some((i, g, e))
            })
    }
}

/// One size's expected outputs on this PE, computed as far as the groups reach: a group of g
/// calls uses slots 0..g only, and at sizes with many slots (up to [`MAX_ITERS`]) groups are
/// often far shorter, so most slots' outputs would never be compared.
///
/// [`MAX_ITERS`]: super::MAX_ITERS
struct Expected<T> {
    shape: SlotShape,
    /// Whether this PE's output is compared at all; none is computed where not.
    checks: bool,
    /// Host threads to compute them on.
    threads: usize,
    /// Slot after slot, the first `slots` slots.
    outputs: Vec<T>,
    slots: usize,
}

impl<T: BenchElement> Expected<T> {
    fn new(shape: SlotShape, checks: bool, threads: usize) -> Self {
        Expected {
            shape,
            checks,
            threads,
            outputs: Vec::new(),
            slots: 0,
        }
    }

    /// Computes the slots below `slots` not computed yet (where this PE's output is compared).
    fn reach<V: SlotValues>(&mut self, values: V, slots: usize) {
        if !self.checks || slots <= self.slots {
            return;
        }
        let at = self.outputs.len();
        self.outputs
            .resize(slots * self.shape.out_len, T::default());
        let more = &mut self.outputs[at..];
        let threads = threads_for(more.len(), self.threads);
        self.shape.fill_expected(values, self.slots, more, threads);
        self.slots = slots;
    }

    /// Slot `k`'s expected output; `k` must be below what [`Expected::reach`] reached.
    fn slot(&self, k: usize) -> &[T] {
        assert!(
            k < self.slots,
            "slot {k} compared before its reference was computed"
        );
        let len = self.shape.out_len;
        &self.outputs[k * len..(k + 1) * len]
    }
}

/// The bytes of a slice of symmetric-memory elements.
fn as_bytes<T: BenchElement>(v: &[T]) -> &[u8] {
    // SAFETY: Element types are plain old data without padding; the length is the slice's.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::salt;
    use nvshmem::ReduceOp;

    /// The slots' inputs and expected outputs as Slots::new computed them before threading:
    /// slot after slot, element after element.
    fn serial_slots<T: BenchElement, V: SlotValues>(
        v: V,
        sh: &SlotShape,
        n_slots: usize,
    ) -> (Vec<T>, Vec<T>) {
        let (me, n, dtype) = (sh.me, sh.n_pes, T::BENCH_DTYPE);
        let (mut inputs, mut expected) = (Vec::new(), Vec::new());
        for k in 0..n_slots {
            let s = salt(sh.bytes, k);
            inputs.extend((0..sh.in_len).map(|i| T::from_value(v.input_value(dtype, me, i, s, n))));
            expected.extend(
                (0..sh.out_len)
                    .map(|i| T::from_value(v.expected_value(dtype, me, i, sh.count, s, n))),
            );
        }
        (inputs, expected)
    }

    /// The threaded fills of `v`'s values equal the serial ones bit for bit, on thread counts
    /// that divide the lengths and ones that do not, filled whole or from a later slot on; and
    /// the expected outputs computed as groups reach them equal them too.
    fn check_threaded_fill<T: BenchElement, V: SlotValues + std::fmt::Debug>(
        v: V,
        me: i32,
        n_pes: i32,
        count: usize,
        lens: (usize, usize),
    ) {
        let n_slots = 3;
        let sh = SlotShape {
            me,
            n_pes,
            count,
            bytes: message_bytes(lens.0, lens.1, std::mem::size_of::<T>()),
            in_len: lens.0,
            out_len: lens.1,
        };
        let (inputs, expected) = serial_slots::<T, V>(v, &sh, n_slots);
        let what = format!("{v:?} {:?} {sh:?}", T::BENCH_DTYPE);
        for threads in [1, 2, 3, 7, 16] {
            let mut got = vec![T::default(); inputs.len()];
            sh.fill_inputs(v, 0, &mut got, threads);
            assert_eq!(
                as_bytes(&got),
                as_bytes(&inputs),
                "inputs, {threads}: {what}"
            );
            let mut got = vec![T::default(); expected.len()];
            sh.fill_expected(v, 0, &mut got, threads);
            assert_eq!(
                as_bytes(&got),
                as_bytes(&expected),
                "expected, {threads}: {what}"
            );
            // From slot 1 on: the salts are the later slots'.
            let mut got = vec![T::default(); 2 * sh.in_len];
            sh.fill_inputs(v, 1, &mut got, threads);
            assert_eq!(as_bytes(&got), as_bytes(&inputs[sh.in_len..]), "{what}");
            let mut got = vec![T::default(); 2 * sh.out_len];
            sh.fill_expected(v, 1, &mut got, threads);
            assert_eq!(as_bytes(&got), as_bytes(&expected[sh.out_len..]), "{what}");
        }
        let mut e = Expected::<T>::new(sh, true, 3);
        for reach in [2, 1, 3] {
            e.reach(v, reach);
        }
        assert_eq!(e.slots, n_slots);
        for k in 0..n_slots {
            let want = &expected[k * sh.out_len..(k + 1) * sh.out_len];
            assert_eq!(as_bytes(e.slot(k)), as_bytes(want), "slot {k}: {what}");
        }
    }

    /// Both collectives' values, threaded, are the serial ones: allreduce with each reduction,
    /// every family collective, in float and integer types, on lengths of 1 element up to
    /// lengths no thread count here divides.
    #[test]
    fn threaded_slot_values_are_the_serial_ones() {
        use crate::bench::allreduce::AllreduceValues;
        use crate::bench::family::{FamilyValues, Kind};
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Min,
            ReduceOp::Max,
            ReduceOp::Avg,
        ];
        for count in [1, 5, 1001] {
            for op in ops {
                let v = AllreduceValues { op };
                check_threaded_fill::<f32, _>(v, 1, 4, count, (count, count));
                check_threaded_fill::<half::bf16, _>(v, 0, 3, count, (count, count));
                check_threaded_fill::<i64, _>(v, 2, 3, count, (count, count));
            }
            for kind in Kind::all() {
                let n = 3;
                let v = FamilyValues {
                    kind,
                    op: ReduceOp::Sum,
                    root: 1,
                };
                let lens = (kind.input_len(count, n), kind.output_len(count, n));
                check_threaded_fill::<f32, _>(v, 1, n, count, lens);
                check_threaded_fill::<half::bf16, _>(v, 2, n, count, lens);
                if !kind.reduces() {
                    check_threaded_fill::<u8, _>(v, 0, n, count, lens);
                }
            }
        }
    }

    fn small_shape() -> SlotShape {
        SlotShape {
            me: 0,
            n_pes: 2,
            count: 8,
            bytes: 32,
            in_len: 8,
            out_len: 8,
        }
    }

    /// A PE whose output is not compared computes no reference; one that is computes the
    /// slots the groups reached.
    #[test]
    fn expected_outputs_are_computed_only_where_compared() {
        let v = crate::bench::allreduce::AllreduceValues { op: ReduceOp::Sum };
        let mut none = Expected::<f32>::new(small_shape(), false, 2);
        none.reach(v, 4);
        assert!(none.outputs.is_empty() && none.slots == 0);
        let mut some = Expected::<f32>::new(small_shape(), true, 2);
        some.reach(v, 2);
        assert_eq!((some.outputs.len(), some.slots), (16, 2));
    }

    /// A slot beyond what the groups reached is never compared against a missing reference.
    #[test]
    #[should_panic(expected = "slot 2 compared before its reference was computed")]
    fn a_slot_not_reached_has_no_reference() {
        let v = crate::bench::allreduce::AllreduceValues { op: ReduceOp::Sum };
        let mut some = Expected::<f32>::new(small_shape(), true, 2);
        some.reach(v, 2);
        some.slot(2);
    }
}
