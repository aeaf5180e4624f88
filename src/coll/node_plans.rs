//! Which steps the family's node-aware form takes (`crate::proto::node_steps`): allgather,
//! reduce-scatter, broadcast and alltoall over M nodes of G PEs, PE `p` on node `n = p / G` at
//! local index `l = p % G`, every step the collective's own kernel on the node or the rail.
//! Across nodes each takes only the rail of its local index, so every GPU's rail (its NIC on
//! a cluster) carries its share:
//!
//! - allgather: the rail gathers the blocks of local index `l` into their places in the output
//!   (blocks `G` apart); then, once per node `m`, the node gathers node `m`'s blocks in place.
//!   Across nodes each PE receives M - 1 blocks on its own rail (a flat allgather: G (M - 1),
//!   one from every PE on another node).
//! - reduce-scatter: once per node `m`, the node reduces node `m`'s blocks, local index `l`'s
//!   sum into scratch row `m`; then the rail reduces the rows, row `n` to this PE. Across
//!   nodes each PE sends M - 1 blocks (a flat reduce-scatter sends G (M - 1)).
//! - broadcast: the root's node gets the whole buffer (a node broadcast); each rail takes one
//!   of G pieces from the root's node (a rail broadcast, the last piece with the remainder);
//!   every other node passes the pieces on (a node broadcast per piece). Across nodes each
//!   node receives the buffer once, split over its G rails.
//! - alltoall: the rail exchanges rows of G blocks (the blocks for node `m`'s PEs go to rail
//!   member `m`) into scratch; then, once per node `m`, the node exchanges row `m`'s blocks
//!   into output row `m`. The same bytes cross nodes as flat, in M - 1 messages a PE where
//!   flat sends G (M - 1).
//!
//! Steps once per node make M launches on the node: fine for the few nodes of one job's
//! NVLink domain; docs/scale.md prices them at scale. The node steps are left out where G is 1
//! (the rail is then the world).

use crate::coll::table::Collective;
use crate::core::node::NodeLayout;
use crate::proto::node_steps::{NodePlan, NodeStep, Place, StepTeam};

/// The steps of collective `code` (its row's in src/coll/table.rs) on world PE `me` of
/// `layout`, `count` elements per rank block (broadcast: the buffer), `root` a world PE
/// (broadcast); None for a collective without a node-aware form.
pub(crate) fn plan(
    code: u32,
    layout: NodeLayout,
    me: i32,
    count: usize,
    root: i32,
) -> Option<NodePlan> {
    let at = Where::of(layout, me);
    Some(match code {
        c if c == Collective::Allgather.code() => allgather(at, count),
        c if c == Collective::ReduceScatter.code() => reduce_scatter(at, count),
        c if c == Collective::Broadcast.code() => broadcast(at, count, Where::of(layout, root)),
        c if c == Collective::Alltoall.code() => alltoall(at, count),
        _ => return None,
    })
}

/// A PE's place: nodes `m`, PEs a node `g`, its node `n` and local index `l`.
#[derive(Clone, Copy, Debug)]
struct Where {
    m: usize,
    g: usize,
    n: usize,
    l: usize,
}

impl Where {
    fn of(layout: NodeLayout, pe: i32) -> Where {
        Where {
            m: layout.nodes() as usize,
            g: layout.size() as usize,
            n: layout.node_of(pe) as usize,
            l: layout.local_of(pe) as usize,
        }
    }
}

/// A step with no root.
fn step(team: StepTeam, input: (Place, usize), output: (Place, usize), count: usize) -> NodeStep {
    NodeStep {
        team,
        input,
        output,
        count,
        stride: count,
        root: 0,
    }
}

/// Nodes of one PE: the rail is the world, and the flat call on it is the whole plan.
fn rail_only(c: usize, root: usize) -> NodePlan {
    let s = step(StepTeam::Rail, (Place::Input, 0), (Place::Output, 0), c);
    NodePlan {
        steps: vec![NodeStep {
            root: root as i32,
            ..s
        }],
        scratch: 0,
    }
}

fn allgather(w: Where, c: usize) -> NodePlan {
    let Where { m, g, n: _, l } = w;
    let mut steps = vec![NodeStep {
        stride: g * c,
        ..step(StepTeam::Rail, (Place::Input, 0), (Place::Output, l * c), c)
    }];
    if g > 1 {
        steps.extend((0..m).map(|k| {
            let own = (Place::Output, (k * g + l) * c);
            step(StepTeam::Node, own, (Place::Output, k * g * c), c)
        }));
    }
    NodePlan { steps, scratch: 0 }
}

