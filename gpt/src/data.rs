//! Byte-level data: any text file becomes tokens 0..=255, split into training data and the
//! last `val_frac` for validation.
//!
//! Training batches are random windows drawn from one seeded generator. Every PE draws the same
//! windows (each stage needs the same inputs or targets; data-parallel replicas take disjoint
//! chunks of one draw), so a pipeline of any depth sees exactly the data of one PE.

use crate::error::{GptError, Result};
use crate::rng::Rng;
use std::path::Path;

/// Bytes of the corpus a run trains on when it is given no `--data`.
pub const GENERATED_BYTES: usize = 1 << 20;

/// About `n` bytes of pseudo-English from `seed`: capitalised sentences of 3 to 8 words from a
/// small list, with spaces and line breaks. A model learns its word list and spelling within a
/// few hundred steps, so a run without a data file still shows the loss fall.
pub fn generated_text(n: usize, seed: u64) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the", "king", "queen", "shall", "speak", "of", "love", "and", "war", "my", "lord", "thou",
        "art", "a", "fool", "to", "be", "or", "not", "night", "day", "sweet", "heart",
    ];
    let mut r = Rng::new(seed);
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        let words = 3 + r.below(6) as usize;
        for w in 0..words {
            let word = WORDS[r.below(WORDS.len() as u64) as usize];
            if w == 0 {
                out.push(word.as_bytes()[0].to_ascii_uppercase());
                out.extend_from_slice(&word.as_bytes()[1..]);
            } else {
                out.push(b' ');
                out.extend_from_slice(word.as_bytes());
            }
        }
        out.extend_from_slice(if r.below(3) == 0 { b".\n" } else { b". " });
    }
    out.truncate(n);
    out
}

/// The training and validation tokens of one file.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub train: Vec<i32>,
    pub val: Vec<i32>,
}

