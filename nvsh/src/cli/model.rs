//! `nvsh model`: the cost model's predictions (nvsh/src/model/) as tables or JSON; no GPU.

use super::bench::parse_size;
use clap::Args;
use nvsh::model::sparse::{Grad, Method};
use nvsh::model::step::{estimate, Step};
use nvsh::model::{Params, Pick, Topology};
use nvshmem::tools::size_label;
use nvshmem::Result;
use serde::Serialize;

#[derive(Args)]
pub struct ModelArgs {
    /// GPU counts to predict for.
    #[arg(long, value_delimiter = ',', default_value = "8,16,64,256", value_parser = parse_count)]
    gpus: Vec<usize>,
    /// GPUs per node (NVLink inside a node, one InfiniBand rail per GPU between nodes).
    #[arg(long, default_value_t = 8, value_parser = parse_count)]
    per_node: usize,
    /// Message sizes: MIN..MAX (every --factor step) or a list (4K,1M,256M).
    #[arg(long, default_value = "4K..256M")]
    size: String,
    /// Growth factor of a MIN..MAX range.
    #[arg(long, default_value_t = 4, value_parser = super::bench::parse_factor)]
    factor: usize,
    /// InfiniBand per GPU, Gb/s (NDR: 400).
    #[arg(long, default_value_t = 400.0, value_parser = parse_positive)]
    ib_gbps: f64,
    /// InfiniBand latency per hop, us (2-4 on NDR).
    #[arg(long, default_value_t = 3.0, value_parser = parse_positive)]
    ib_us: f64,
    /// Dense f32 gradient size for the sparse methods' crossover densities.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    grad: usize,
    /// One JSON object instead of the tables.
    #[arg(long)]
    json: bool,
}

fn parse_count(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a count of at least 1")),
    }
}

fn parse_positive(s: &str) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a positive number")),
    }
}

/// "4K..256M" (every `factor` step) or "4K,1M".
fn parse_sizes(s: &str, factor: usize) -> std::result::Result<Vec<usize>, String> {
    if let Some((lo, hi)) = s.split_once("..") {
        let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
        if lo > hi {
            return Err(format!("--size {s}: the first size is above the second"));
        }
        let mut v = vec![];
        let mut n = lo;
        while n <= hi {
            v.push(n);
            n = match n.checked_mul(factor) {
                Some(m) => m,
                None => break,
            };
        }
        Ok(v)
    } else {
        s.split(',').map(parse_size).collect()
    }
}

#[derive(Serialize)]
struct AllreduceRow {
    bytes: usize,
    flat: Pick,
    hier: Pick,
    hier_pipelined: Pick,
    nccl_ring_us: f64,
    nccl_tree_us: Option<f64>,
}

#[derive(Serialize)]
struct FamilyRow {
    bytes: usize,
    flat_us: f64,
    hier_us: f64,
    nccl_ring_us: Option<f64>,
}

#[derive(Serialize)]
struct SparseRow {
    method: &'static str,
    bytes_per_pe_at_1pct: f64,
    byte_crossover: Option<f64>,
    time_crossover: Option<f64>,
}

#[derive(Serialize)]
struct Prediction {
    gpus: usize,
    per_node: usize,
    nodes: usize,
    allreduce: Vec<AllreduceRow>,
    allgather: Vec<FamilyRow>,
    alltoall: Vec<FamilyRow>,
    sparse_grad_bytes: usize,
    dense_bytes_per_pe: f64,
    sparse: Vec<SparseRow>,
    step: Vec<Step>,
}

#[derive(Serialize)]
struct Report {
    schema: u32,
    params: Params,
    predictions: Vec<Prediction>,
}

fn predict(prm: &Params, topo: Topology, sizes: &[usize], grad: usize) -> Prediction {
    let allreduce = sizes
        .iter()
        .map(|&b| {
            let n = b as f64;
            AllreduceRow {
                bytes: b,
                flat: prm.allreduce_flat(n, topo),
                hier: prm.allreduce_hier(n, topo),
                hier_pipelined: prm.allreduce_hier_with(n, topo, true),
                nccl_ring_us: prm.nccl_ring_allreduce(n, topo),
                nccl_tree_us: prm.nccl_tree_allreduce(n, topo),
            }
        })
        .collect();
    let family = |flat: &dyn Fn(f64) -> f64, hier: &dyn Fn(f64) -> f64, nccl: bool| {
        sizes
            .iter()
            .map(|&b| {
                let n = b as f64;
                FamilyRow {
                    bytes: b,
                    flat_us: flat(n),
                    hier_us: hier(n),
                    nccl_ring_us: nccl.then(|| prm.nccl_ring_allgather(n, topo)),
                }
            })
            .collect::<Vec<_>>()
    };
    let allgather = family(
        &|n| prm.allgather_flat(n, topo),
        &|n| prm.allgather_hier(n, topo),
        true,
    );
    let alltoall = family(
        &|n| prm.alltoall_flat(n, topo),
        &|n| prm.alltoall_hier(n, topo),
        false,
    );
    let g = Grad {
        n: grad as f64 / 4.0,
        value_bytes: 4.0,
        pes: topo.gpus,
    };
    let sparse = Method::ALL
        .iter()
        .map(|&m| SparseRow {
            method: m.name(),
            bytes_per_pe_at_1pct: g.bytes(m, 0.01),
            byte_crossover: g.byte_crossover(m),
            time_crossover: g.time_crossover(prm, topo, m),
        })
        .collect();
    let step = [1, 2, 4, 8]
        .iter()
        .filter_map(|&pp| estimate(prm, topo.gpus, topo.per_node, pp))
        .collect();
    Prediction {
        gpus: topo.gpus,
        per_node: topo.per_node,
        nodes: topo.nodes(),
        allreduce,
        allgather,
        alltoall,
        sparse_grad_bytes: grad,
        dense_bytes_per_pe: g.dense_bytes(),
        sparse,
        step,
    }
}