fn reduce_scatter(w: Where, c: usize) -> NodePlan {
    let Where { m, g, .. } = w;
    if g == 1 {
        return rail_only(c, 0);
    }
    let mut steps: Vec<NodeStep> = (0..m)
        .map(|k| {
            let row = (Place::Input, k * g * c);
            step(StepTeam::Node, row, (Place::Scratch, k * c), c)
        })
        .collect();
    steps.push(step(
        StepTeam::Rail,
        (Place::Scratch, 0),
        (Place::Output, 0),
        c,
    ));
    NodePlan {
        steps,
        scratch: m * c,
    }
}

/// Elements `[b, e)` of piece `j` of a buffer of `c` split into `g` (the last takes the rest).
fn piece(c: usize, g: usize, j: usize) -> (usize, usize) {
    let q = c / g;
    (j * q, if j + 1 == g { c } else { (j + 1) * q })
}

fn broadcast(w: Where, c: usize, root: Where) -> NodePlan {
    let Where { g, n, l, .. } = w;
    let with_root = |s: NodeStep, r: usize| NodeStep {
        root: r as i32,
        ..s
    };
    if g == 1 {
        return rail_only(c, root.n);
    }
    let mut steps = Vec::new();
    if n == root.n {
        let s = step(StepTeam::Node, (Place::Input, 0), (Place::Output, 0), c);
        steps.push(with_root(s, root.l));
    }
    let (b, e) = piece(c, g, l);
    if e > b {
        let s = step(
            StepTeam::Rail,
            (Place::Output, b),
            (Place::Output, b),
            e - b,
        );
        steps.push(with_root(s, root.n));
    }
    if n != root.n {
        for j in 0..g {
            let (b, e) = piece(c, g, j);
            if e > b {
                let s = step(
                    StepTeam::Node,
                    (Place::Output, b),
                    (Place::Output, b),
                    e - b,
                );
                steps.push(with_root(s, j));
            }
        }
    }
    NodePlan { steps, scratch: 0 }
}

fn alltoall(w: Where, c: usize) -> NodePlan {
    let Where { m, g, .. } = w;
    if g == 1 {
        return rail_only(c, 0);
    }
    let rows = g * c;
    let mut steps = vec![step(
        StepTeam::Rail,
        (Place::Input, 0),
        (Place::Scratch, 0),
        rows,
    )];
    steps.extend((0..m).map(|k| {
        let row = k * rows;
        step(
            StepTeam::Node,
            (Place::Scratch, row),
            (Place::Output, row),
            c,
        )
    }));
    NodePlan {
        steps,
        scratch: m * rows,
    }
}

#[cfg(test)]
mod tests {
    //! The plans run on the host: every PE's memory a vector, every step the flat collective's
    //! definition over its team's members (all members' steps on a team taken together, in
    //! their order), the result compared with the flat collective over the world.

    use super::*;
    use crate::coll::op::ReduceOp;
    use crate::core::element::Dtype;
    use std::collections::HashMap;

    /// Where a PE's buffers lie in its memory (element offsets), and their lengths.
    #[derive(Clone, Copy)]
    struct Bufs {
        input: usize,
        output: usize,
        scratch: usize,
    }

    fn addr(b: Bufs, (place, off): (Place, usize)) -> usize {
        off + match place {
            Place::Input => b.input,
            Place::Output => b.output,
            Place::Scratch => b.scratch,
        }
    }

    /// Runs every PE's plan of `code`; members of one team take their next step on it
    /// together. Panics where members disagree on a step's shape, or where no team can go on
    /// (a plan that would hang).
    fn run(code: u32, layout: NodeLayout, mem: &mut [Vec<i64>], bufs: Bufs, c: usize, root: i32) {
        run_with(code, layout, mem, bufs, (c, root), Reduction::SUM)
    }

