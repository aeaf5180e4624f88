//! `nvsh-gpt export`: the parameters of one save (the checkpoint of every pipeline stage) as a
//! single file that PyTorch can load.
//!
//! Format `safetensors`: f32 tensors, row-major, named as nanoGPT's `GPT` module names them
//! (the layer number is the global one), with `__metadata__` holding `format=pt`, the model
//! (`n_layer`, `n_head`, `n_embd`, `block_size`, `vocab_size`, `tied`), `step` and `seed`.
//! The AdamW moments are not exported.
//!
//! | tensor | shape | from (params.rs) |
//! | --- | --- | --- |
//! | `transformer.wte.weight` | [vocab, C] | `wte` |
//! | `transformer.wpe.weight` | [block_size, C] | `wpe` |
//! | `transformer.h.{i}.ln_1.weight`, `.bias` | \[C\] | `h.{i}.ln1.w`, `.b` |
//! | `transformer.h.{i}.attn.c_attn.weight` | [3C, C] | `h.{i}.qkv.w` |
//! | `transformer.h.{i}.attn.c_attn.bias` | \[3C\] | `h.{i}.qkv.b` |
//! | `transformer.h.{i}.attn.c_proj.weight` | [C, C] | `h.{i}.attproj.w` |
//! | `transformer.h.{i}.attn.c_proj.bias` | \[C\] | `h.{i}.attproj.b` |
//! | `transformer.h.{i}.ln_2.weight`, `.bias` | \[C\] | `h.{i}.ln2.w`, `.b` |
//! | `transformer.h.{i}.mlp.c_fc.weight` | [4C, C] | `h.{i}.fc.w` |
//! | `transformer.h.{i}.mlp.c_fc.bias` | \[4C\] | `h.{i}.fc.b` |
//! | `transformer.h.{i}.mlp.c_proj.weight` | [C, 4C] | `h.{i}.fcproj.w` |
//! | `transformer.h.{i}.mlp.c_proj.bias` | \[C\] | `h.{i}.fcproj.b` |
//! | `transformer.ln_f.weight`, `.bias` | \[C\] | `lnf.w`, `lnf.b` |
//! | `lm_head.weight` (untied head only) | [vocab, C] | `lm_head` |
//!
//! Orientation: every matrix is stored as this code's matmuls use it, `y = x W^T + b` with `W`
//! [out, in] (see `reference::matmul_forward`), which is `torch.nn.Linear`'s layout: nanoGPT
//! loads them as they are. Hugging Face `GPT2LMHeadModel` keeps these four matrices in
//! `Conv1D` as [in, out]: transpose `c_attn`, `attn.c_proj`, `c_fc` and `mlp.c_proj` for it
//! (the names are the same). The qkv rows are q, then k, then v, each `n_head` heads of
//! C / n_head rows, as nanoGPT splits them.
//!
//! Vocabulary: training pads the embedding (and an untied head) to a multiple of 128 rows; the
//! padding rows are never looked up and their logits are masked out of the softmax, so only the
//! `vocab` real rows are exported. A tied head has no `lm_head.weight` entry (safetensors holds
//! no shared tensors): after loading, tie it (`model.lm_head.weight = model.transformer.wte.
//! weight`, which nanoGPT's constructor already does) and load with `strict=False`, or use
//! `safetensors.torch.load_model`. The model is nanoGPT's with `bias=True`, `dropout=0.0`,
//! LayerNorm eps 1e-5, and GELU with the tanh approximation (`nn.GELU(approximate="tanh")`).

use crate::checkpoint::{resume_path, Checkpoint};
use crate::config::{ModelConfig, StageSplit};
use crate::error::{GptError, Result};
use crate::params::StageLayout;
use nvsh_plot::AtomicFile;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Output formats of `nvsh-gpt export`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// Hugging Face safetensors, loadable by PyTorch (`safetensors.torch.load_file`).
    Safetensors,
}

/// One exported tensor: its PyTorch name, shape and values (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// The checkpoints of one save, checked to belong together, ordered by stage.
#[derive(Debug)]
pub struct StageSet {
    pub paths: Vec<PathBuf>,
    pub ckpts: Vec<Checkpoint>,
    pub split: StageSplit,
}

impl StageSet {
    pub fn model(&self) -> &ModelConfig {
        &self.ckpts[0].header.model
    }

