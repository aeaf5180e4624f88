//! `nvsh-gpt export --format safetensors` end to end on the CPU: a tiny 2-stage run saves its
//! checkpoints, the export is read back with the safetensors crate and compared bit for bit
//! with the checkpoints' parameters (placed through params.rs's layout, not the exporter's own
//! name table), and sets of files that are not one save are refused.

mod common;

use nvsh_gpt::checkpoint::{resume_path, Checkpoint};
use nvsh_gpt::config::{ModelConfig, StageSplit};
use nvsh_gpt::op_args::MatmulForward;
use nvsh_gpt::params::StageLayout;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{run_gpt as run, text_of, QUIET_RUN_ARGS, TINY_MODEL_ARGS};

fn workdir(name: &str) -> PathBuf {
    common::workdir(&format!("export-{name}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Trains the tiny model (2 layers, 2 heads, width 16, context 8) for 3 steps on 2 CPU
/// stages and saves to `prefix`.
fn train_and_save(dir: &Path, prefix: &Path, extra: &[&str]) {
    let data = dir.join("data.txt");
    std::fs::write(&data, common::text(20_000, 9)).unwrap();
    let mut args = vec!["train", "--cpu", "--pp", "2", "--data", s(&data)];
    args.extend_from_slice(TINY_MODEL_ARGS);
    args.extend_from_slice(&[
        "--steps",
        "3",
        "--warmup",
        "2",
        "--lr",
        "3e-3",
        "--save",
        s(prefix),
    ]);
    args.extend_from_slice(QUIET_RUN_ARGS);
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", text_of(&o));
}

/// The file of `stage` (of 2) of the newest save under `prefix`.
fn ckpt(prefix: &Path, stage: usize) -> PathBuf {
    let p = resume_path(prefix, stage, 2).unwrap();
    assert!(p.exists(), "{}", p.display());
    p
}

fn export(out: &Path, ckpts: &[&Path]) -> Output {
    let mut args = vec!["export", "--format", "safetensors", "--out", s(out)];
    args.extend(ckpts.iter().map(|p| s(p)));
    run(&args)
}

fn floats(bytes: &[u8]) -> Vec<u32> {
    // Bits, so that the comparison is exact (NaN included).
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Every tensor the export must hold: nanoGPT name, shape, and its values taken from the
/// checkpoints through the layout's offsets (LayerOffsets and the named fields of StageLayout).
fn expected(model: &ModelConfig, ckpts: &[Checkpoint]) -> BTreeMap<String, (Vec<usize>, Vec<u32>)> {
    let (c, v) = (model.n_embd, model.vocab);
    let split = StageSplit::balanced(model.n_layer, ckpts.len()).unwrap();
    let mut want = BTreeMap::new();
    for (st, ck) in ckpts.iter().enumerate() {
        let l = StageLayout::new(model, &split, st);
        assert_eq!(ck.params.len(), l.total);
        let mut put = |name: String, at: usize, shape: Vec<usize>| {
            let n: usize = shape.iter().product();
            let vals = ck.params[at..at + n].iter().map(|x| x.to_bits()).collect();
            assert!(want.insert(name.clone(), (shape, vals)).is_none(), "{name}");
        };
        if st == 0 {
            put("transformer.wte.weight".into(), l.wte.unwrap(), vec![v, c]);
            put(
                "transformer.wpe.weight".into(),
                l.wpe.unwrap(),
                vec![model.block_size, c],
            );
        }
        for (k, g) in l.layers.clone().enumerate() {
            let o = l.layer_offsets[k];
            let h = |t: &str| format!("transformer.h.{g}.{t}");
            put(h("ln_1.weight"), o.ln1_w, vec![c]);
            put(h("ln_1.bias"), o.ln1_b, vec![c]);
            put(h("attn.c_attn.weight"), o.qkv_w, vec![3 * c, c]);
            put(h("attn.c_attn.bias"), o.qkv_b, vec![3 * c]);
            put(h("attn.c_proj.weight"), o.attproj_w, vec![c, c]);
            put(h("attn.c_proj.bias"), o.attproj_b, vec![c]);
            put(h("ln_2.weight"), o.ln2_w, vec![c]);
            put(h("ln_2.bias"), o.ln2_b, vec![c]);
            put(h("mlp.c_fc.weight"), o.fc_w, vec![4 * c, c]);
            put(h("mlp.c_fc.bias"), o.fc_b, vec![4 * c]);
            put(h("mlp.c_proj.weight"), o.fcproj_w, vec![c, 4 * c]);
            put(h("mlp.c_proj.bias"), o.fcproj_b, vec![c]);
        }
        if st + 1 == ckpts.len() {
            put("transformer.ln_f.weight".into(), l.lnf_w.unwrap(), vec![c]);
            put("transformer.ln_f.bias".into(), l.lnf_b.unwrap(), vec![c]);
            if !model.tied {
                put("lm_head.weight".into(), l.head.unwrap(), vec![v, c]);
            }
        }
    }
    want
}

/// Reads `file` back and compares it with the checkpoints `prefix` (2 stages); returns the
/// file's bytes.
fn check_export(file: &Path, prefix: &Path) -> Vec<u8> {
    let ckpts: Vec<Checkpoint> = (0..2)
        .map(|st| Checkpoint::load(&ckpt(prefix, st)).unwrap())
        .collect();
    let model = ckpts[0].header.model.clone();
    let (c, v) = (model.n_embd, model.vocab);
    let bytes = std::fs::read(file).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().expect("__metadata__");
    let step = ckpts[0].header.step.to_string();
    for (k, want) in [
        ("format", "pt"),
        ("n_layer", "2"),
        ("n_head", "2"),
        ("n_embd", "16"),
        ("block_size", "8"),
        ("vocab_size", &v.to_string()),
        ("tied", &model.tied.to_string()),
        ("step", &step),
    ] {
        assert_eq!(meta.get(k).map(String::as_str), Some(want), "{k}: {meta:?}");
    }
    assert_eq!(step, "3");

    let want = expected(&model, &ckpts);
    let mut got = BTreeMap::new();
    for (name, t) in st.tensors() {
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        got.insert(name, (t.shape().to_vec(), floats(t.data())));
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, w) in &want {
        assert!(&got[name] == w, "{name} differs from the checkpoint");
    }

    // Every parameter once: the model's count less the vocabulary padding of the embedding
    // (and of an untied head).
    let total: usize = got.values().map(|(_, d)| d.len()).sum();
    let pad = (model.padded_vocab() - v) * c * if model.tied { 1 } else { 2 };
    assert_eq!(total, model.num_params() - pad);

    // The embedding is stage 0's arena from offset 0 (and, tied, the last stage's copy too).
    let wte = &got["transformer.wte.weight"].1;
    let bits = |p: &[f32]| p.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(wte, &bits(&ckpts[0].params[..v * c]));
    if model.tied {
        assert_eq!(wte, &bits(&ckpts[1].params[..v * c]));
    }

    // Layer 1 lives on stage 1; its qkv matrix is [3C, C] as nn.Linear stores it: the
    // reference matmul (the trainer's math) on one row equals x W^T + b computed from the file.
    let split = StageSplit::balanced(2, 2).unwrap();
    let l1 = StageLayout::new(&model, &split, 1);
    let o = l1.layer_offsets[0];
    let p1 = &ckpts[1].params;
    let (w, b) = (
        &got["transformer.h.1.attn.c_attn.weight"],
        &got["transformer.h.1.attn.c_attn.bias"],
    );
    assert_eq!(w.0, vec![3 * c, c]);
    let x: Vec<f32> = (0..c).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut y_ref = vec![0f32; 3 * c];
    nvsh_gpt::reference::matmul_forward(MatmulForward {
        out: &mut y_ref,
        inp: &x,
        weight: &p1[o.qkv_w..o.qkv_w + 3 * c * c],
        bias: Some(&p1[o.qkv_b..o.qkv_b + 3 * c]),
        n: 1,
        c,
        oc: 3 * c,
    });
    let f = |u: u32| f32::from_bits(u) as f64;
    for (out, &yr) in y_ref.iter().enumerate() {
        let mut acc = f(b.1[out]);
        for (i, &xi) in x.iter().enumerate() {
            acc += xi as f64 * f(w.1[out * c + i]);
        }
        assert_eq!((acc as f32).to_bits(), yr.to_bits(), "row {out}");
    }
    assert_eq!(
        got["transformer.h.0.mlp.c_proj.weight"].0,
        vec![c, 4 * c],
        "c_proj is [out, in]"
    );
    bytes
}

#[test]
fn tied_two_stage_export_matches_the_checkpoints_bit_for_bit() {
    let dir = workdir("tied");
    let prefix = dir.join("ck");
    train_and_save(&dir, &prefix, &[]);
    let (c0, c1) = (ckpt(&prefix, 0), ckpt(&prefix, 1));
    let out = dir.join("model.safetensors");
    // Any order of the files.
    let o = export(&out, &[&c1, &c0]);
    assert!(o.status.success(), "{}", text_of(&o));
    let t = text_of(&o);
    assert!(
        t.contains("exported 28 tensors") && t.contains("step 3"),
        "{t}"
    );
    let bytes = check_export(&out, &prefix);

    // --from PREFIX --stages P names the same files.
    let out2 = dir.join("from.safetensors");
    let o = run(&[
        "export",
        "--out",
        s(&out2),
        "--from",
        s(&prefix),
        "--stages",
        "2",
    ]);
    assert!(o.status.success(), "{}", text_of(&o));
    assert!(std::fs::read(&out2).unwrap() == bytes);

    let help = text_of(&run(&["export", "--help"]));
    assert!(help.contains("safetensors"), "{help}");
    // No temporary file is left behind.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn untied_head_with_a_padded_vocabulary_is_exported_without_the_padding() {
    let dir = workdir("untied");
    let prefix = dir.join("ck");
    // Vocabulary 200 pads to 256 rows in training; the file has 200.
    train_and_save(&dir, &prefix, &["--untied", "--vocab", "200"]);
    let out = dir.join("model.safetensors");
    let o = export(&out, &[&ckpt(&prefix, 0), &ckpt(&prefix, 1)]);
    assert!(o.status.success(), "{}", text_of(&o));
    let bytes = check_export(&out, &prefix);
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("lm_head.weight").unwrap().shape(), &[200, 16]);
    assert_eq!(
        st.tensor("transformer.wte.weight").unwrap().shape(),
        &[200, 16]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_that_are_not_one_save_and_unwritable_outputs_are_refused() {
    let dir = workdir("refuse");
    let prefix = dir.join("ck");
    train_and_save(&dir, &prefix, &[]);
    let (c0, c1) = (ckpt(&prefix, 0), ckpt(&prefix, 1));
    let out = dir.join("bad.safetensors");
    let refused = |files: &[&Path], want: &[&str]| {
        let o = export(&out, files);
        let t = text_of(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(t.contains("nvsh-gpt: error:"), "{t}");
        for w in want {
            assert!(t.contains(w), "{w:?} not in: {t}");
        }
        assert!(!out.exists(), "a refused export wrote {}", out.display());
    };

    refused(&[&c0], &["stage 1 of 2 is missing", s(&c0)]);
    refused(&[&c0, &c0, &c1], &["stage 0 is given 2 times", s(&c0)]);

    // Stage 1 of a later step.
    let mut later = Checkpoint::load(&c1).unwrap();
    later.header.step += 5;
    let later_path = dir.join("later.stage1-of-2.ckpt");
    later.save(&later_path).unwrap();
    refused(
        &[&c0, &later_path],
        &["from step 8", "from step 3", s(&later_path), s(&c0)],
    );

    // The tied copy of the embedding on the last stage differs from stage 0's.
    let mut other = Checkpoint::load(&c1).unwrap();
    other.params[5] += 1.0;
    let other_path = dir.join("other.stage1-of-2.ckpt");
    other.save(&other_path).unwrap();
    refused(
        &[&c0, &other_path],
        &["tied copy", "element 5", s(&other_path)],
    );

    // An output that cannot be created is refused before any checkpoint is read: the error
    // names --out even though the checkpoint list is bad too.
    let nowhere = dir.join("no-such-dir").join("model.safetensors");
    let o = export(&nowhere, &[&dir.join("missing.ckpt")]);
    let t = text_of(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("--out") && t.contains(s(&nowhere)), "{t}");
    assert!(!t.contains("missing.ckpt"), "{t}");
    assert!(!dir.join("no-such-dir").exists());
    let o = export(&dir, &[&c0, &c1]);
    assert!(text_of(&o).contains("is a directory"), "{}", text_of(&o));

    // The output must not replace one of the checkpoints.
    let o = export(&c1, &[&c0, &c1]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text_of(&o).contains("is the checkpoint"), "{}", text_of(&o));
    Checkpoint::load(&c1).unwrap();

    // No temporary files are left by any of the refusals.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
