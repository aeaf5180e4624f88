//! Ctrl-C (SIGINT) and SIGTERM during training. The first one asks for a stop at the next step
//! boundary: every PE adds the request to the statistics it sums each step, so all of them stop
//! after the same step, save their checkpoints when `--save` is given, and the binary exits
//! with status 130. A second signal ends the process at once, with the same status.

use crate::error::{GptError, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Exit status of a run stopped by a signal (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: i32 = 130;

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs the handlers (once per process; later calls do nothing).
pub fn install() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        for sig in [SIGINT, SIGTERM] {
            // Registered first, so it sees the flag as it was: set only by an earlier signal.
            signal_hook::flag::register_conditional_shutdown(
                sig,
                EXIT_INTERRUPTED,
                Arc::clone(flag()),
            )
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(flag())))
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
    .clone()
    .map_err(|e| GptError::Config(format!("cannot install the Ctrl-C handler: {e}")))
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    flag().load(Ordering::Relaxed)
}

/// Asks for a stop as a signal would (tests, embedders).
pub fn request() {
    flag().store(true, Ordering::Relaxed);
}
