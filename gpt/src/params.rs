//! Parameter layout: which tensors a stage holds, where they sit in its flat arena, and how
//! they are initialised.
//!
//! Each tensor has a global name ("wte", "h.3.fc.w", "lnf.b", ...). Its initial values come
//! from a generator seeded by (seed, name), so a tensor starts identical whichever stage holds
//! it: a pipeline of any depth starts from the weights of one PE.
//!
//! Arena order: weight-decayed tensors (matrices and embeddings) first, then the rest (biases
//! and LayerNorm), so AdamW runs as two launches. When the LM head is tied, the last stage of
//! a pipeline holds its own copy of "wte" at offset 0, like the first stage: their gradients
//! are summed at the same (symmetric) offset, and both apply the same update.

use crate::config::{ModelConfig, StageSplit};
use crate::error::{GptError, Result};
use crate::rng::{seed_for, Rng};

/// GPT-2's initial standard deviation of weight matrices.
pub const INIT_STD: f64 = 0.02;

/// How a tensor starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal(0, std) for the first `rows` rows of `cols` values, zero after (padded vocab).
    Normal {
        std: f64,
        rows: usize,
        cols: usize,
    },
    Zeros,
    Ones,
}

/// One parameter tensor of a stage.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub len: usize,
    pub decay: bool,
    pub init: Init,
    /// Element offset in the stage's arena.
    pub offset: usize,
}

/// Offsets of one transformer block's tensors in the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerOffsets {
    pub ln1_w: usize,
    pub ln1_b: usize,
    pub qkv_w: usize,
    pub qkv_b: usize,
    pub attproj_w: usize,
    pub attproj_b: usize,
    pub ln2_w: usize,
    pub ln2_b: usize,
    pub fc_w: usize,
    pub fc_b: usize,
    pub fcproj_w: usize,
    pub fcproj_b: usize,
}

/// The tensors of one stage and their places.
#[derive(Clone, Debug, PartialEq)]
pub struct StageLayout {
    pub tensors: Vec<TensorSpec>,
    /// Elements of the decayed group ([0, n_decay)).
    pub n_decay: usize,
    /// Elements in all.
    pub total: usize,
    /// Global indices of this stage's layers.
    pub layers: std::ops::Range<usize>,
    /// Per local layer.
    pub layer_offsets: Vec<LayerOffsets>,
    /// Token embedding (first stage), or the tied head's copy of it (last stage).
    pub wte: Option<usize>,
    pub wpe: Option<usize>,
    pub lnf_w: Option<usize>,
    pub lnf_b: Option<usize>,
    /// The LM head's matrix on the last stage: `wte` when tied, else "lm_head".
    pub head: Option<usize>,
    /// Elements at the start of the arena that another stage also holds (the tied copy of wte
    /// on the last stage of a pipeline): left out of the gradient norm so it counts once.
    pub shared_prefix: usize,
}

