//! Pipeline schedules: the order in which one stage runs the forward and backward passes of a
//! step's micro-batches.
//!
//! Both schedules run the backward passes of one stage in micro-batch order 0, 1, ..., so
//! gradients accumulate in the same order as on a single PE (the PP = 1 parity check depends
//! on it). [`simulate`] plays a schedule on every stage with given compute times and no
//! transfer cost: the tests use it to prove the schedules complete, the trainer to estimate
//! the bubble it should expect.

use crate::error::{GptError, Result};
use std::fmt;

/// Which schedule (`--schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScheduleKind {
    /// All forwards, then all backwards: every micro-batch's activations are alive at once.
    GPipe,
    /// Warm-up forwards, then one forward and one backward alternately: stage `s` of `p` keeps
    /// at most `p - s` micro-batches in flight.
    OneFOneB,
}

impl ScheduleKind {
    pub fn parse(s: &str) -> Result<ScheduleKind> {
        match s.to_ascii_lowercase().as_str() {
            "gpipe" => Ok(ScheduleKind::GPipe),
            "1f1b" => Ok(ScheduleKind::OneFOneB),
            _ => Err(GptError::Config(format!(
                "unknown schedule {s:?}; use gpipe or 1f1b"
            ))),
        }
    }
}

impl fmt::Display for ScheduleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScheduleKind::GPipe => "gpipe",
            ScheduleKind::OneFOneB => "1f1b",
        })
    }
}

/// One unit of work of a stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Forward(usize),
    Backward(usize),
}

/// The actions of `stage` (of `stages`) for `micro` micro-batches, in execution order.
pub fn actions(kind: ScheduleKind, stage: usize, stages: usize, micro: usize) -> Vec<Action> {
    match kind {
        ScheduleKind::GPipe => (0..micro)
            .map(Action::Forward)
            .chain((0..micro).map(Action::Backward))
            .collect(),
        ScheduleKind::OneFOneB => {
            let warmup = (stages - stage - 1).min(micro);
            let mut out: Vec<Action> = (0..warmup).map(Action::Forward).collect();
            for i in 0..micro - warmup {
                out.push(Action::Forward(warmup + i));
                out.push(Action::Backward(i));
            }
            out.extend((micro - warmup..micro).map(Action::Backward));
            out
        }
    }
}

/// The most micro-batches whose activations a stage holds at once under `kind` (how many
/// activation sets it allocates).
pub fn max_in_flight(kind: ScheduleKind, stage: usize, stages: usize, micro: usize) -> usize {
    let mut live = 0usize;
    let mut most = 0;
    for a in actions(kind, stage, stages, micro) {
        match a {
            Action::Forward(_) => live += 1,
            Action::Backward(_) => live -= 1,
        }
        most = most.max(live);
    }
    most
}

/// Start and end of every action of every stage when the schedule runs with forward and
/// backward times `fwd[s]`, `bwd[s]` per micro-batch on stage `s` and free transfers.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// Per stage, per action (in schedule order): (start, end).
    pub spans: Vec<Vec<(f64, f64)>>,
    /// When the last action of any stage ends.
    pub makespan: f64,
}

/// Plays the schedule on all stages: an action starts when its stage is free and its input
/// exists (the forward of the same micro-batch on the previous stage, the backward on the next
/// stage). Errors if the schedule deadlocks (some stage waits for an action that never runs).
pub fn simulate(kind: ScheduleKind, micro: usize, fwd: &[f64], bwd: &[f64]) -> Result<Timeline> {
    let stages = fwd.len();
    let plans: Vec<Vec<Action>> = (0..stages)
        .map(|s| actions(kind, s, stages, micro))
        .collect();
    simulate_plans(&plans, micro, fwd, bwd)
}

