//! What the collectives beside allreduce share above the protocol layer: argument checks, the
//! description of a call (with its checked-mode meta word) and the names of their kernels in
//! messages. The protocol part is [`crate::proto::family`]. Allreduce takes its overlap check
//! from here too.

use crate::coll::node_plans;
use crate::coll::op::{refused_in_steps, ReduceOp};
use crate::coll::table::Collective;
use crate::core::buffer::SymView;
use crate::core::element::{Dtype, Element};
use crate::core::error::{Error, Result};
use crate::core::node::NodeLayout;
use crate::core::outside::Located;
use crate::proto::family::FamilyProtocol;
use crate::proto::family::{check_root, FamilyCall};
use crate::proto::staging::StageIo;
use crate::proto::{FamilyWorkspace, Workspace};
use crate::sys;
use cudarc::driver::CudaStream;
use std::ops::Range;

/// The call of collective `code` on `input` and `output`: `count` elements per rank block (blocks
/// `count` apart), the element type's size, the op and root where it has them, and the meta word
/// checked mode compares.
pub(crate) fn call_of<T: Element>(
    code: u32,
    op: Option<ReduceOp>,
    root: Option<i32>,
    input: &SymView<'_, T>,
    output: &SymView<'_, T>,
    count: usize,
) -> FamilyCall {
    FamilyCall {
        code,
        meta: family_meta(T::DTYPE, op, code, root),
        input: input.as_device_ptr().cast(),
        output: output.as_device_ptr().cast(),
        count,
        stride: count,
        elem_bytes: std::mem::size_of::<T>(),
        root: root.unwrap_or(0),
    }
}

/// What [`staged_call`] launches: the collective's code, op and root where it has them, the
/// elements per rank block, and the launch's name in errors.
pub(crate) struct Spec {
    pub code: u32,
    pub op: Option<ReduceOp>,
    pub root: Option<i32>,
    pub count: usize,
    pub launch: &'static str,
}

