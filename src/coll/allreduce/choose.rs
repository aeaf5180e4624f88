//! Which algorithm `Auto` takes: the environment, the hierarchical threshold, the tuned
//! tables, the built-in table, and online tuning where a size is not covered yet.

use super::hier;
use super::online::{self, Online, OnlineTuning};
use super::Allreduce;
use crate::coll::allreduce::algo::AllreduceAlgo;
use crate::coll::op::{ReduceOp, Reducible};
use crate::coll::select::{rule, select, SelectionRule};
use crate::coll::tuning::timing::measurement;
use crate::core::buffer::SymView;
use crate::core::element::Dtype;
use crate::core::error::Result;
use cudarc::driver::CudaStream;

/// What `Auto` picks, from `nvsh bench allreduce` (f32 and bf16 alike, so no dtype-specific
/// row yet; the figures are in docs/measured.md). Two-shot here means its direct protocol where
/// every member is mapped (one node); across nodes it falls back to receive slots.
/// - 2 PEs (2 x H200, 2026-11-22; 4 x H100 2026-11-27): one-shot (low-latency protocol) up to
///   512 KiB, recursive doubling to 8 MiB, the ring to 16 MiB (on the H100s it beat the
///   two-shot at 16 MiB and lost at 32 and 64 MiB), two-shot above (out of place it pushes
///   from 256 MiB).
/// - 3-4 PEs (4 x H200 then; 4 x H100 2026-11-27; 4 x H200 2026-11-28): one-shot up to 512
///   KiB at 3 PEs and 256 KiB at 4, two-shot above (out of place it pushes from 64 MiB) except
///   the ring above 16 MiB to 64 MiB at 4 PEs. Since waits became acquire loads the two-shot
///   beat the one-shot at 512 KiB and recursive doubling at 1 MiB on 4 PEs (the tenth run of
///   docs/measured.md); the ring at 64 MiB is the bench's (two bench runs on two builds had it
///   ahead of the two-shot there, where the tuner, which times each call after a barrier, had
///   it behind). 3 PEs: not measured since, so no ring there.
/// - 5-8 PEs (measured at 8 before the direct two-shot's grid followed the message): one-shot
///   up to 128 KiB, recursive doubling to 2 MiB, two-shot above.
/// - more: recursive doubling for small messages, the ring for large ones.
pub const SELECTION: &[SelectionRule<AllreduceAlgo>] = &[
    rule(1, usize::MAX, AllreduceAlgo::OneShot),
    rule(2, 512 << 10, AllreduceAlgo::OneShot),
    rule(2, 8 << 20, AllreduceAlgo::RecursiveDoubling),
    rule(2, 16 << 20, AllreduceAlgo::Ring),
    rule(2, usize::MAX, AllreduceAlgo::TwoShot),
    rule(3, 512 << 10, AllreduceAlgo::OneShot),
    rule(3, usize::MAX, AllreduceAlgo::TwoShot),
    rule(4, 256 << 10, AllreduceAlgo::OneShot),
    rule(4, 16 << 20, AllreduceAlgo::TwoShot),
    rule(4, 64 << 20, AllreduceAlgo::Ring),
    rule(4, usize::MAX, AllreduceAlgo::TwoShot),
    rule(8, 128 << 10, AllreduceAlgo::OneShot),
    rule(8, 2 << 20, AllreduceAlgo::RecursiveDoubling),
    rule(8, usize::MAX, AllreduceAlgo::TwoShot),
    rule(i32::MAX, 64 << 10, AllreduceAlgo::RecursiveDoubling),
    rule(i32::MAX, usize::MAX, AllreduceAlgo::Ring),
];

impl<'nv> Allreduce<'nv> {
    /// The algorithm `Auto` picks for `bytes` of `dtype` here: NVSH_ALLREDUCE_ALGO if set,
    /// else on a workspace over several nodes the hierarchical one (from
    /// [`hier::HIER_MIN_ENV`]), else the tuned table (a tuning file's, online tuning's:
    /// [`Nvshmem::tuning_table`]), else the built-in [`SELECTION`] table. For ops the hierarchical
    /// algorithm serves (all but integer averages, which a call keeps flat).
    ///
    /// [`Nvshmem::tuning_table`]: crate::Nvshmem::tuning_table
    pub fn choose(&self, bytes: usize, dtype: Dtype) -> AllreduceAlgo {
        match hier::auto_first(self.env_algo, self.hier_min(), bytes, true) {
            Some(a) => a,
            None => self
                .tuned(bytes, dtype)
                .unwrap_or_else(|| self.table_choice(bytes, dtype)),
        }
    }

    /// From how many bytes `Auto` takes the hierarchical algorithm, where this workspace has it
    /// (the tuned tables, measured on flat teams, do not see it).
    pub(super) fn hier_min(&self) -> Option<usize> {
        self.hier.as_ref().map(|h| h.min_bytes)
    }

    /// The built-in table's choice.
    pub(super) fn table_choice(&self, bytes: usize, dtype: Dtype) -> AllreduceAlgo {
        select(SELECTION, self.ws.n_pes(), bytes, dtype).unwrap_or(AllreduceAlgo::Ring)
    }

    /// The tuned table's choice, if it has one (a name this runtime does not know counts as
    /// none).
    pub(super) fn tuned(&self, bytes: usize, dtype: Dtype) -> Option<AllreduceAlgo> {
        self.ws
            .runtime()
            .tuned(&self.tuning_key, bytes, dtype.size(), |c| {
                c.and_then(|name| AllreduceAlgo::parse(name).ok())
            })
            .filter(|&a| AllreduceAlgo::ALL.contains(&a))
    }