/// [`simulate`] for explicit per-stage action lists.
pub fn simulate_plans(
    plans: &[Vec<Action>],
    micro: usize,
    fwd: &[f64],
    bwd: &[f64],
) -> Result<Timeline> {
    let stages = plans.len();
    let mut next = vec![0usize; stages];
    let mut free_at = vec![0.0f64; stages];
    let mut fwd_end = vec![vec![None::<f64>; micro]; stages];
    let mut bwd_end = vec![vec![None::<f64>; micro]; stages];
    let mut spans: Vec<Vec<(f64, f64)>> = vec![Vec::new(); stages];
    loop {
        let mut progressed = false;
        let mut done = true;
        for s in 0..stages {
            let Some(&action) = plans[s].get(next[s]) else {
                continue;
            };
            done = false;
            let ready = match action {
                Action::Forward(i) => {
                    if s == 0 {
                        Some(0.0)
                    } else {
                        fwd_end[s - 1][i]
                    }
                }
                Action::Backward(i) => {
                    let own = fwd_end[s][i];
                    let downstream = if s + 1 == stages {
                        Some(0.0)
                    } else {
                        bwd_end[s + 1][i]
                    };
                    own.zip(downstream).map(|(a, b)| a.max(b))
                }
            };
            if let Some(ready) = ready {
                let start = ready.max(free_at[s]);
                let (end, slot) = match action {
                    Action::Forward(i) => (start + fwd[s], &mut fwd_end[s][i]),
                    Action::Backward(i) => (start + bwd[s], &mut bwd_end[s][i]),
                };
                *slot = Some(end);
                free_at[s] = end;
                spans[s].push((start, end));
                next[s] += 1;
                progressed = true;
            }
        }
        if done {
            break;
        }
        if !progressed {
            return Err(GptError::Config(format!(
                "pipeline schedule deadlocks with {stages} stages and {micro} micro-batches \
                 (stuck at action positions {next:?})"
            )));
        }
    }
    let makespan = free_at.iter().copied().fold(0.0, f64::max);
    Ok(Timeline { spans, makespan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    const KINDS: [ScheduleKind; 2] = [ScheduleKind::GPipe, ScheduleKind::OneFOneB];

    #[test]
    fn every_forward_and_backward_runs_exactly_once_per_stage() {
        for kind in KINDS {
            for stages in 1..=6 {
                for micro in 1..=9 {
                    for s in 0..stages {
                        let a = actions(kind, s, stages, micro);
                        assert_eq!(a.len(), 2 * micro);
                        let set: HashSet<Action> = a.iter().copied().collect();
                        assert_eq!(set.len(), 2 * micro, "{kind} {s}/{stages} {micro}: {a:?}");
                        for i in 0..micro {
                            assert!(set.contains(&Action::Forward(i)));
                            assert!(set.contains(&Action::Backward(i)));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn local_order_respects_dependencies_and_accumulates_in_micro_batch_order() {
        for kind in KINDS {
            for stages in 1..=5 {
                for micro in 1..=8 {
                    for s in 0..stages {
                        let a = actions(kind, s, stages, micro);
                        let pos = |x: Action| a.iter().position(|&y| y == x).unwrap();
                        let mut last_b = None;
                        let mut last_f = None;
                        for (k, act) in a.iter().enumerate() {
                            match *act {
                                Action::Forward(i) => {
                                    assert!(last_f.is_none_or(|f| f + 1 == i), "{a:?}");
                                    last_f = Some(i);
                                }
                                Action::Backward(i) => {
                                    assert!(pos(Action::Forward(i)) < k, "{a:?}");
                                    assert!(last_b.is_none_or(|b| b + 1 == i), "{a:?}");
                                    last_b = Some(i);
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn one_f_one_b_keeps_at_most_stages_minus_stage_in_flight() {
        for stages in 1..=6 {
            for micro in 1..=10 {
                for s in 0..stages {
                    let most = max_in_flight(ScheduleKind::OneFOneB, s, stages, micro);
                    assert_eq!(most, (stages - s).min(micro), "{s}/{stages} {micro}");
                    assert_eq!(max_in_flight(ScheduleKind::GPipe, s, stages, micro), micro);
                }
            }
        }
    }

    #[test]
    fn one_stage_runs_like_plain_gradient_accumulation() {
        use Action::*;
        assert_eq!(
            actions(ScheduleKind::OneFOneB, 0, 1, 3),
            vec![
                Forward(0),
                Backward(0),
                Forward(1),
                Backward(1),
                Forward(2),
                Backward(2)
            ]
        );
        assert_eq!(
            actions(ScheduleKind::OneFOneB, 0, 2, 3),
            vec![
                Forward(0),
                Forward(1),
                Backward(0),
                Forward(2),
                Backward(1),
                Backward(2)
            ]
        );
    }

    #[test]
    fn schedules_complete_across_stages_with_the_textbook_bubble() {
        for kind in KINDS {
            for stages in 1..=6 {
                for micro in 1..=12 {
                    let (f, b) = (1.0, 2.0);
                    let t = simulate(kind, micro, &vec![f; stages], &vec![b; stages]).unwrap();
                    // Balanced stages: (m + p - 1) (f + b) for both schedules.
                    let want = (micro + stages - 1) as f64 * (f + b);
                    assert!(
                        (t.makespan - want).abs() < 1e-9,
                        "{kind} p={stages} m={micro}: {}",
                        t.makespan
                    );
                }
            }
        }
    }

    #[test]
    fn simulation_detects_a_deadlock() {
        use Action::*;
        // Stage 1 wants a backward before it has run the forward the backward depends on.
        let plans = vec![vec![Forward(0), Backward(0)], vec![Backward(0), Forward(0)]];
        let e = simulate_plans(&plans, 1, &[1.0, 1.0], &[1.0, 1.0]).unwrap_err();
        assert!(e.to_string().contains("deadlocks"), "{e}");
    }

    #[test]
    fn names_parse_both_ways() {
        for kind in KINDS {
            assert_eq!(ScheduleKind::parse(&kind.to_string()).unwrap(), kind);
        }
        assert!(ScheduleKind::parse("zb").is_err());
    }
}
