//! `02_ring_exchange` under its old name, for the mpirun and `nvsh run` scripts that call it.

#[path = "02_ring_exchange.rs"]
mod numbered;

fn main() -> std::process::ExitCode {
    numbered::main()
}