/// One call of a family collective on its checked, located buffers: stages the caller's own
/// memory (`io`: what this PE reads and writes; `agreed`: the call's sizes are the same on every
/// member, so the staging area may grow here), runs `run` on the symmetric views, then copies a
/// staged output back.
pub(crate) fn staged<'s, 'nv: 's, T: Element>(
    fam: &mut FamilyWorkspace<'nv>,
    located: [Located<'s, T>; 2],
    io: StageIo,
    agreed: bool,
    stream: &CudaStream,
    run: impl FnOnce(&mut FamilyWorkspace<'nv>, SymView<'s, T>, SymView<'s, T>) -> Result<()>,
) -> Result<()> {
    let what = fam.ws().call_name();
    let st = fam.ws_mut().stage(what, located, io, agreed, stream)?;
    run(fam, st.input(), st.output())?;
    st.finish(stream)
}

/// [`staged`] for a collective of equal sizes on every member that launches `entry` once per
/// segment ([`FamilyWorkspace::call`]).
pub(crate) fn staged_call<'s, 'nv: 's, T: Element>(
    fam: &mut FamilyWorkspace<'nv>,
    located: [Located<'s, T>; 2],
    io: StageIo,
    spec: Spec,
    stream: &CudaStream,
    entry: impl Fn(sys::nvshmemrs_family_args, i32, i32, sys::cudaStream_t) -> i32,
) -> Result<()> {
    let elem_bytes = std::mem::size_of::<T>();
    let layout = node_steps_for(
        fam.nodes_for(spec.count * elem_bytes, elem_bytes),
        spec.op,
        T::DTYPE,
        fam.protocol() == FamilyProtocol::Hierarchical,
        fam.ws().call_name(),
    )?;
    staged(fam, located, io, true, stream, |fam, input, output| {
        let call = call_of(spec.code, spec.op, spec.root, &input, &output, spec.count);
        let me = fam.ws().runtime().my_pe();
        let plan = layout
            .and_then(|l| node_plans::plan(spec.code, l, me, spec.count, spec.root.unwrap_or(0)));
        match plan {
            Some(plan) => {
                // Each step's root is a rank of its own team.
                let meta = |r| family_meta(T::DTYPE, spec.op, spec.code, spec.root.map(|_| r));
                fam.call_nodes(spec.launch, &plan, &call, meta, stream, entry)
            }
            None => fam.call(spec.launch, &call, stream, entry),
        }
    })
}

/// The node layout a call takes its node-aware steps over: `layout` (what the workspace and
/// the protocol offer), unless the steps would reduce `op` over `dtype` apart from a flat call
/// ([`ReduceOp::reduces_in_steps`]); then flat (None), or an error where the steps were asked
/// for (`asked`). Alike on every member: type, op and protocol are the call's.
fn node_steps_for(
    layout: Option<NodeLayout>,
    op: Option<ReduceOp>,
    dtype: Dtype,
    asked: bool,
    what: &'static str,
) -> Result<Option<NodeLayout>> {
    match (layout, op) {
        (Some(_), Some(op)) if !op.reduces_in_steps(dtype) => match asked {
            true => Err(refused_in_steps(what, "the node-aware steps", dtype)),
            false => Ok(None),
        },
        (layout, _) => Ok(layout),
    }
}

/// The checks of a call whose input and output are alike (allreduce, broadcast, reduce), in this
/// order: buffers of one length, this PE a member, at least one element, input and output the
/// same range (in place) or apart (the kernels read parts of the input after writing parts of
/// the output).
pub(crate) fn check_elementwise<T: Element>(
    what: &'static str,
    ws: &Workspace<'_>,
    input: &Located<'_, T>,
    output: &Located<'_, T>,
) -> Result<()> {
    if input.len() != output.len() {
        return Err(Error::LengthMismatch {
            what,
            dest: output.len(),
            src: input.len(),
        });
    }
    ws.rank()?;
    if input.is_empty() {
        return Err(Error::EmptyCollective { what });
    }
    let (i, o) = (input.byte_range(), output.byte_range());
    refuse_overlap(what, i.clone(), o.clone(), i == o)
}

/// [`check_elementwise`], then the root a team rank (broadcast, reduce).
pub(crate) fn check_rooted<T: Element>(
    what: &'static str,
    fam: &FamilyWorkspace<'_>,
    input: &Located<'_, T>,
    output: &Located<'_, T>,
    root: i32,
) -> Result<()> {
    check_elementwise(what, fam.ws(), input, output)?;
    check_root(what, root, fam.ws().n_pes())
}

/// Input and output may overlap only where the call runs in place (`in_place`: the caller
/// found the input where the collective's in-place form puts it); else [`Error::Overlap`].
pub(crate) fn refuse_overlap(
    what: &'static str,
    input: Range<usize>,
    output: Range<usize>,
    in_place: bool,
) -> Result<()> {
    if in_place || input.end <= output.start || output.end <= input.start {
        return Ok(());
    }
    Err(Error::Overlap {
        what,
        input: (input.start, input.end),
        output: (output.start, output.end),
    })
}

/// A buffer holding one block of `block` elements per member: its length must be
/// `n` x `block`, else [`Error::CollectiveShape`] naming `which` buffer.
pub(crate) fn check_blocks(
    what: &'static str,
    which: &str,
    len: usize,
    block: usize,
    n: i32,
) -> Result<()> {
    match block.checked_mul(n as usize) {
        Some(need) if need == len => Ok(()),
        _ => Err(Error::CollectiveShape {
            what,
            detail: format!(
                "the {which} holds {len} elements, but {n} members x {block} elements need \
                 {}; pass one block per member",
                block.saturating_mul(n as usize)
            ),
        }),
    }
}

/// Per-member parts of a buffer, in elements: member r's part is `counts[r]` elements from
/// `displs[r]` (MPI's counts and displacements). Counts may be 0.
#[derive(Clone, Copy, Debug)]
pub struct Parts<'a> {
    /// Elements in each member's part, one per member.
    pub counts: &'a [usize],
    /// Where each member's part starts, in elements from the buffer's start.
    pub displs: &'a [usize],
}

/// [`Parts`] in device memory: `n` u64 counts and `n` u64 displacements, read by the kernel, so
/// that counts a kernel computed need no trip to the host. The kernel checks them against the
/// buffers; out of range, the call fails with [`Error::TransferMismatch`] on every PE it
/// exchanges with.
pub struct DeviceParts<'a> {
    /// Elements in each member's part, one per member.
    pub counts: SymView<'a, u64>,
    /// Where each member's part starts, in elements from the buffer's start.
    pub displs: SymView<'a, u64>,
}

impl Parts<'_> {
    /// Checks the parts against a buffer of `len` elements shared among `n` members.
    pub(crate) fn check(&self, what: &'static str, which: &str, n: i32, len: usize) -> Result<()> {
        let shape = |detail: String| Err(Error::CollectiveShape { what, detail });
        if self.counts.len() != n as usize || self.displs.len() != n as usize {
            return shape(format!(
                "the {which} parts have {} counts and {} displacements; pass one of each per \
                 member ({n})",
                self.counts.len(),
                self.displs.len()
            ));
        }
        for (r, (&c, &d)) in self.counts.iter().zip(self.displs).enumerate() {
            match c.checked_add(d) {
                Some(end) if end <= len => {}
                _ => {
                    return shape(format!(
                        "part {r} of the {which} ({c} elements from {d}) reaches past its {len} \
                         elements"
                    ))
                }
            }
        }
        Ok(())
    }

    /// Whether parts apart from each other (as the callers require) cover all `len` elements
    /// of their buffer: then a call writes all of it.
    pub(crate) fn cover(&self, len: usize) -> bool {
        self.counts
            .iter()
            .try_fold(0usize, |a, &c| a.checked_add(c))
            == Some(len)
    }
}

