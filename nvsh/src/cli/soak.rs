//! `nvsh soak`: CLI glue over [`nvsh::soak`]. Every PE prints its own summary.

use nvsh::error::ToolResult;
use nvsh::soak::{self, SoakOptions, Workload};
use nvshmem::Nvshmem;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct SoakArgs {
    /// How long to run.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// allreduce, channel, family (every other collective of the table that moves data, the v
    /// forms and grouped send/recv included) or mixed (of 8 rounds: 4 allreduces, 2 family
    /// calls, 2 channel rounds).
    #[arg(long, default_value = "mixed", value_parser = Workload::parse)]
    workload: Workload,
    /// Seed of the (shared) random decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Largest allreduce (bytes; K, M suffixes).
    #[arg(long, default_value = "16M", value_parser = crate::bench::parse_size)]
    max_bytes: usize,
    /// Largest channel message (u32 elements).
    #[arg(long, default_value_t = 1 << 20)]
    max_message: usize,
    /// Fault injection: this PE kills itself (SIGKILL) ...
    #[arg(long)]
    die_pe: Option<i32>,
    /// ... at this iteration.
    #[arg(long, default_value_t = 100)]
    die_after: u64,
    /// Seconds between progress lines (PE 0).
    #[arg(long, default_value_t = 30.0)]
    report_every: f64,
}

pub fn run(args: SoakArgs) -> ToolResult<()> {
    let nv = Nvshmem::init()?;
    let opts = SoakOptions {
        duration: Duration::from_secs_f64(args.seconds.max(0.0)),
        workload: args.workload,
        seed: args.seed,
        max_bytes: args.max_bytes,
        max_message: args.max_message,
        die: args.die_pe.map(|pe| (pe, args.die_after)),
        report_every: Duration::from_secs_f64(args.report_every.max(0.1)),
    };
    let me = nv.my_pe();
    if me == 0 {
        println!(
            "soak: {} PE(s), {:?} for {:.0} s, seed {}, allreduces up to {} bytes, messages up \
             to {} u32, timeout {} ms{}",
            nv.n_pes(),
            opts.workload,
            args.seconds,
            opts.seed,
            opts.max_bytes,
            opts.max_message,
            nv.timeout().as_millis(),
            match opts.die {
                Some((pe, at)) => format!(", PE {pe} dies at iteration {at}"),
                None => String::new(),
            }
        );
    }
    let started = Instant::now();
    let report = match soak::run(&nv, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "PE {me}: soak failed after {:.1} s: {e}",
                started.elapsed().as_secs_f64()
            );
            return Err(e.into());
        }
    };
    println!(
        "PE {me}: soak done: {:.1} s, {} iterations, {} allreduces ({:.2} GB), {} family calls, \
         {} channel messages ({:.2} GB), {} mismatches; host rss {} -> {} KiB ({:+} KiB), device used {} -> \
         {} MiB ({:+} KiB); {} symmetric buffers alive",
        report.elapsed.as_secs_f64(),
        report.iterations,
        report.allreduces,
        report.bytes_reduced as f64 / 1e9,
        report.family_calls,
        report.messages,
        report.bytes_sent as f64 / 1e9,
        report.mismatches,
        report.rss_kib.0,
        report.rss_kib.1,
        report.rss_growth_kib(),
        report.device_used.0 >> 20,
        report.device_used.1 >> 20,
        report.device_growth() / 1024,
        report.live_buffers
    );
    soak::verdict(&report)
}