    /// The online tunings this workspace made, in order.
    pub fn online_tunings(&self) -> &[OnlineTuning] {
        self.online.as_ref().map_or(&[], |o| &o.records)
    }

    /// Whether `Auto` calls here tune unseen sizes ([`Nvshmem::allreduce_workspace_online`]).
    ///
    /// [`Nvshmem::allreduce_workspace_online`]: crate::Nvshmem::allreduce_workspace_online
    pub fn tunes_online(&self) -> bool {
        self.online.is_some()
    }

    /// Online tuning of the bucket of `input`'s size: every algorithm runs on the call's own
    /// buffers (in place, the data is saved first and put back after), timed as
    /// [`crate::coll::tuning`] says; the winner goes into the runtime's tuned table. The
    /// output's contents are undefined afterwards (the real call overwrites them).
    pub(super) fn tune_online<T: Reducible>(
        &mut self,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        let Some(mut online) = self.online.take() else {
            return Ok(self.table_choice(input.num_bytes(), T::DTYPE));
        };
        let r = self.tune_with(&mut online, input, output, op, stream);
        self.online = Some(online);
        r
    }

    fn tune_with<T: Reducible>(
        &mut self,
        online: &mut Online<'nv>,
        input: SymView<'_, T>,
        output: SymView<'_, T>,
        op: ReduceOp,
        stream: &CudaStream,
    ) -> Result<AllreduceAlgo> {
        use cudarc::driver::result as cu;
        let started = std::time::Instant::now();
        let bytes = input.num_bytes();
        let algos = AllreduceAlgo::ALL;
        let runs = online::online_runs(bytes, algos.len(), online.budget_ms);
        online.timer.set_timeout(self.ws.timeout());
        let in_place = input.as_device_ptr() == output.as_device_ptr();
        self.ws.runtime().bind()?;
        // In place, every run reduces the buffer again: keep the data to put back.
        let backup = if in_place {
            // SAFETY: a fresh allocation on this context, freed on the same stream below.
            let b = unsafe { cu::malloc_async(stream.cu_stream(), bytes) }?;
            // SAFETY: `bytes` of device memory on both sides, in stream order.
            unsafe {
                cu::memcpy_dtod_async(b, input.as_device_ptr() as u64, bytes, stream.cu_stream())
            }?;
            Some(b)
        } else {
            None
        };
        let timed = (|| -> Result<_> {
            let mut run =
                |i: usize, s: &CudaStream| self.run(input, output, op, algos[i], s).map(|_| ());
            let local = online.timer.run(algos.len(), 1, runs, &mut run, stream)?;
            self.check()?;
            let samples = online.timer.samples(local.len())?;
            self.run(
                samples,
                samples,
                ReduceOp::Max,
                AllreduceAlgo::OneShot,
                stream,
            )?;
            self.sync(stream)?;
            Ok((local, samples.to_vec()?))
        })();
        if let Some(b) = backup {
            // Every peer's last run is over once our MAX completed (theirs came after it in
            // their stream order), so nothing reads the buffer while it is put back.
            // SAFETY: as above; `b` is freed after the copy in stream order.
            unsafe {
                let _ = cu::memcpy_dtod_async(
                    input.as_device_ptr() as u64,
                    b,
                    bytes,
                    stream.cu_stream(),
                );
                let _ = cu::free_async(b, stream.cu_stream());
            }
        }
        let (local, maxed) = timed?;
        let names: Vec<String> = algos.iter().map(|a| a.name().to_string()).collect();
        let m = measurement(&names, &local, &maxed, runs);
        let choice = algos[m.best];
        let bucket = crate::core::tuning::size_bucket(bytes);
        self.ws
            .runtime()
            .record_tuned(&self.tuning_key, T::DTYPE.size(), bucket, choice.name());
        let wall = started.elapsed();
        log::info!(
            "allreduce online tuning at {} {}: {} ({:.1} us; {}) in {:.2} ms",
            crate::core::env_value::size_label(bytes),
            T::DTYPE.name(),
            choice.name(),
            m.winner().us,
            m.candidates
                .iter()
                .map(|c| format!("{} {:.1}", c.name, c.us))
                .collect::<Vec<_>>()
                .join(", "),
            wall.as_secs_f64() * 1e3
        );
        online.records.push(OnlineTuning {
            bytes,
            bucket,
            dtype: T::DTYPE,
            choice,
            wall,
            measurement: m,
        });
        Ok(choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_picks_by_pe_count_and_size() {
        let pick = |n, bytes| select(SELECTION, n, bytes, Dtype::F32).unwrap();
        assert_eq!(pick(1, 1 << 30), AllreduceAlgo::OneShot);
        assert_eq!(pick(2, 4096), AllreduceAlgo::OneShot);
        assert_eq!(pick(2, 512 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(2, 1 << 20), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(2, 8 << 20), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(2, 16 << 20), AllreduceAlgo::Ring);
        assert_eq!(pick(2, 32 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(2, 64 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(3, 512 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(3, 1 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(3, 64 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 256 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(4, 512 << 10), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 1 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 2 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 16 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 32 << 20), AllreduceAlgo::Ring);
        assert_eq!(pick(4, 64 << 20), AllreduceAlgo::Ring);
        assert_eq!(pick(4, 128 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(4, 256 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(8, 4096), AllreduceAlgo::OneShot);
        assert_eq!(pick(8, 128 << 10), AllreduceAlgo::OneShot);
        assert_eq!(pick(8, 256 << 10), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(8, 1 << 20), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(8, 64 << 20), AllreduceAlgo::TwoShot);
        assert_eq!(pick(16, 4096), AllreduceAlgo::RecursiveDoubling);
        assert_eq!(pick(16, 256 << 20), AllreduceAlgo::Ring);
    }
}