impl DeviceParts<'_> {
    /// Device addresses of the counts and displacements, each checked to hold `n` values.
    pub(crate) fn ptrs(&self, what: &'static str, which: &str, n: i32) -> Result<[*const u64; 2]> {
        for (name, v) in [("counts", &self.counts), ("displacements", &self.displs)] {
            if v.len() != n as usize {
                return Err(Error::CollectiveShape {
                    what,
                    detail: format!(
                        "the {which} {name} hold {} values; pass one per member ({n})",
                        v.len()
                    ),
                });
            }
        }
        Ok([self.counts.as_device_ptr(), self.displs.as_device_ptr()].map(|p| p.cast_const()))
    }
}

/// A host-count exchange of `n` members takes 2 x n transfers: refused past the list's limit.
pub(crate) fn check_host_counts(what: &'static str, n: i32) -> Result<()> {
    let max = crate::proto::exchange::MAX_OPS / 2;
    if n as usize <= max {
        return Ok(());
    }
    Err(Error::CollectiveShape {
        what,
        detail: format!(
            "counts on the host take up to {max} members, this team has {n}; pass the counts in \
             device memory (run_device)"
        ),
    })
}

/// A checked-mode meta word of the family: element type, op (reductions), the collective's
/// code and root + 1 (rooted ones; 0 otherwise).
pub fn family_meta(dtype: Dtype, op: Option<ReduceOp>, code: u32, root: Option<i32>) -> u64 {
    let op = op.map_or(0xff, |o| o as u64);
    let root = root.map_or(0, |r| r as u64 + 1);
    dtype as u64 | op << 8 | (code as u64) << 16 | root << 32
}

/// An allgatherv's [`family_meta`] with a digest of every member's part in the bits a root
/// takes elsewhere: members that pass different parts disagree in checked mode's header.
pub fn parts_meta(dtype: Dtype, parts: &[(usize, usize)]) -> u64 {
    let words = parts.iter().flat_map(|&(d, b)| [d as u64, b as u64]);
    let h = crate::core::digest::fnv1a(words.flat_map(u64::to_le_bytes));
    // Folded to the 32 bits above the code; 0 would read as "no parts".
    let digest = ((h ^ (h >> 32)) & 0xffff_ffff).max(1);
    family_meta(dtype, None, Collective::Allgatherv.code(), None) | digest << 32
}

/// [`family_meta`] in words: "f32 sum, root 1", "bf16" (an allgatherv's parts digest in hex).
pub fn describe_family_meta(meta: u64) -> String {
    let dtype = Dtype::from_code(meta & 0xff).map_or("an unknown type", Dtype::name);
    let mut s = dtype.to_string();
    let op = (meta >> 8) & 0xff;
    if op != 0xff {
        let name = ReduceOp::ALL
            .into_iter()
            .find(|&o| o as u64 == op)
            .map_or("an unknown op", ReduceOp::name);
        s = format!("{s} {name}");
    }
    let high = meta >> 32;
    // Above the code: a rooted collective's root + 1, else a digest of the parts (allgatherv).
    let rooted = Collective::from_code((meta >> 16) & 0xff).is_some_and(|c| c.row().rooted);
    if high > 0 {
        s = match rooted {
            true => format!("{s}, root {}", high - 1),
            false => format!("{s}, parts {high:08x}"),
        };
    }
    if meta & crate::proto::family::META_LL != 0 {
        s = format!("{s}, low-latency lines");
    }
    if meta & crate::proto::family::META_SPLIT != 0 {
        s = format!("{s}, split in parts");
    }
    if meta & crate::proto::family::META_PULL != 0 {
        s = format!("{s}, pulled");
    }
    s
}