impl Dataset {
    /// Reads `path` and splits it: the last `val_frac` of the bytes are validation data.
    pub fn from_file(path: &Path, val_frac: f64, context: usize) -> Result<Dataset> {
        let bytes = std::fs::read(path).map_err(|source| GptError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&bytes, val_frac, context).map_err(|e| match e {
            GptError::Data(m) => GptError::Data(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Splits `bytes` (one token per byte).
    pub fn from_bytes(bytes: &[u8], val_frac: f64, context: usize) -> Result<Dataset> {
        if !(val_frac > 0.0 && val_frac < 1.0) {
            return Err(GptError::Config(format!(
                "--val-frac {val_frac} must be between 0 and 1 (exclusive), e.g. 0.1"
            )));
        }
        let n_val = (bytes.len() as f64 * val_frac).floor() as usize;
        let n_train = bytes.len() - n_val;
        // A window is context + 1 tokens (inputs and the targets shifted by one).
        if n_train < context + 1 || n_val < context + 1 {
            return Err(GptError::Data(format!(
                "{} bytes give {n_train} training and {n_val} validation tokens, but a \
                 sequence needs {} (context + 1) in each; use a longer file, a larger \
                 --val-frac or a shorter --context",
                bytes.len(),
                context + 1
            )));
        }
        let tokens: Vec<i32> = bytes.iter().map(|&b| b as i32).collect();
        Ok(Dataset {
            train: tokens[..n_train].to_vec(),
            val: tokens[n_train..].to_vec(),
        })
    }

    /// Fails when a token would fall outside a vocabulary of `vocab`.
    pub fn check_vocab(&self, vocab: usize) -> Result<()> {
        let max = self
            .train
            .iter()
            .chain(&self.val)
            .copied()
            .max()
            .unwrap_or(0);
        if max as usize >= vocab {
            return Err(GptError::Data(format!(
                "the data holds byte value {max} but the vocabulary has {vocab} tokens; use \
                 --vocab 256 for arbitrary bytes"
            )));
        }
        Ok(())
    }

    /// Number of non-overlapping validation windows of `context`.
    pub fn val_windows(&self, context: usize) -> usize {
        (self.val.len() - 1) / context
    }
}

/// `seqs` sequences of `context` tokens: inputs and next-token targets, row-major [seqs, context].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub inputs: Vec<i32>,
    pub targets: Vec<i32>,
}

impl Batch {
    fn window(tokens: &[i32], start: usize, context: usize, batch: &mut Batch) {
        batch
            .inputs
            .extend_from_slice(&tokens[start..start + context]);
        batch
            .targets
            .extend_from_slice(&tokens[start + 1..start + context + 1]);
    }

    fn with_capacity(n: usize) -> Batch {
        Batch {
            inputs: Vec::with_capacity(n),
            targets: Vec::with_capacity(n),
        }
    }
}

/// Draws training batches; its state (for checkpoints) is the generator's word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loader {
    rng: Rng,
}

impl Loader {
    /// A loader whose draws are fixed by `seed`.
    pub fn new(seed: u64) -> Loader {
        Loader {
            rng: Rng::new(crate::rng::seed_for(seed, "data")),
        }
    }

    /// Restores a loader from [`Loader::state`].
    pub fn from_state(state: u64) -> Loader {
        Loader {
            rng: Rng::new(state),
        }
    }

    pub fn state(&self) -> u64 {
        self.rng.state()
    }

    /// One step's data for replica `replica` of `dp`: the step draws `dp * seqs` windows and
    /// this replica takes the `replica`-th chunk of `seqs`. Every PE calls it once per step.
    pub fn next_step(
        &mut self,
        data: &Dataset,
        seqs: usize,
        context: usize,
        replica: usize,
        dp: usize,
    ) -> Batch {
        let starts = data.train.len() - context; // windows need context + 1 tokens
        let mut batch = Batch::with_capacity(seqs * context);
        for i in 0..dp * seqs {
            let start = self.rng.below(starts as u64) as usize;
            if i / seqs == replica {
                Batch::window(&data.train, start, context, &mut batch);
            }
        }
        batch
    }
}

/// Validation batch `index` (of `seqs` sequences): consecutive non-overlapping windows of the
/// validation data, wrapping around when the batches ask for more than there are.
pub fn val_batch(data: &Dataset, index: usize, seqs: usize, context: usize) -> Batch {
    let windows = data.val_windows(context);
    let mut batch = Batch::with_capacity(seqs * context);
    for s in 0..seqs {
        let w = (index * seqs + s) % windows;
        Batch::window(&data.val, w * context, context, &mut batch);
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        (0..n).map(|i| b'a' + (i % 26) as u8).collect()
    }

    #[test]
    fn split_keeps_the_last_fraction_for_validation() {
        let bytes = text(1000);
        let d = Dataset::from_bytes(&bytes, 0.1, 16).unwrap();
        assert_eq!(d.train.len(), 900);
        assert_eq!(d.val.len(), 100);
        assert_eq!(d.val[0], bytes[900] as i32);
        assert_eq!(*d.train.last().unwrap(), bytes[899] as i32);
    }

    #[test]
    fn too_little_data_is_a_data_error_with_advice() {
        let e = Dataset::from_bytes(&text(100), 0.1, 16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--context") && e.contains("validation"), "{e}");
        assert!(Dataset::from_bytes(&text(100), 0.0, 4).is_err());
    }

    #[test]
    fn windows_are_inputs_and_shifted_targets_inside_the_training_split() {
        let d = Dataset::from_bytes(&text(2000), 0.1, 8).unwrap();
        let mut l = Loader::new(1);
        for _ in 0..50 {
            let b = l.next_step(&d, 4, 8, 0, 1);
            assert_eq!(b.inputs.len(), 32);
            for s in 0..4 {
                let (x, y) = (&b.inputs[s * 8..s * 8 + 8], &b.targets[s * 8..s * 8 + 8]);
                // The text is a..z repeating: each target is the next letter of its input.
                for t in 0..8 {
                    assert_eq!((x[t] - b'a' as i32 + 1) % 26, y[t] - b'a' as i32);
                }
                assert_eq!(&x[1..], &y[..7]);
            }
        }
    }

    #[test]
    fn loader_is_deterministic_and_resumable() {
        let d = Dataset::from_bytes(&text(5000), 0.1, 8).unwrap();
        let mut a = Loader::new(9);
        let mut b = Loader::new(9);
        let first = a.next_step(&d, 3, 8, 0, 1);
        assert_eq!(first, b.next_step(&d, 3, 8, 0, 1));
        let mut c = Loader::from_state(a.state());
        assert_eq!(a.next_step(&d, 3, 8, 0, 1), c.next_step(&d, 3, 8, 0, 1));
        assert_ne!(first, Loader::new(10).next_step(&d, 3, 8, 0, 1));
    }

    #[test]
    fn replicas_take_disjoint_chunks_of_one_draw() {
        // Random bytes so that windows are distinguishable.
        let mut r = Rng::new(5);
        let bytes: Vec<u8> = (0..10_000).map(|_| r.below(256) as u8).collect();
        let d = Dataset::from_bytes(&bytes, 0.1, 8).unwrap();
        let whole = Loader::new(2).next_step(&d, 6, 8, 0, 1);
        for rep in 0..2 {
            let part = Loader::new(2).next_step(&d, 3, 8, rep, 2);
            assert_eq!(part.inputs, whole.inputs[rep * 24..(rep + 1) * 24]);
            assert_eq!(part.targets, whole.targets[rep * 24..(rep + 1) * 24]);
        }
        // Both replicas leave the loader in the same state.
        let mut a = Loader::new(2);
        let mut b = Loader::new(2);
        a.next_step(&d, 3, 8, 0, 2);
        b.next_step(&d, 3, 8, 1, 2);
        assert_eq!(a, b);
    }

    #[test]
    fn validation_batches_are_fixed_consecutive_windows() {
        let d = Dataset::from_bytes(&text(1000), 0.2, 8).unwrap();
        assert_eq!(d.val_windows(8), 24);
        let b0 = val_batch(&d, 0, 2, 8);
        assert_eq!(b0.inputs, [&d.val[0..8], &d.val[8..16]].concat());
        assert_eq!(b0.targets[..8], d.val[1..9]);
        assert_eq!(val_batch(&d, 3, 2, 8), val_batch(&d, 3, 2, 8));
        // Batch 12 of 2 windows wraps to windows 0 and 1.
        assert_eq!(val_batch(&d, 12, 2, 8), b0);
    }

    #[test]
    fn vocabulary_check_names_the_offending_byte() {
        let d = Dataset::from_bytes(&[200u8; 100], 0.5, 8).unwrap();
        assert!(d.check_vocab(256).is_ok());
        let e = d.check_vocab(128).unwrap_err().to_string();
        assert!(e.contains("200"), "{e}");
    }
}
