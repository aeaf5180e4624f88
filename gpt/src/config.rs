//! Model shape, pipeline split and rank layout, each checked before any GPU work starts.

use crate::error::{GptError, Result};
use std::ops::Range;

/// The padded vocabulary is a multiple of this (aligned rows for the LM-head GEMM).
pub const VOCAB_PAD: usize = 128;

/// A GPT-2-style decoder's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block.
    pub n_head: usize,
    /// Width (channels), a multiple of `n_head`.
    pub n_embd: usize,
    /// Context length: the longest sequence (and the size of the position table).
    pub block_size: usize,
    /// Real vocabulary (256 for bytes).
    pub vocab: usize,
    /// LM head shares the token embedding (GPT-2); false gives the head its own matrix.
    pub tied: bool,
}

impl ModelConfig {
    /// Checks the shape; the error names the bad value and what would work.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(GptError::Config(m));
        if self.n_layer == 0 || self.n_head == 0 || self.n_embd == 0 {
            return bad(format!(
                "layers ({}), heads ({}) and width ({}) must all be at least 1",
                self.n_layer, self.n_head, self.n_embd
            ));
        }
        if self.n_embd % self.n_head != 0 {
            return bad(format!(
                "width {} is not a multiple of the head count {}; pick e.g. --width {}",
                self.n_embd,
                self.n_head,
                self.n_embd.next_multiple_of(self.n_head)
            ));
        }
        if self.block_size < 2 {
            return bad(format!(
                "context {} is too short; use at least 2 tokens",
                self.block_size
            ));
        }
        if self.vocab < 2 {
            return bad(format!("vocabulary {} must be at least 2", self.vocab));
        }
        // The kernels index with 32-bit ints; keep the largest tensors well inside.
        let big = self.padded_vocab() as u64 * self.n_embd as u64;
        if big >= (1 << 31) || (4 * self.n_embd as u64) * (self.n_embd as u64) >= (1 << 31) {
            return bad("the model is too large for 32-bit kernel indexing".into());
        }
        Ok(())
    }

    /// Vocabulary rounded up to [`VOCAB_PAD`] (extra rows are zero and never predicted).
    pub fn padded_vocab(&self) -> usize {
        self.vocab.next_multiple_of(VOCAB_PAD)
    }

    /// Channels per head.
    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Distinct trainable parameters (the tied embedding counted once, padding included).
    pub fn num_params(&self) -> usize {
        let (c, l) = (self.n_embd, self.n_layer);
        let per_layer = 12 * c * c + 13 * c;
        let head = if self.tied {
            0
        } else {
            self.padded_vocab() * c
        };
        self.padded_vocab() * c + self.block_size * c + l * per_layer + 2 * c + head
    }
}

/// How many consecutive layers each pipeline stage holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageSplit {
    layers: Vec<usize>,
}

impl StageSplit {
    /// An even split; when the layers do not divide evenly the first stages get one more
    /// (the last stage also carries the LM head and the loss).
    pub fn balanced(n_layer: usize, pp: usize) -> Result<StageSplit> {
        if pp == 0 || n_layer < pp {
            return Err(GptError::Config(format!(
                "{n_layer} layer(s) cannot be split over {pp} pipeline stage(s): every stage \
                 needs at least one layer; use --pp <= --layers"
            )));
        }
        let (base, extra) = (n_layer / pp, n_layer % pp);
        Ok(StageSplit {
            layers: (0..pp).map(|s| base + usize::from(s < extra)).collect(),
        })
    }

