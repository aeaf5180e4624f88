//! Teams: split the world into the even and the odd PEs and allreduce within each team. Every
//! PE takes part in the workspace's allocation (it is collective over the world), even a PE in
//! no team. NVSHMEM refuses team splits when several PEs share one GPU: then this example says
//! so and exits 0 without checking anything.
//!
//!     nvsh run -n 4 -- target/release/examples/05_teams
//!
//! Exit status: 0 on PASS (or when splits are refused here), 1 on FAIL, 2 on an error.

use nvshmem::{AllreduceAlgo, Nvshmem, ReduceOp};
use std::process::ExitCode;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("05_teams: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> nvshmem::Result<bool> {
    let nv = Nvshmem::init()?;
    let (me, n) = (nv.my_pe(), nv.n_pes());
    let world = nv.team_world();
    // Every PE calls both splits (they are collective); each gets its own team or None.
    let evens = world.split_strided(0, 2, (n + 1) / 2);
    let odds = world.split_strided(1, 2, n / 2);
    let (evens, odds) = match (evens, odds) {
        (Ok(e), Ok(o)) => (e, o),
        (Err(e), _) | (_, Err(e)) => {
            println!("PE {me}: team split refused here ({e}); nothing checked");
            return Ok(true);
        }
    };
    let team = evens.as_ref().or(odds.as_ref());
    let mut ar = nv.allreduce_workspace_for(team, 1 << 16)?;
    let Some(team) = team else {
        println!("PE {me}: in no team (allocation only)");
        return Ok(true);
    };
    let input = nv.alloc::<i64>(4096)?;
    let output = nv.alloc::<i64>(4096)?;
    input.copy_from_host(&vec![me as i64; 4096])?;
    output.copy_from_host(&vec![i64::MIN; 4096])?;
    ar.run(
        &input,
        &output,
        ReduceOp::Sum,
        AllreduceAlgo::Auto,
        nv.stream(),
    )?;
    ar.sync(nv.stream())?;
    // The members are me % 2, me % 2 + 2, ...: their world numbers summed.
    let want: i64 = (me % 2..n).step_by(2).map(i64::from).sum();
    let pass = output.to_vec()?.iter().all(|&v| v == want);
    println!(
        "PE {me}: rank {} of {} in its team, sum {want}: {}",
        team.my_pe(),
        team.n_pes(),
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(pass)
}