    pub fn step(&self) -> u64 {
        self.ckpts[0].header.step
    }
}

/// What an export wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportSummary {
    pub tensors: usize,
    pub elements: usize,
    pub step: u64,
    pub stages: usize,
}

/// The checkpoint files of `--save PREFIX` for `stages` stages (`--from PREFIX --stages P`):
/// those of the set `PREFIX.latest` names, or of the older `PREFIX.stageS-of-P.ckpt` layout,
/// as `--resume` finds them.
pub fn prefix_paths(prefix: &Path, stages: usize) -> Result<Vec<PathBuf>> {
    if stages == 0 {
        return Err(GptError::Config("--stages must be at least 1".into()));
    }
    (0..stages)
        .map(|s| resume_path(prefix, s, stages))
        .collect()
}

/// Loads `paths` (the moments are dropped) and checks that they are every stage of one save.
pub fn load_set(paths: &[PathBuf]) -> Result<StageSet> {
    if paths.is_empty() {
        return Err(GptError::Config(
            "no checkpoint files given: list the files of every stage of one save \
             (PREFIX.step-N/stageS-of-P.ckpt) or use --from PREFIX --stages P"
                .into(),
        ));
    }
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        let mut ck = Checkpoint::load(p)?;
        // Only the parameters are exported; free the moments (2/3 of each file) at once.
        ck.m = Vec::new();
        ck.v = Vec::new();
        files.push((p.clone(), ck));
    }
    let split = check_set(&files)?;
    files.sort_by_key(|(_, ck)| ck.header.stage);
    let (paths, ckpts) = files.into_iter().unzip();
    Ok(StageSet {
        paths,
        ckpts,
        split,
    })
}

fn not_one_save(why: Vec<String>) -> GptError {
    GptError::Checkpoint(format!(
        "these files are not the checkpoints of every stage of one save: {}; give the P files \
         stage0-of-P.ckpt .. stageP-1-of-P.ckpt of one PREFIX.step-N directory, or use --from \
         PREFIX --stages P for the newest save",
        why.join("; ")
    ))
}