    /// An explicit split such as "5,7" (`--split`); it must cover `n_layer` over `pp` stages.
    pub fn parse(spec: &str, n_layer: usize, pp: usize) -> Result<StageSplit> {
        let layers: Vec<usize> = spec
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                GptError::Config(format!(
                    "--split {spec:?}: expected comma-separated layer counts, e.g. 5,7"
                ))
            })?;
        if layers.len() != pp || layers.iter().sum::<usize>() != n_layer || layers.contains(&0) {
            return Err(GptError::Config(format!(
                "--split {spec:?} must list {pp} positive layer counts summing to {n_layer}"
            )));
        }
        Ok(StageSplit { layers })
    }

    /// Number of stages.
    pub fn stages(&self) -> usize {
        self.layers.len()
    }

    /// Layers per stage.
    pub fn layers(&self) -> &[usize] {
        &self.layers
    }

    /// Global indices of the layers of `stage`.
    pub fn range(&self, stage: usize) -> Range<usize> {
        let start: usize = self.layers[..stage].iter().sum();
        start..start + self.layers[stage]
    }
}

/// Where a PE sits: `pe = replica * pp + stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    pub pp: usize,
    pub dp: usize,
    pub pe: usize,
}

impl Topology {
    /// Checks that `n_pes == pp * dp` and places `pe`.
    pub fn new(pp: usize, dp: usize, pe: usize, n_pes: usize) -> Result<Topology> {
        if pp == 0 || dp == 0 || pp * dp != n_pes {
            return Err(GptError::Config(format!(
                "--pp {pp} x --dp {dp} must equal the number of PEs ({n_pes}); start with \
                 `nvsh run -n {} -- nvsh-gpt ...` or change --pp/--dp",
                pp.max(1) * dp.max(1)
            )));
        }
        Ok(Topology { pp, dp, pe })
    }

    pub fn stage(&self) -> usize {
        self.pe % self.pp
    }

    pub fn replica(&self) -> usize {
        self.pe / self.pp
    }

    pub fn is_first(&self) -> bool {
        self.stage() == 0
    }

    pub fn is_last(&self) -> bool {
        self.stage() + 1 == self.pp
    }

    /// PE of `stage` in this PE's replica.
    pub fn pe_of(&self, stage: usize) -> usize {
        self.replica() * self.pp + stage
    }

    /// The PE that writes logs and prints progress.
    pub fn is_leader(&self) -> bool {
        self.pe == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpt2_small() -> ModelConfig {
        ModelConfig {
            n_layer: 12,
            n_head: 12,
            n_embd: 768,
            block_size: 1024,
            vocab: 50257,
            tied: true,
        }
    }

    #[test]
    fn gpt2_small_has_the_known_parameter_count() {
        let cfg = gpt2_small();
        cfg.validate().unwrap();
        assert_eq!(cfg.padded_vocab(), 50304);
        // llm.c's count for GPT-2 124M with the padded vocabulary.
        assert_eq!(cfg.num_params(), 124_475_904);
    }

    #[test]
    fn bad_shapes_are_config_errors_that_say_what_to_do() {
        let mut cfg = gpt2_small();
        cfg.n_embd = 770;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("multiple of the head count") && e.contains("--width"),
            "{e}"
        );
        cfg = gpt2_small();
        cfg.block_size = 1;
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn splits_cover_every_layer_once() {
        let s = StageSplit::balanced(7, 3).unwrap();
        assert_eq!(s.layers(), &[3, 2, 2]);
        assert_eq!(s.range(0), 0..3);
        assert_eq!(s.range(1), 3..5);
        assert_eq!(s.range(2), 5..7);
        assert!(StageSplit::balanced(2, 3).is_err());
        let p = StageSplit::parse("5, 7", 12, 2).unwrap();
        assert_eq!(p.range(1), 5..12);
        assert!(StageSplit::parse("5,6", 12, 2).is_err());
        assert!(StageSplit::parse("12,0", 12, 2).is_err());
        assert!(StageSplit::parse("a,b", 12, 2).is_err());
    }

    #[test]
    fn rank_layout_is_replica_major() {
        let t = Topology::new(2, 3, 5, 6).unwrap();
        assert_eq!((t.stage(), t.replica()), (1, 2));
        assert!(t.is_last() && !t.is_first());
        assert_eq!(t.pe_of(0), 4);
        let e = Topology::new(2, 2, 0, 2).unwrap_err().to_string();
        assert!(e.contains("nvsh run -n 4"), "{e}");
    }
}