pub fn run(args: ModelArgs) -> Result<()> {
    let bad = |message: String| nvshmem::Error::Io {
        what: "model".into(),
        message,
    };
    let sizes = parse_sizes(&args.size, args.factor).map_err(bad)?;
    let prm = Params::fitted(args.ib_gbps, args.ib_us);
    let mut predictions = vec![];
    for &gpus in &args.gpus {
        let topo = Topology::new(gpus, args.per_node).map_err(bad)?;
        predictions.push(predict(&prm, topo, &sizes, args.grad));
    }
    if args.json {
        let report = Report {
            schema: 1,
            params: prm,
            predictions,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| bad(e.to_string()))?
        );
        return Ok(());
    }
    print_params(&prm, args.ib_gbps);
    for p in &predictions {
        print_prediction(p);
    }
    Ok(())
}

fn print_params(p: &Params, ib_gbit: f64) {
    println!("# nvsh model (docs/scale.md): predicted times in us");
    println!();
    println!(
        "NVLink, fitted to docs/measured.md (4 x H100 NV18): one-shot step {:.1} us, signalled \
         step {:.1} us, {:.0} GB/s per GPU (two-shot, ring, family), {:.0} (rd), {:.0} \
         (one-shot); NCCL: base {:.1} us, {:.1} us a hop, {:.0} GB/s",
        p.nvl_ll_us,
        p.nvl_step_us,
        p.nvl_gbps,
        p.nvl_rd_gbps,
        p.nvl_oneshot_gbps,
        p.nccl_base_us,
        p.nccl_nvl_hop_us,
        p.nccl_nvl_gbps
    );
    println!(
        "InfiniBand: {ib_gbit} Gb/s ({:.0} GB/s) per GPU, one rail each, {:.1} us a hop",
        p.ib_gbps, p.ib_us
    );
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

fn density(v: Option<f64>) -> String {
    match v {
        None => "never".into(),
        Some(d) if d >= 1.0 => "always".into(),
        Some(d) => format!("{:.3}%", 100.0 * d),
    }
}

fn print_prediction(p: &Prediction) {
    println!();
    println!(
        "## {} GPUs ({} node{} of {})",
        p.gpus,
        p.nodes,
        if p.nodes == 1 { "" } else { "s" },
        p.per_node
    );
    println!();
    println!("allreduce:");
    println!();
    println!(
        "| size | flat | flat algo | hier | hier algo | hier pipelined | nccl ring | nccl tree |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &p.allreduce {
        println!(
            "| {} | {:.1} | {} | {:.1} | {} | {:.1} | {:.1} | {} |",
            size_label(r.bytes),
            r.flat.us,
            r.flat.algo,
            r.hier.us,
            r.hier.algo,
            r.hier_pipelined.us,
            r.nccl_ring_us,
            opt(r.nccl_tree_us)
        );
    }
    for (name, rows) in [("allgather", &p.allgather), ("alltoall", &p.alltoall)] {
        // NCCL's alltoall is grouped sends and receives, with no ring or tree formula.
        let nccl = rows.iter().any(|r| r.nccl_ring_us.is_some());
        println!();
        println!("{name}:");
        println!();
        println!(
            "| size | flat | hier |{}",
            if nccl { " nccl ring |" } else { "" }
        );
        println!("|---|---|---|{}", if nccl { "---|" } else { "" });
        for r in rows.iter() {
            let tail = if nccl {
                format!(" {} |", opt(r.nccl_ring_us))
            } else {
                String::new()
            };
            println!(
                "| {} | {:.1} | {:.1} |{tail}",
                size_label(r.bytes),
                r.flat_us,
                r.hier_us
            );
        }
    }
    println!();
    println!(
        "sparse, f32 gradient of {} (dense allreduce sends {:.1} MB per PE): densities at and \
         below which each beats dense",
        size_label(p.sparse_grad_bytes),
        p.dense_bytes_per_pe / 1e6
    );
    println!();
    println!("| method | MB per PE at 1% | by bytes | by time |");
    println!("|---|---|---|---|");
    for s in &p.sparse {
        println!(
            "| {} | {:.1} | {} | {} |",
            s.method,
            s.bytes_per_pe_at_1pct / 1e6,
            density(s.byte_crossover),
            density(s.time_crossover)
        );
    }
    if !p.step.is_empty() {
        println!();
        println!("trainer step (12 layers, width 768; H200 compute, this model's allreduce):");
        println!();
        println!("| PP x DP | compute ms | allreduce ms | step ms | tokens/s |");
        println!("|---|---|---|---|---|");
        for s in &p.step {
            println!(
                "| {} x {} | {:.1} | {:.1} | {:.1} | {:.0}k |",
                s.pp,
                s.dp,
                s.compute_ms,
                s.allreduce_ms,
                s.step_ms,
                s.tokens_per_s / 1e3
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_ranges_and_lists() {
        assert_eq!(
            parse_sizes("4K..256K", 4).unwrap(),
            vec![4096, 16384, 65536, 262144]
        );
        assert_eq!(parse_sizes("4K,1M", 4).unwrap(), vec![4096, 1 << 20]);
        assert!(parse_sizes("1M..4K", 2).is_err());
        assert!(parse_sizes("4Q", 2).is_err());
    }
}