/// Checks that the files form one save; returns its layer split.
fn check_set(files: &[(PathBuf, Checkpoint)]) -> Result<StageSplit> {
    let show = |p: &PathBuf| p.display().to_string();
    let (p0, h0) = (&files[0].0, &files[0].1.header);
    let mut why = Vec::new();
    for (p, ck) in &files[1..] {
        let h = &ck.header;
        if h.model != h0.model {
            why.push(format!(
                "{} has model {:?} but {} has {:?}",
                show(p),
                h.model,
                show(p0),
                h0.model
            ));
        }
        if h.stages != h0.stages {
            why.push(format!(
                "{} is from a {}-stage run but {} from a {}-stage run",
                show(p),
                h.stages,
                show(p0),
                h0.stages
            ));
        }
        if h.step != h0.step {
            why.push(format!(
                "{} is from step {} but {} from step {}",
                show(p),
                h.step,
                show(p0),
                h0.step
            ));
        }
        if h.seed != h0.seed {
            why.push(format!(
                "{} has seed {} but {} has seed {}",
                show(p),
                h.seed,
                show(p0),
                h0.seed
            ));
        }
    }
    if !why.is_empty() {
        return Err(not_one_save(why));
    }

    let stages = h0.stages;
    let mut by_stage: Vec<Vec<&PathBuf>> = vec![Vec::new(); stages];
    for (p, ck) in files {
        match by_stage.get_mut(ck.header.stage) {
            Some(v) => v.push(p),
            None => why.push(format!(
                "{} says it is stage {} of {stages}",
                show(p),
                ck.header.stage
            )),
        }
    }
    for (s, ps) in by_stage.iter().enumerate() {
        match ps.len() {
            0 => why.push(format!(
                "stage {s} of {stages} is missing (given: {})",
                files
                    .iter()
                    .map(|(p, _)| show(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            1 => {}
            _ => why.push(format!(
                "stage {s} is given {} times ({})",
                ps.len(),
                ps.iter().map(|p| show(p)).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    if !why.is_empty() {
        return Err(not_one_save(why));
    }

    let mut ordered: Vec<&(PathBuf, Checkpoint)> = files.iter().collect();
    ordered.sort_by_key(|(_, ck)| ck.header.stage);
    let model = &h0.model;
    let mut next = 0;
    for (p, ck) in &ordered {
        let l = &ck.header.layers;
        if l.start != next || l.end <= l.start {
            why.push(format!(
                "stage {} ({}) holds layers {}..{}, but the layers before it end at {next}",
                ck.header.stage,
                show(p),
                l.start,
                l.end
            ));
        }
        next = l.end.max(next);
    }
    if next != model.n_layer {
        why.push(format!(
            "the stages hold layers 0..{next}, but the model has {} layers",
            model.n_layer
        ));
    }
    if !why.is_empty() {
        return Err(not_one_save(why));
    }
    model.validate().map_err(|e| {
        GptError::Checkpoint(format!(
            "{}: the model it describes is invalid: {e}",
            show(p0)
        ))
    })?;
    let counts: Vec<String> = ordered
        .iter()
        .map(|(_, ck)| ck.header.layers.len().to_string())
        .collect();
    let split = StageSplit::parse(&counts.join(","), model.n_layer, stages)?;

    for (p, ck) in &ordered {
        let layout = StageLayout::new(model, &split, ck.header.stage);
        if ck.params.len() != layout.total {
            return Err(GptError::Checkpoint(format!(
                "{} holds {} parameters, but stage {} of this model (layers {:?}) has {}; the \
                 file does not match its own header",
                show(p),
                ck.params.len(),
                ck.header.stage,
                layout.layers,
                layout.total
            )));
        }
    }

    // A tied head keeps a copy of the token embedding on the last stage; both receive the same
    // updates, so a difference means the files come from different runs or saves.
    if model.tied && stages > 1 {
        let (pf, first) = (&ordered[0].0, &ordered[0].1);
        let (pl, last) = (&ordered[stages - 1].0, &ordered[stages - 1].1);
        let wte = |ck: &Checkpoint| {
            let layout = StageLayout::new(model, &split, ck.header.stage);
            let t = layout.tensor("wte").expect("tied stages hold wte").clone();
            ck.params[t.offset..t.offset + t.len].to_vec()
        };
        let (a, b) = (wte(first), wte(last));
        if let Some(k) = a
            .iter()
            .zip(&b)
            .position(|(x, y)| x.to_bits() != y.to_bits())
        {
            return Err(not_one_save(vec![format!(
                "the token embedding on stage 0 ({}) and its tied copy on stage {} ({}) differ \
                 (first at element {k}: {} vs {})",
                show(pf),
                stages - 1,
                show(pl),
                a[k],
                b[k]
            )]));
        }
    }
    Ok(split)
}

/// The PyTorch name and shape of the params.rs tensor `name`, or None for the tied head's copy
/// of the token embedding on the last stage (exported once, from stage 0).
fn torch_name(name: &str, cfg: &ModelConfig) -> Option<(String, Vec<usize>)> {
    let (c, v) = (cfg.n_embd, cfg.vocab);
    match name {
        "wte" => return Some(("transformer.wte.weight".into(), vec![v, c])),
        "wpe" => return Some(("transformer.wpe.weight".into(), vec![cfg.block_size, c])),
        "lnf.w" => return Some(("transformer.ln_f.weight".into(), vec![c])),
        "lnf.b" => return Some(("transformer.ln_f.bias".into(), vec![c])),
        "lm_head" => return Some(("lm_head.weight".into(), vec![v, c])),
        _ => {}
    }
    let rest = name.strip_prefix("h.")?;
    let (layer, t) = rest.split_once('.')?;
    let (part, shape) = match t {
        "ln1.w" => ("ln_1.weight", vec![c]),
        "ln1.b" => ("ln_1.bias", vec![c]),
        "qkv.w" => ("attn.c_attn.weight", vec![3 * c, c]),
        "qkv.b" => ("attn.c_attn.bias", vec![3 * c]),
        "attproj.w" => ("attn.c_proj.weight", vec![c, c]),
        "attproj.b" => ("attn.c_proj.bias", vec![c]),
        "ln2.w" => ("ln_2.weight", vec![c]),
        "ln2.b" => ("ln_2.bias", vec![c]),
        "fc.w" => ("mlp.c_fc.weight", vec![4 * c, c]),
        "fc.b" => ("mlp.c_fc.bias", vec![4 * c]),
        "fcproj.w" => ("mlp.c_proj.weight", vec![c, 4 * c]),
        "fcproj.b" => ("mlp.c_proj.bias", vec![c]),
        _ => return None,
    };
    Some((format!("transformer.h.{layer}.{part}"), shape))
}

/// Every parameter tensor of the model, once, with its PyTorch name and shape (in stage and
/// arena order).
pub fn named_tensors(set: &StageSet) -> Result<Vec<NamedTensor>> {
    let model = set.model();
    let stages = set.split.stages();
    let mut out = Vec::new();
    for (ck, path) in set.ckpts.iter().zip(&set.paths) {
        let stage = ck.header.stage;
        let layout = StageLayout::new(model, &set.split, stage);
        for t in &layout.tensors {
            if t.name == "wte" && stage > 0 {
                debug_assert!(model.tied && stage + 1 == stages);
                continue;
            }
            let (name, shape) = torch_name(&t.name, model).ok_or_else(|| {
                GptError::Checkpoint(format!(
                    "{}: parameter tensor {:?} has no PyTorch name in this version of the \
                     exporter (gpt/src/export.rs)",
                    path.display(),
                    t.name
                ))
            })?;
            let n: usize = shape.iter().product();
            // Embedding and head carry padding rows after the real vocabulary: dropped.
            let padded = matches!(t.name.as_str(), "wte" | "lm_head");
            if n > t.len || (n < t.len && !padded) {
                return Err(GptError::Checkpoint(format!(
                    "parameter tensor {:?} has {} values, but {name} {shape:?} needs {n}",
                    t.name, t.len
                )));
            }
            out.push(NamedTensor {
                name,
                shape,
                data: ck.params[t.offset..t.offset + n].to_vec(),
            });
        }
    }
    Ok(out)
}

/// The `__metadata__` of the safetensors file.
pub fn metadata(set: &StageSet) -> BTreeMap<String, String> {
    let m = set.model();
    let h = &set.ckpts[0].header;
    [
        ("format", "pt".to_string()),
        ("n_layer", m.n_layer.to_string()),
        ("n_head", m.n_head.to_string()),
        ("n_embd", m.n_embd.to_string()),
        ("block_size", m.block_size.to_string()),
        ("vocab_size", m.vocab.to_string()),
        ("tied", m.tied.to_string()),
        ("step", h.step.to_string()),
        ("seed", h.seed.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Opens the output (through [`AtomicFile`]): the check that `out` can be written, made before
/// any checkpoint is read.
fn create_out(out: &Path) -> Result<AtomicFile> {
    let cannot = |why: String| {
        GptError::Config(format!(
            "--out {}: {why}; give a file path in an existing, writable directory",
            out.display()
        ))
    };
    if out.as_os_str().is_empty() {
        return Err(cannot("the path is empty".into()));
    }
    if out.is_dir() {
        return Err(cannot("is a directory".into()));
    }
    AtomicFile::create(out).map_err(|e| cannot(format!("cannot create a file there ({e})")))
}

/// Writes `tensors` with `meta` as a safetensors file: the header's length (u64), the JSON
/// header (`__metadata__`, then per tensor its dtype, shape and byte range in the data), padded
/// with spaces to a multiple of 8 bytes, then the f32 data, little-endian. Written by hand
/// rather than with the safetensors crate, whose `serialize` emits `__metadata__` in hash-map
/// order: here keys and data are in name order, so one save always exports to the same bytes.
pub fn write_safetensors(
    w: &mut impl Write,
    tensors: &[NamedTensor],
    meta: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    let mut order: Vec<&NamedTensor> = tensors.iter().collect();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!(meta));
    let mut at = 0usize;
    for t in &order {
        debug_assert_eq!(
            t.shape.iter().product::<usize>(),
            t.data.len(),
            "{}",
            t.name
        );
        let end = at + 4 * t.data.len();
        let info = serde_json::json!({
            "dtype": "F32",
            "shape": t.shape,
            "data_offsets": [at, end],
        });
        if header.insert(t.name.clone(), info).is_some() {
            return Err(std::io::Error::other(format!(
                "tensor {} is exported twice",
                t.name
            )));
        }
        at = end;
    }
    let mut text = serde_json::to_vec(&serde_json::Value::Object(header))?;
    // The data must start 8-byte aligned; the format pads the header with spaces.
    text.resize(text.len().next_multiple_of(8), b' ');
    w.write_all(&(text.len() as u64).to_le_bytes())?;
    w.write_all(&text)?;
    let mut buf = Vec::new();
    for t in order {
        buf.clear();
        buf.extend(t.data.iter().flat_map(|x| x.to_le_bytes()));
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Exports the checkpoints `paths` (every stage of one save) to `out` in `format`.
pub fn export(format: ExportFormat, paths: &[PathBuf], out: &Path) -> Result<ExportSummary> {
    let tmp = create_out(out)?;
    // Renaming onto an input would destroy the checkpoint being exported.
    if let Ok(o) = out.canonicalize() {
        if let Some(p) = paths
            .iter()
            .find(|p| p.canonicalize().is_ok_and(|p| p == o))
        {
            return Err(GptError::Config(format!(
                "--out {} is the checkpoint {}; choose another output file",
                out.display(),
                p.display()
            )));
        }
    }
    let set = load_set(paths)?;
    let tensors = named_tensors(&set)?;
    let summary = ExportSummary {
        tensors: tensors.len(),
        elements: tensors.iter().map(|t| t.data.len()).sum(),
        step: set.step(),
        stages: set.split.stages(),
    };
    let meta = metadata(&set);
    drop(set); // the tensors hold copies of the parameters
    match format {
        ExportFormat::Safetensors => tmp.commit(|w| write_safetensors(w, &tensors, &meta))?,
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StageSplit;

    #[test]
    fn the_hand_written_file_is_read_back_by_the_safetensors_crate() {
        let t = |name: &str, shape: Vec<usize>| NamedTensor {
            name: name.into(),
            data: (0..shape.iter().product::<usize>())
                .map(|i| i as f32 * -0.5)
                .collect(),
            shape,
        };
        // Odd sizes and a name that sorts first, so offsets and padding are exercised.
        let tensors = vec![
            t("b.weight", vec![3, 5]),
            t("a.bias", vec![7]),
            t("c", vec![]),
        ];
        let meta: BTreeMap<String, String> = [("format", "pt"), ("step", "12")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut bytes = Vec::new();
        write_safetensors(&mut bytes, &tensors, &meta).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        assert!(bytes[8..8 + n].starts_with(b"{\"__metadata__\":{\"format\":\"pt\""));
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.len(), 3);
        for want in &tensors {
            let got = st.tensor(&want.name).unwrap();
            assert_eq!(got.dtype(), safetensors::Dtype::F32);
            assert_eq!(got.shape(), want.shape.as_slice());
            let vals: Vec<f32> = got
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(vals, want.data);
        }
        let (_, m) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(m.metadata().as_ref().unwrap()["step"], "12");
        // Same input, same bytes, whatever the order of the tensors.
        let mut again = Vec::new();
        let reversed: Vec<NamedTensor> = tensors.iter().rev().cloned().collect();
        write_safetensors(&mut again, &reversed, &meta).unwrap();
        assert_eq!(again, bytes);
        let dup = vec![t("a", vec![1]), t("a", vec![1])];
        assert!(write_safetensors(&mut Vec::new(), &dup, &meta).is_err());
    }

    #[test]
    fn every_parameter_tensor_has_a_torch_name_of_its_size() {
        for tied in [true, false] {
            let cfg = ModelConfig {
                n_layer: 3,
                n_head: 2,
                n_embd: 8,
                block_size: 16,
                vocab: 70,
                tied,
            };
            let l = StageLayout::new(&cfg, &StageSplit::balanced(3, 1).unwrap(), 0);
            let mut names = std::collections::BTreeSet::new();
            for t in &l.tensors {
                let (name, shape) = torch_name(&t.name, &cfg).unwrap();
                let n: usize = shape.iter().product();
                if ["wte", "lm_head"].contains(&t.name.as_str()) {
                    assert_eq!(t.len, cfg.padded_vocab() * cfg.n_embd);
                    assert_eq!(n, cfg.vocab * cfg.n_embd);
                } else {
                    assert_eq!(n, t.len, "{}", t.name);
                }
                assert!(names.insert(name));
            }
            assert!(names.contains("transformer.h.2.mlp.c_proj.weight"));
            assert_eq!(names.contains("lm_head.weight"), !tied);
        }
        assert_eq!(
            torch_name(
                "h.1.nope",
                &ModelConfig {
                    n_layer: 2,
                    n_head: 1,
                    n_embd: 4,
                    block_size: 4,
                    vocab: 4,
                    tied: true,
                }
            ),
            None
        );
    }
}