impl StageLayout {
    /// The layout of `stage` under `split`.
    pub fn new(cfg: &ModelConfig, split: &StageSplit, stage: usize) -> StageLayout {
        let stages = split.stages();
        let (first, last) = (stage == 0, stage + 1 == stages);
        let (c, vp, l) = (cfg.n_embd, cfg.padded_vocab(), cfg.n_layer);
        let layers = split.range(stage);
        let proj_std = INIT_STD / (2.0 * l as f64).sqrt();
        let normal = |std: f64, rows: usize, cols: usize| Init::Normal { std, rows, cols };

        let mut decayed: Vec<(String, usize, Init)> = Vec::new();
        let mut plain: Vec<(String, usize, Init)> = Vec::new();
        // The token embedding (and on a tied last stage its copy) goes first: offset 0.
        if first || (last && cfg.tied) {
            decayed.push(("wte".into(), vp * c, normal(INIT_STD, cfg.vocab, c)));
        }
        if first {
            decayed.push((
                "wpe".into(),
                cfg.block_size * c,
                normal(INIT_STD, cfg.block_size, c),
            ));
        }
        for g in layers.clone() {
            let n = |t: &str| format!("h.{g}.{t}");
            decayed.push((n("qkv.w"), 3 * c * c, normal(INIT_STD, 3 * c, c)));
            decayed.push((n("attproj.w"), c * c, normal(proj_std, c, c)));
            decayed.push((n("fc.w"), 4 * c * c, normal(INIT_STD, 4 * c, c)));
            decayed.push((n("fcproj.w"), 4 * c * c, normal(proj_std, c, 4 * c)));
            plain.push((n("ln1.w"), c, Init::Ones));
            plain.push((n("ln1.b"), c, Init::Zeros));
            plain.push((n("qkv.b"), 3 * c, Init::Zeros));
            plain.push((n("attproj.b"), c, Init::Zeros));
            plain.push((n("ln2.w"), c, Init::Ones));
            plain.push((n("ln2.b"), c, Init::Zeros));
            plain.push((n("fc.b"), 4 * c, Init::Zeros));
            plain.push((n("fcproj.b"), c, Init::Zeros));
        }
        if last {
            if !cfg.tied {
                decayed.push(("lm_head".into(), vp * c, normal(INIT_STD, cfg.vocab, c)));
            }
            plain.push(("lnf.w".into(), c, Init::Ones));
            plain.push(("lnf.b".into(), c, Init::Zeros));
        }

        let mut tensors = Vec::new();
        let mut offset = 0;
        let n_decay_tensors = decayed.len();
        for (k, (name, len, init)) in decayed.into_iter().chain(plain).enumerate() {
            tensors.push(TensorSpec {
                name,
                len,
                decay: k < n_decay_tensors,
                init,
                offset,
            });
            offset += len;
        }
        let n_decay = tensors
            .iter()
            .filter(|t| t.decay)
            .map(|t| t.len)
            .sum::<usize>();
        let find = |name: &str| tensors.iter().find(|t| t.name == name).map(|t| t.offset);
        let layer_offsets = layers
            .clone()
            .map(|g| {
                let f = |t: &str| find(&format!("h.{g}.{t}")).expect("layer tensor");
                LayerOffsets {
                    ln1_w: f("ln1.w"),
                    ln1_b: f("ln1.b"),
                    qkv_w: f("qkv.w"),
                    qkv_b: f("qkv.b"),
                    attproj_w: f("attproj.w"),
                    attproj_b: f("attproj.b"),
                    ln2_w: f("ln2.w"),
                    ln2_b: f("ln2.b"),
                    fc_w: f("fc.w"),
                    fc_b: f("fc.b"),
                    fcproj_w: f("fcproj.w"),
                    fcproj_b: f("fcproj.b"),
                }
            })
            .collect();
        let wte = find("wte");
        let head = if !last {
            None
        } else if cfg.tied {
            wte
        } else {
            find("lm_head")
        };
        let shared_prefix = if last && cfg.tied && stages > 1 {
            vp * c
        } else {
            0
        };
        StageLayout {
            n_decay,
            total: offset,
            layers,
            layer_offsets,
            wte,
            wpe: find("wpe"),
            lnf_w: find("lnf.w"),
            lnf_b: find("lnf.b"),
            head,
            shared_prefix,
            tensors,
        }
    }

    /// The tensor called `name`, if this stage holds it.
    pub fn tensor(&self, name: &str) -> Option<&TensorSpec> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The initial values of the whole arena (each tensor from its own named stream).
    pub fn init(&self, seed: u64) -> Vec<f32> {
        let mut out = vec![0.0f32; self.total];
        for t in &self.tensors {
            init_tensor(&mut out[t.offset..t.offset + t.len], t, seed);
        }
        out
    }
}

fn init_tensor(dst: &mut [f32], t: &TensorSpec, seed: u64) {
    match t.init {
        Init::Zeros => dst.fill(0.0),
        Init::Ones => dst.fill(1.0),
        Init::Normal { std, rows, cols } => {
            let mut rng = Rng::new(seed_for(seed, &t.name));
            let real = rows * cols;
            for (i, x) in dst.iter_mut().enumerate() {
                *x = if i < real {
                    (rng.normal() * std) as f32
                } else {
                    0.0
                };
            }
        }
    }
}