/// Name of a family kernel's code (the status record's index) in messages: its row's name
/// ([`crate::coll::table::COLLECTIVES`]).
pub fn family_code_name(code: u64) -> &'static str {
    Collective::from_code(code).map_or("header check", Collective::name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_averages_stay_flat_and_refuse_the_steps_asked_for() {
        let l = NodeLayout::new(2, 4);
        let steps = |op, dtype, asked| node_steps_for(l, op, dtype, asked, "reduce-scatter");
        // Floats average in steps; every other op of every type reduces in steps; no op at all
        // (allgather) moves in steps.
        assert_eq!(steps(Some(ReduceOp::Avg), Dtype::Bf16, true).unwrap(), l);
        assert_eq!(steps(Some(ReduceOp::Sum), Dtype::U32, true).unwrap(), l);
        assert_eq!(steps(None, Dtype::U8, false).unwrap(), l);
        // An integer average: flat under Auto or a tuned table, an error where asked for.
        assert_eq!(steps(Some(ReduceOp::Avg), Dtype::U32, false).unwrap(), None);
        let err = steps(Some(ReduceOp::Avg), Dtype::I64, true).unwrap_err();
        assert!(
            matches!(
                err,
                Error::CollectiveShape {
                    what: "reduce-scatter",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("truncating twice"), "{err}");
        // No layout: nothing to refuse.
        assert_eq!(
            node_steps_for(None, Some(ReduceOp::Avg), Dtype::I32, true, "x").unwrap(),
            None
        );
    }

    #[test]
    fn shapes_and_overlaps_are_checked() {
        assert!(check_blocks("allgather", "output", 12, 3, 4).is_ok());
        let err = check_blocks("allgather", "output", 12, 4, 4)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("holds 12 elements") && err.contains("need 16"),
            "{err}"
        );
        assert!(check_blocks("alltoall", "input", 5, usize::MAX, 2).is_err());
        assert!(refuse_overlap("reduce", 0..64, 64..96, false).is_ok());
        assert!(refuse_overlap("reduce", 0..64, 32..96, true).is_ok());
        assert!(matches!(
            refuse_overlap("reduce", 0..64, 32..96, false),
            Err(Error::Overlap { .. })
        ));
    }

    #[test]
    fn parts_that_sum_to_the_buffer_cover_it() {
        let parts = Parts {
            counts: &[3, 0, 5],
            displs: &[0, 3, 3],
        };
        assert!(parts.cover(8));
        assert!(!parts.cover(9), "a gap is left");
        let huge = Parts {
            counts: &[usize::MAX, 2],
            displs: &[0, 0],
        };
        assert!(!huge.cover(1));
    }

    #[test]
    fn meta_words_read_back_as_arguments() {
        let code = Collective::Reduce.code();
        let m = family_meta(Dtype::Bf16, Some(ReduceOp::Max), code, Some(3));
        assert_eq!(describe_family_meta(m), "bf16 max, root 3");
        let m = family_meta(Dtype::U8, None, Collective::Allgather.code(), None);
        assert_eq!(describe_family_meta(m), "u8");
        let ll = m | crate::proto::family::META_LL;
        assert_ne!(ll, m);
        assert_eq!(describe_family_meta(ll), "u8, low-latency lines");
        let split = family_meta(Dtype::F32, Some(ReduceOp::Sum), code, Some(2))
            | crate::proto::family::META_SPLIT;
        assert_eq!(
            describe_family_meta(split),
            "f32 sum, root 2, split in parts"
        );
        assert_ne!(
            crate::proto::family::META_SPLIT,
            crate::proto::family::META_LL
        );
        let pull = family_meta(Dtype::Bf16, Some(ReduceOp::Sum), code, Some(0))
            | crate::proto::family::META_PULL;
        assert_eq!(describe_family_meta(pull), "bf16 sum, root 0, pulled");
        // Above the code's byte, below the root's word, apart from the other protocols'.
        let p = crate::proto::family::META_PULL;
        assert!(p > 0xff_ffff && p < 1 << 32);
        assert_eq!(
            p & (crate::proto::family::META_LL | crate::proto::family::META_SPLIT),
            0
        );
        // An allgatherv's parts: a digest in place of the root, different for other parts.
        let p = parts_meta(Dtype::F32, &[(0, 40), (40, 12)]);
        assert!(
            describe_family_meta(p).starts_with("f32, parts "),
            "{}",
            describe_family_meta(p)
        );
        assert_ne!(p, parts_meta(Dtype::F32, &[(0, 48), (48, 12)]));
        assert_ne!(p, parts_meta(Dtype::F32, &[(0, 40), (40, 16)]));
        assert_eq!(
            p & 0xffff_ffff,
            family_meta(Dtype::F32, None, Collective::Allgatherv.code(), None)
        );
        // Roots, ops and types that differ give different words.
        let a = family_meta(Dtype::F32, None, Collective::Broadcast.code(), Some(0));
        let b = family_meta(Dtype::F32, None, Collective::Broadcast.code(), Some(1));
        assert_ne!(a, b);
        assert_ne!(
            family_meta(Dtype::F32, Some(ReduceOp::Sum), code, Some(0)),
            family_meta(Dtype::F32, Some(ReduceOp::Avg), code, Some(0))
        );
        assert_eq!(
            family_code_name(Collective::Alltoall.code() as u64),
            "alltoall"
        );
    }
}