    /// [`run`] whose reduce-scatter steps reduce with `red`.
    fn run_with(
        code: u32,
        layout: NodeLayout,
        mem: &mut [Vec<i64>],
        bufs: Bufs,
        (c, root): (usize, i32),
        red: Reduction,
    ) {
        let np = layout.nodes() * layout.size();
        let plans: Vec<NodePlan> = (0..np)
            .map(|p| plan(code, layout, p, c, root).unwrap())
            .collect();
        for (p, pl) in plans.iter().enumerate() {
            // Scratch the plan needs fits in front of the memory's end.
            assert!(bufs.scratch + pl.scratch <= mem[p].len(), "PE {p}: scratch");
        }
        let mut next = vec![0usize; np as usize];
        // The team a PE's step runs on, as a key: (team, node or local index).
        let key = |p: i32, t: StepTeam| match t {
            StepTeam::Node => (t, layout.node_of(p)),
            StepTeam::Rail => (t, layout.local_of(p)),
        };
        let members = |t: StepTeam, id: i32| -> Vec<i32> {
            (0..np)
                .filter(|&p| key(p, t) == (t, id))
                .collect::<Vec<_>>()
        };
        loop {
            let waiting: Vec<i32> = (0..np)
                .filter(|&p| next[p as usize] < plans[p as usize].steps.len())
                .collect();
            if waiting.is_empty() {
                return;
            }
            let ready = waiting.iter().find_map(|&p| {
                let t = plans[p as usize].steps[next[p as usize]].team;
                let (_, id) = key(p, t);
                let ms = members(t, id);
                ms.iter()
                    .all(|&q| {
                        plans[q as usize]
                            .steps
                            .get(next[q as usize])
                            .is_some_and(|s| s.team == t)
                    })
                    .then_some(ms)
            });
            let ms = ready.expect("no team can take its next step: the plans would hang");
            let steps: Vec<NodeStep> = ms
                .iter()
                .map(|&q| plans[q as usize].steps[next[q as usize]])
                .collect();
            let s0 = steps[0];
            for s in &steps {
                assert_eq!(
                    (s.count, s.stride, s.root),
                    (s0.count, s0.stride, s0.root),
                    "members disagree"
                );
            }
            flat(code, mem, &ms, &steps, bufs, red);
            for &q in &ms {
                next[q as usize] += 1;
            }
        }
    }

    /// How a reduce-scatter step reduces: as the kernels do, each step runs the call's op over
    /// its own members. Values lie in `ty`'s range (u32: 0 to 2^32 - 1, i32 signed, i64 as
    /// they are); sums and products wrap to the type; an average divides the step's wrapped
    /// sum by the step's member count, truncating toward zero.
    #[derive(Clone, Copy, Debug)]
    struct Reduction {
        op: ReduceOp,
        ty: Dtype,
    }

    impl Reduction {
        const SUM: Reduction = Reduction {
            op: ReduceOp::Sum,
            ty: Dtype::I64,
        };

        fn wrap(self, v: i64) -> i64 {
            match self.ty {
                Dtype::U32 => v as u32 as i64,
                Dtype::I32 => v as i32 as i64,
                _ => v,
            }
        }

        /// The op over `values` (at least one), `k` of them.
        fn of(self, values: impl IntoIterator<Item = i64>, k: usize) -> i64 {
            let mut it = values.into_iter();
            let first = it.next().expect("a value");
            let acc = it.fold(first, |a, b| {
                self.wrap(match self.op {
                    ReduceOp::Sum | ReduceOp::Avg => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                })
            });
            match self.op {
                ReduceOp::Avg => self.wrap(acc / k as i64),
                _ => acc,
            }
        }
    }

    /// One flat step of `code` over members `ms` (team ranks in order) with their `steps`.
    fn flat(
        code: u32,
        mem: &mut [Vec<i64>],
        ms: &[i32],
        steps: &[NodeStep],
        bufs: Bufs,
        red: Reduction,
    ) {
        let (c, stride) = (steps[0].count, steps[0].stride);
        let k = ms.len();
        let read = |mem: &[Vec<i64>], r: usize, off: usize| -> Vec<i64> {
            let a = addr(bufs, steps[r].input) + off;
            mem[ms[r] as usize][a..a + c].to_vec()
        };
        // Everything read before anything is written (the kernels' in-place forms).
        let mut writes: Vec<(usize, usize, Vec<i64>)> = Vec::new();
        for r in 0..k {
            let out = addr(bufs, steps[r].output);
            if code == Collective::Allgather.code() {
                for s in 0..k {
                    writes.push((r, out + s * stride, read(mem, s, 0)));
                }
            } else if code == Collective::ReduceScatter.code() {
                let parts: Vec<Vec<i64>> = (0..k).map(|s| read(mem, s, r * stride)).collect();
                let reduced = (0..c).map(|i| red.of(parts.iter().map(|p| p[i]), k));
                writes.push((r, out, reduced.collect()));
            } else if code == Collective::Broadcast.code() {
                writes.push((r, out, read(mem, steps[0].root as usize, 0)));
            } else if code == Collective::Alltoall.code() {
                for s in 0..k {
                    writes.push((r, out + s * stride, read(mem, s, r * stride)));
                }
            } else {
                unreachable!()
            }
        }
        for (r, at, v) in writes {
            mem[ms[r] as usize][at..at + v.len()].copy_from_slice(&v);
        }
    }