/// Checks that a stage's arena fits the 32-bit indexing of the kernels (n elements per call).
pub fn check_arena(layout: &StageLayout) -> Result<()> {
    if layout.total >= (1usize << 31) {
        return Err(GptError::Config(format!(
            "a stage holds {} parameters, beyond the kernels' 32-bit indexing; use more \
             pipeline stages",
            layout.total
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn cfg(tied: bool) -> ModelConfig {
        ModelConfig {
            n_layer: 5,
            n_head: 2,
            n_embd: 8,
            block_size: 16,
            vocab: 70,
            tied,
        }
    }

    #[test]
    fn one_stage_holds_every_parameter_once() {
        for tied in [true, false] {
            let c = cfg(tied);
            let l = StageLayout::new(&c, &StageSplit::balanced(5, 1).unwrap(), 0);
            assert_eq!(l.total, c.num_params(), "tied {tied}");
            assert_eq!(l.wte, Some(0));
            assert_eq!(l.shared_prefix, 0);
            assert_eq!(
                l.head,
                if tied {
                    Some(0)
                } else {
                    l.tensor("lm_head").map(|t| t.offset)
                }
            );
            // Contiguous, decayed group first.
            let mut at = 0;
            for t in &l.tensors {
                assert_eq!(t.offset, at);
                at += t.len;
                assert_eq!(t.decay, t.offset < l.n_decay, "{}", t.name);
                let matrix = ["qkv.w", "attproj.w", "fc.w", "fcproj.w"]
                    .iter()
                    .any(|m| t.name.ends_with(&format!(".{m}")))
                    || ["wte", "wpe", "lm_head"].contains(&t.name.as_str());
                assert_eq!(t.decay, matrix, "{}", t.name);
            }
        }
    }

    #[test]
    fn pipeline_layouts_are_a_partition_of_the_single_stage_layout() {
        for tied in [true, false] {
            let c = cfg(tied);
            let whole = StageLayout::new(&c, &StageSplit::balanced(5, 1).unwrap(), 0);
            let whole_map: BTreeMap<_, _> = whole
                .tensors
                .iter()
                .map(|t| (t.name.clone(), (t.len, t.decay, t.init)))
                .collect();
            for pp in 1..=5 {
                let split = StageSplit::balanced(5, pp).unwrap();
                let mut seen = BTreeSet::new();
                for s in 0..pp {
                    let l = StageLayout::new(&c, &split, s);
                    for t in &l.tensors {
                        assert_eq!(whole_map[&t.name], (t.len, t.decay, t.init), "{}", t.name);
                        let dup = !seen.insert(t.name.clone());
                        // Only the tied embedding is held twice (first and last stage).
                        assert_eq!(dup, tied && pp > 1 && t.name == "wte" && s == pp - 1);
                    }
                    if tied && s == pp - 1 {
                        assert_eq!(l.head, Some(0));
                        assert_eq!(
                            l.shared_prefix,
                            if pp > 1 {
                                c.padded_vocab() * c.n_embd
                            } else {
                                0
                            }
                        );
                    }
                }
                assert_eq!(seen.len(), whole_map.len());
            }
        }
    }

    #[test]
    fn initial_values_are_identical_per_tensor_whatever_the_split() {
        let c = cfg(true);
        let whole = StageLayout::new(&c, &StageSplit::balanced(5, 1).unwrap(), 0);
        let w = whole.init(11);
        let split = StageSplit::parse("2,1,2", 5, 3).unwrap();
        for s in 0..3 {
            let l = StageLayout::new(&c, &split, s);
            let v = l.init(11);
            for t in &l.tensors {
                let o = whole.tensor(&t.name).unwrap().offset;
                assert_eq!(
                    &v[t.offset..t.offset + t.len],
                    &w[o..o + t.len],
                    "{}",
                    t.name
                );
            }
        }
        // Another seed changes the weights.
        assert_ne!(whole.init(12), w);
    }

    #[test]
    fn init_follows_gpt2() {
        let c = ModelConfig {
            n_layer: 4,
            n_head: 4,
            n_embd: 64,
            block_size: 32,
            vocab: 100,
            tied: true,
        };
        let l = StageLayout::new(&c, &StageSplit::balanced(4, 1).unwrap(), 0);
        let v = l.init(0);
        let get = |name: &str| {
            let t = l.tensor(name).unwrap();
            &v[t.offset..t.offset + t.len]
        };
        let std = |x: &[f32]| {
            let m = x.iter().map(|&a| a as f64).sum::<f64>() / x.len() as f64;
            (x.iter().map(|&a| (a as f64 - m).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
        };
        assert!((std(get("h.0.fc.w")) - 0.02).abs() < 0.001);
        let proj = 0.02 / (8.0f64).sqrt();
        assert!((std(get("h.2.attproj.w")) - proj).abs() < 0.001);
        assert!(get("h.1.ln2.w").iter().all(|&x| x == 1.0));
        assert!(get("h.1.fc.b").iter().all(|&x| x == 0.0));
        // Padded vocabulary rows (100..128) start at zero.
        assert!(get("wte")[100 * 64..].iter().all(|&x| x == 0.0));
        assert!(get("wte")[..100 * 64].iter().all(|&x| x != 0.0));
    }
}
