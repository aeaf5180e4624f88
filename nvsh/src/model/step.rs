//! The trainer's step (gpt/, `nvsh-gpt train --pp PP --dp DP`) estimated from its measured
//! single-GPU step: compute split over PP stages with the pipeline's bubble, then the
//! gradient average over the DP replicas of each stage (after the last backward, not
//! overlapped: gpt/src/trainer.rs, step 3), with our allreduce's model.

use super::{Params, Topology};
use serde::Serialize;

/// One step of the 12-layer, 768-wide GPT on one H200, 8 micro-batches of 4 sequences of
/// 1024 tokens, in ms (gpt/README.md, "Throughput": PP=1 557.8 ms/step).
pub const STEP_PP1_MS: f64 = 557.8;
/// PP=2 1F1B on two H200 of the same run, ms: the check of the bubble term (317.9).
pub const STEP_PP2_MS: f64 = 317.9;
pub const MICRO_BATCHES: f64 = 8.0;
pub const TOKENS_PER_STEP: f64 = 8.0 * 4.0 * 1024.0;
/// That model's parameters: gpt/src/config.rs `num_params` with 12 layers, width 768,
/// context 1024 and the 256-byte vocabulary padded to 256: 256x768 + 1024x768 +
/// 12 (12x768^2 + 13x768) + 2x768. Gradients are f32.
pub const PARAMS: f64 = 86_039_040.0;

/// A step estimate.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Step {
    pub pp: usize,
    pub dp: usize,
    pub compute_ms: f64,
    pub allreduce_ms: f64,
    pub step_ms: f64,
    pub tokens_per_s: f64,
}

/// The step at `pp` stages and `pp x dp = gpus`: stages on consecutive GPUs of a node, so each
/// stage's replicas are `per_node / pp` to a node. None where `pp` does not divide a node.
pub fn estimate(prm: &Params, gpus: usize, per_node: usize, pp: usize) -> Option<Step> {
    let node = per_node.min(gpus);
    if pp == 0 || node % pp != 0 || gpus % pp != 0 {
        return None;
    }
    let dp = gpus / pp;
    let compute_ms = STEP_PP1_MS / pp as f64 * (MICRO_BATCHES + pp as f64 - 1.0) / MICRO_BATCHES;
    let allreduce_ms = if dp > 1 {
        let topo = Topology::new(dp, node / pp).ok()?;
        let bytes = PARAMS * 4.0 / pp as f64;
        prm.allreduce_flat(bytes, topo)
            .us
            .min(prm.allreduce_hier(bytes, topo).us)
            / 1e3
    } else {
        0.0
    };
    let step_ms = compute_ms + allreduce_ms;
    Some(Step {
        pp,
        dp,
        compute_ms,
        allreduce_ms,
        step_ms,
        tokens_per_s: dp as f64 * TOKENS_PER_STEP / (step_ms / 1e3),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bubble_term_predicts_the_measured_two_stage_step_within_5_percent() {
        let s = estimate(&Params::default(), 2, 8, 2).unwrap();
        assert_eq!(s.dp, 1);
        let err = (s.step_ms - STEP_PP2_MS) / STEP_PP2_MS;
        assert!(err.abs() < 0.05, "{} ms ({:+.1}%)", s.step_ms, 100.0 * err);
    }

    #[test]
    fn stages_must_divide_a_node() {
        assert!(estimate(&Params::default(), 16, 8, 3).is_none());
        let s = estimate(&Params::default(), 16, 8, 4).unwrap();
        assert_eq!((s.pp, s.dp), (4, 4));
        assert!(s.allreduce_ms > 0.0);
    }
}