    const POISON: i64 = -1;

    /// A distinct value for element `i` of PE `p`'s input.
    fn value(p: usize, i: usize) -> i64 {
        (p as i64 + 1) * 1_000_000 + i as i64
    }

    /// `np` PEs' memories with input, output and scratch (`lens`) one after the other, input
    /// element i of PE p `value(p, i)`, the rest poisoned.
    fn apart(
        np: usize,
        lens: [usize; 3],
        value: impl Fn(usize, usize) -> i64,
    ) -> (Bufs, Vec<Vec<i64>>) {
        let [in_len, out_len, scratch] = lens;
        let bufs = Bufs {
            input: 0,
            output: in_len,
            scratch: in_len + out_len,
        };
        let mem = (0..np)
            .map(|p| {
                let mut m = vec![POISON; in_len + out_len + scratch];
                for (i, x) in m[..in_len].iter_mut().enumerate() {
                    *x = value(p, i);
                }
                m
            })
            .collect();
        (bufs, mem)
    }

    /// `code` over `layout` with `c` elements (broadcast: from `root`), out of place and in
    /// place where the collective has it, against the flat definition.
    fn check(code: u32, layout: NodeLayout, c: usize, root: i32) {
        let np = (layout.nodes() * layout.size()) as usize;
        let (in_len, out_len) = match code {
            x if x == Collective::Allgather.code() => (c, np * c),
            x if x == Collective::ReduceScatter.code() => (np * c, c),
            x if x == Collective::Broadcast.code() => (c, c),
            _ => (np * c, np * c),
        };
        let expect = |p: usize| -> Vec<i64> {
            match code {
                x if x == Collective::Allgather.code() => {
                    (0..np * c).map(|i| value(i / c, i % c)).collect()
                }
                x if x == Collective::ReduceScatter.code() => (0..c)
                    .map(|i| (0..np).map(|q| value(q, p * c + i)).sum())
                    .collect(),
                x if x == Collective::Broadcast.code() => {
                    (0..c).map(|i| value(root as usize, i)).collect()
                }
                _ => (0..np * c).map(|i| value(i / c, p * c + i % c)).collect(),
            }
        };
        let what = format!(
            "code {code}, {} nodes of {}, count {c}, root {root}",
            layout.nodes(),
            layout.size()
        );
        let scratch = np * c;
        let (bufs, mut mem) = apart(np, [in_len, out_len, scratch], value);
        run(code, layout, &mut mem, bufs, c, root);
        for (p, m) in mem.iter().enumerate() {
            assert_eq!(m[in_len..in_len + out_len], expect(p)[..], "{what}, PE {p}");
            let untouched: Vec<i64> = (0..in_len).map(|i| value(p, i)).collect();
            assert_eq!(m[..in_len], untouched[..], "{what}, PE {p}: input");
        }
        // In place: allgather's input is its own block of the output, reduce-scatter's output
        // its own block of the input, broadcast's input its output.
        let place = |p: usize| match code {
            x if x == Collective::Allgather.code() => Some((p * c, 0)),
            x if x == Collective::ReduceScatter.code() => Some((0, p * c)),
            x if x == Collective::Broadcast.code() => Some((0, 0)),
            _ => None,
        };
        if place(0).is_none() {
            return;
        }
        let big = in_len.max(out_len);
        // The own block differs per PE and the runner places every PE's buffers alike: one run
        // per PE p at p's in-place offsets, checking p's output only.
        for p in 0..np {
            let (ib, ob) = place(p).unwrap();
            let bufs = Bufs {
                input: ib,
                output: ob,
                scratch: big,
            };
            let mut mem: Vec<Vec<i64>> = (0..np)
                .map(|q| {
                    let mut m = vec![POISON; big + scratch];
                    for (i, x) in m[ib..ib + in_len].iter_mut().enumerate() {
                        *x = value(q, i);
                    }
                    m
                })
                .collect();
            run(code, layout, &mut mem, bufs, c, root);
            assert_eq!(
                mem[p][ob..ob + out_len],
                expect(p)[..],
                "{what}, PE {p} in place"
            );
        }
    }

    fn layouts() -> Vec<NodeLayout> {
        [(2, 2), (2, 1), (4, 1), (2, 4), (3, 2), (2, 3), (3, 3)]
            .into_iter()
            .map(|(m, g)| NodeLayout::new(g, m * g).unwrap())
            .collect()
    }

