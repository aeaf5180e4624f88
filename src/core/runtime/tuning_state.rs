//! The tuned tables `Auto` consults: loaded at init and agreed by every PE, then read, updated
//! by online tuning and saved.

use super::{Nvshmem, Vote};
use crate::core::error::{Error, Result};
use crate::core::result;
use crate::core::tuning::{self, Fingerprint, TuneMode, TuningState, TuningTable};
use crate::sys;

impl Nvshmem {
    /// Loads the tuning file for this machine's fingerprint, then checks that every PE holds
    /// the same table and mode: `Auto` must pick alike everywhere, so if any PE differs (another
    /// file on its node, another NVSH_TUNE) every PE falls back to the built-in tables, with a
    /// warning. Collective (after NVSHMEM's init, where every PE is).
    pub(super) fn start_tuning(&self, mode: TuneMode) -> Result<()> {
        let fp = self.tuning_fingerprint();
        *self.tuning.borrow_mut() = TuningState::load(fp, mode, tuning::path_from_env());
        self.agree_on_tuning()
    }

    /// Two rounds of votes: PE 0's hash of its tuning reaches every PE, then every PE says
    /// whether its own differs; one that does sends all to the built-in tables.
    fn agree_on_tuning(&self) -> Result<()> {
        let mine = self.tuning.borrow().agreement_hash();
        let theirs = self
            .agree_collective("tuning agreement", Vote::No(mine))?
            .map_or(mine, |(_, hash)| hash);
        let vote = if theirs == mine {
            Vote::Yes
        } else {
            Vote::No(1)
        };
        if let Some((pe, _)) = self.agree_collective("tuning agreement", vote)? {
            log::warn!(
                "PE {pe} holds another tuning file or {} than PE 0; every PE uses the built-in \
                 tables without online tuning (give all PEs the same {} and {})",
                tuning::TUNE_ENV,
                tuning::TUNING_FILE_ENV,
                tuning::TUNE_ENV
            );
            let mut t = self.tuning.borrow_mut();
            t.table = TuningTable::default();
            t.mode = TuneMode::Off;
            t.source = format!("built-in (PE {pe}'s tuning differed)");
        }
        Ok(())
    }