    #[test]
    fn every_plan_gives_the_flat_result() {
        let codes = [
            Collective::Allgather.code(),
            Collective::ReduceScatter.code(),
            Collective::Alltoall.code(),
        ];
        for layout in layouts() {
            for c in [1, 2, 3, 5, 8] {
                for code in codes {
                    check(code, layout, c, 0);
                }
                for root in 0..layout.nodes() * layout.size() {
                    check(Collective::Broadcast.code(), layout, c, root);
                }
            }
        }
    }

    /// Reduce-scatter over `layout`, `c` elements a block, with every step reducing by `red`,
    /// against the flat op over every PE: (the steps' outputs, the flat ones), PE by PE.
    fn reduce_scatter_by(red: Reduction, layout: NodeLayout, c: usize) -> [Vec<Vec<i64>>; 2] {
        let np = (layout.nodes() * layout.size()) as usize;
        // As the GPU tests draw them: -40 to 56, wrapped into the type.
        let value = |p: usize, i: usize| red.wrap(((p * 37 + i * 11) % 97) as i64 - 40);
        let (in_len, out_len) = (np * c, c);
        let (bufs, mut mem) = apart(np, [in_len, out_len, np * c], value);
        let code = Collective::ReduceScatter.code();
        run_with(code, layout, &mut mem, bufs, (c, 0), red);
        let got = mem.iter().map(|m| m[in_len..in_len + out_len].to_vec());
        let want = (0..np).map(|p| {
            (0..c)
                .map(|i| red.of((0..np).map(|q| value(q, p * c + i)), np))
                .collect()
        });
        [got.collect(), want.collect()]
    }

    #[test]
    fn reduce_scatter_steps_match_flat_exactly_where_the_op_reduces_in_steps() {
        for (m, g) in [(2, 2), (3, 2), (2, 3)] {
            let layout = NodeLayout::new(g, m * g).unwrap();
            for ty in [Dtype::U32, Dtype::I32] {
                for op in ReduceOp::ALL {
                    let red = Reduction { op, ty };
                    let [got, want] = reduce_scatter_by(red, layout, 3);
                    if op.reduces_in_steps(ty) {
                        assert_eq!(got, want, "{red:?}, {m} nodes of {g}");
                    } else {
                        // What the runtime refuses: averages of node averages, apart.
                        assert_ne!(got, want, "{red:?}, {m} nodes of {g}");
                    }
                }
            }
        }
    }

    #[test]
    fn scratch_and_launches_as_documented() {
        let l = NodeLayout::new(2, 6).unwrap(); // 3 nodes of 2
        let p = |code: Collective| plan(code.code(), l, 3, 10, 0).unwrap();
        let ag = p(Collective::Allgather);
        assert_eq!((ag.steps.len(), ag.scratch), (1 + 3, 0));
        let rs = p(Collective::ReduceScatter);
        assert_eq!((rs.steps.len(), rs.scratch), (3 + 1, 3 * 10));
        let a2a = p(Collective::Alltoall);
        assert_eq!((a2a.steps.len(), a2a.scratch), (1 + 3, 6 * 10));
        // PE 3 is on node 1, the root's node is 0: a rail piece, then one node step a piece.
        let bc = p(Collective::Broadcast);
        assert_eq!((bc.steps.len(), bc.scratch), (1 + 2, 0));
        assert_eq!(plan(Collective::Reduce.code(), l, 0, 10, 0), None);
        // Every rail step crosses nodes with the PE's own share only.
        let by_team = |pl: &NodePlan| {
            let mut h: HashMap<StepTeam, usize> = HashMap::new();
            for s in &pl.steps {
                *h.entry(s.team).or_default() += s.count;
            }
            h
        };
        assert_eq!(by_team(&ag)[&StepTeam::Rail], 10);
        assert_eq!(by_team(&rs)[&StepTeam::Rail], 10);
        assert_eq!(by_team(&bc)[&StepTeam::Rail], 5);
    }

    #[test]
    fn a_buffer_smaller_than_a_node_skips_the_empty_pieces() {
        let l = NodeLayout::new(4, 8).unwrap();
        for me in 0..8 {
            let pl = plan(Collective::Broadcast.code(), l, me, 2, 5).unwrap();
            assert!(pl.steps.iter().all(|s| s.count > 0), "PE {me}: {pl:?}");
        }
        check(Collective::Broadcast.code(), l, 2, 5);
        check(Collective::Broadcast.code(), l, 3, 0);
    }
}