    /// What a tuning is valid for on this job (see [`Fingerprint`]): the same on every PE of a
    /// job of like nodes, and the same in `nvsh tune` as at init.
    pub fn tuning_fingerprint(&self) -> Fingerprint {
        use cudarc::driver::sys::CUdevice_P2PAttribute as Attr;
        let local = self.real_node_pes().max(1);
        let per_node = local.min(self.cuda.device_count).max(1);
        let gpus = per_node * (self.n_pes / local).max(1);
        // The runtime's arrival counters are symmetric: nvshmem_ptr maps them where the peer's
        // whole heap is mapped.
        let mapped = (0..self.n_pes).all(|pe| {
            // SAFETY: a symmetric address of this runtime's heap and a PE of the job.
            pe == self.my_pe
                || self.may_map(pe)
                    && !unsafe {
                        sys::nvshmem_ptr(self.waits.arrivals as *const std::ffi::c_void, pe)
                    }
                    .is_null()
        });
        // GPUs 0 and 1 stand for every pair: nodes are alike.
        let p2p = |attr: Attr| -> i32 {
            let mut v = -1;
            let devs = (
                cudarc::driver::result::device::get(0),
                cudarc::driver::result::device::get(1),
            );
            if let (Ok(a), Ok(b)) = devs {
                // SAFETY: an out-pointer to an int and two device handles of this process.
                let r = unsafe { cudarc::driver::sys::cuDeviceGetP2PAttribute(&mut v, attr, a, b) };
                if r != cudarc::driver::sys::CUresult::CUDA_SUCCESS {
                    v = -1;
                }
            }
            v
        };
        let (link, p2p_rank) = if self.n_pes == 1 {
            ("none", -1)
        } else if !mapped {
            ("network", -1)
        } else if per_node == 1 {
            ("same-gpu", -1)
        } else {
            let rank = p2p(Attr::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK);
            match p2p(Attr::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED) {
                1 => ("nvlink", rank),
                _ => ("pcie", rank),
            }
        };
        Fingerprint {
            gpu: self.ctx.name().unwrap_or_else(|_| "unknown GPU".into()),
            gpus,
            link: link.into(),
            p2p_rank,
            pes: self.n_pes,
            nvshmem: crate::core::version_string(result::host_library_version()),
            runtime: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// Whether `Auto` calls tune unseen sizes at run time (`NVSH_TUNE`, agreed by all PEs).
    pub fn tune_mode(&self) -> TuneMode {
        self.tuning.borrow().mode
    }

    /// The tuned table `Auto` consults before the built-in ones (empty: built-in only).
    pub fn tuning_table(&self) -> TuningTable {
        self.tuning.borrow().table.clone()
    }

    /// Where the tuned table came from, in words (for logs and reports).
    pub fn tuning_source(&self) -> String {
        self.tuning.borrow().source.clone()
    }

    /// The tuning file loaded at init (or None): where [`Nvshmem::save_tuning`] writes by default.
    pub fn tuning_path(&self) -> Option<std::path::PathBuf> {
        self.tuning.borrow().path.clone()
    }

    /// Replaces the tuned table (`nvsh tune` installs what it measured; tests clear it).
    /// Every PE must pass the same table at the same point, as with any collective setting.
    pub fn set_tuning_table(&self, table: TuningTable, source: &str) {
        let mut t = self.tuning.borrow_mut();
        t.table = table;
        t.source = source.to_string();
    }

    /// Loads the entry for this machine from the tuning file at `path` in place of the current
    /// table, as init does, and returns what was found; an unusable file or another machine's
    /// leaves the built-in tables. Collective: every PE calls it with a file of the same
    /// content (checked: if one differs, all use the built-in tables).
    pub fn load_tuning_file(&self, path: &std::path::Path) -> Result<tuning::Loaded> {
        let fp = self.tuning.borrow().fingerprint.clone();
        let loaded = tuning::load(path, &fp);
        let mode = self.tune_mode();
        let mut state = TuningState::load(fp, mode, Some(path.to_path_buf()));
        std::mem::swap(&mut *self.tuning.borrow_mut(), &mut state);
        self.agree_on_tuning()?;
        // A disagreement turned tuning off; what was asked for stays.
        self.tuning.borrow_mut().mode = mode;
        Ok(loaded)
    }

    /// The tuned choice of `collective` (a table key, `tuning::collective_key`) for `bytes` of
    /// `elem_bytes`-byte elements, if the tuned table has one; `f` sees it while the table is
    /// borrowed.
    pub(crate) fn tuned<R>(
        &self,
        collective: &str,
        bytes: usize,
        elem_bytes: usize,
        f: impl FnOnce(Option<&str>) -> R,
    ) -> R {
        let t = self.tuning.borrow();
        if t.table.collectives.is_empty() {
            return f(None);
        }
        f(t.table.lookup(collective, bytes, elem_bytes))
    }

    /// Records an online tuning's choice for `min ..= max` bytes.
    pub(crate) fn record_tuned(
        &self,
        collective: &str,
        elem_bytes: usize,
        (min, max): (u64, u64),
        choice: &str,
    ) {
        self.tuning
            .borrow_mut()
            .table
            .insert(collective, elem_bytes, min, max, choice);
    }

    /// Writes the tuned table (a tuning file's plus online results) as this machine's entry of
    /// the tuning file at `path`, else the one loaded at init, else the default cache path;
    /// other machines' entries there stay. Returns the path written.
    pub fn save_tuning(&self, path: Option<&std::path::Path>) -> Result<std::path::PathBuf> {
        let t = self.tuning.borrow();
        let path = path
            .map(std::path::Path::to_path_buf)
            .or_else(|| t.path.clone())
            .or_else(tuning::default_path)
            .ok_or(Error::Io {
                what: "saving the tuning".into(),
                message: format!(
                    "no path: set {} or HOME, or pass a path",
                    tuning::TUNING_FILE_ENV
                ),
            })?;
        tuning::save(&path, &t.fingerprint, &t.table, None)?;
        log::info!("tuning saved to {}", path.display());
        Ok(path)
    }
}
