//! `nvsh run`: starts N local processes with the launcher environment (see [`nvshmem::tools::bootstrap`]).
//!
//! A job of PEs only makes progress while every PE is alive: NVSHMEM's collectives wait for all
//! of them. So the launcher treats the N processes as one unit. The first failure stops the
//! others, and its status becomes the launcher's, so scripts and schedulers see why the job
//! ended. Signals sent to the launcher reach every process, so an interrupted job leaves no PE
//! holding a GPU.
//!
//! Each process runs in its own process group. Stop signals go to the whole group, so helper
//! processes that a PE started (a shell's children, say) stop with it, and a Ctrl-C at the
//! terminal reaches the PEs once, through the launcher, instead of twice. Because a background
//! process group cannot read the terminal, the processes get an empty stdin. When a process
//! exits, what is left in its group is killed: a crashed PE's helpers would otherwise keep
//! running (and keep a GPU).
//!
//! Nothing outlives the launcher: a watchdog process (forked before the ranks) kills every
//! rank's process group if the launcher dies without stopping them (SIGKILL, the OOM killer),
//! which also covers a PE under a wrapper (compute-sanitizer, nsys, a script), where
//! PR_SET_PDEATHSIG reaches only the wrapper. With [`LaunchSpec::subreaper`], processes that left
//! their group (daemons) are adopted by the launcher and killed when the job ends.
//!
//! Output is forwarded line by line with the rank in front (`[R] line`). Each line is written
//! whole under the stream's lock, so lines of different ranks never mix.

use nvshmem::tools::bootstrap;
use nvshmem::Error;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long the processes get to exit after SIGTERM (or a forwarded signal) before SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Environment variable that selects the GPUs (set when [`LaunchSpec::gpus`] is given).
pub const ENV_CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// Upper bound on the wait for a process's last output line before its failure is reported:
/// the report reads best after the process's own last words, but must not wait on a pipe that a
/// background process keeps open.
const REPORT_DELAY: Duration = Duration::from_millis(200);

/// How long output may stay open but silent after every process has exited, before the
/// launcher stops waiting for it. Only time with nothing read and nothing being written counts:
/// forwarding that waits on a slow stdout (`| less`, a stalled tee) goes on to the end of file.
/// Output can only stay open this long when a process that escaped both its group and the
/// subreaper holds a pipe.
const OUTPUT_DRAIN: Duration = Duration::from_secs(1);

/// Upper bound on sleeping between checks; SIGCHLD and closed pipes wake the loop earlier.
const POLL: Duration = Duration::from_millis(50);

/// A line longer than this is forwarded in pieces, so a process that never writes a newline
/// cannot make the launcher buffer without bound.
const MAX_LINE: usize = 1 << 20;

/// What to launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Number of processes (PEs), at least 1.
    pub n: usize,
    /// GPU indices for `CUDA_VISIBLE_DEVICES`, the same list for every process (the runtime
    /// picks GPU `local_rank % len`). `None` leaves the variable as the launcher has it.
    pub gpus: Option<Vec<u32>>,
    /// Program: a name looked up on `PATH`, or a path.
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Time between the stop signal and SIGKILL.
    pub grace: Duration,
    /// Variables set for every process on top of the launcher's environment (the launcher
    /// contract's variables win over these).
    pub extra_env: Vec<(OsString, OsString)>,
    /// Forward SIGINT, SIGTERM, SIGHUP and SIGQUIT received by this process to the processes.
    /// Off for callers that handle signals themselves (see [`launch`] for what turning it on
    /// costs).
    pub forward_signals: bool,
    /// Make this process a child subreaper (PR_SET_CHILD_SUBREAPER), so that processes the
    /// ranks start and orphan are adopted by it and killed when the job ends. Only for a
    /// process that has no children of its own besides the ranks (the `nvsh run` command):
    /// every other child of this process is taken for such an orphan.
    pub subreaper: bool,
    /// What the others get when one process fails.
    pub on_failure: OnFailure,
}

/// What the launcher does with the other processes when one fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// Stop them at once (SIGTERM, SIGKILL after the grace period): the default.
    Stop,
    /// Let them end on their own (the runtime's waits time out and name the failed PE); kill
    /// those still running after this long. For seeing what the survivors report.
    Wait(Duration),
}

impl LaunchSpec {
    /// `n` processes of `program` with no arguments, the default grace period, signal
    /// forwarding on and the GPUs left as they are.
    pub fn new(n: usize, program: impl Into<OsString>) -> LaunchSpec {
        LaunchSpec {
            n,
            gpus: None,
            program: program.into(),
            args: Vec::new(),
            grace: DEFAULT_GRACE,
            extra_env: Vec::new(),
            forward_signals: true,
            subreaper: false,
            on_failure: OnFailure::Stop,
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> LaunchSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// How one process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankStatus {
    /// It exited with this code.
    Exited(i32),
    /// A signal ended it.
    Signaled { signal: i32, core_dumped: bool },
}

impl RankStatus {
    fn from_exit_status(status: ExitStatus) -> RankStatus {
        match (status.code(), status.signal()) {
            (Some(code), _) => RankStatus::Exited(code),
            (None, Some(signal)) => RankStatus::Signaled {
                signal,
                core_dumped: status.core_dumped(),
            },
            // Neither happens for a waited-for child on Unix; report it as a failure.
            (None, None) => RankStatus::Exited(1),
        }
    }

    pub fn success(&self) -> bool {
        *self == RankStatus::Exited(0)
    }

    /// The shell's convention: the exit code, or 128 + the signal number.
    pub fn exit_code(&self) -> u8 {
        match *self {
            RankStatus::Exited(code) => code as u8,
            RankStatus::Signaled { signal, .. } => (128 + signal) as u8,
        }
    }
}

impl fmt::Display for RankStatus {
    /// Reads after "rank R": "exited with code 3", "was killed by signal 9 (SIGKILL)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RankStatus::Exited(code) => write!(f, "exited with code {code}"),
            RankStatus::Signaled {
                signal,
                core_dumped,
            } => {
                write!(f, "was killed by {}", signal_description(signal))?;
                if core_dumped {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// Why the launcher stopped the job before every process finished on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// This rank failed first.
    Failed { rank: usize, status: RankStatus },
    /// The launcher received this signal (SIGINT, SIGTERM, SIGHUP or SIGQUIT) and forwarded it.
    Interrupted { signal: i32 },
}

/// How a launch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOutcome {
    /// 0 when every process succeeded; else the first failure's code (128 + signal for a
    /// signal death), or 128 + the signal that interrupted the launcher.
    pub exit_code: u8,
    /// What ended the job early; `None` when every process exited 0 on its own.
    pub stop: Option<Stop>,
    /// Every process's status, by rank.
    pub statuses: Vec<RankStatus>,
}

impl LaunchOutcome {
    /// The rank whose failure stopped the job.
    pub fn failed_rank(&self) -> Option<usize> {
        match self.stop {
            Some(Stop::Failed { rank, .. }) => Some(rank),
            _ => None,
        }
    }
}

/// Why a launch could not start, or lost track of its processes.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the number of processes must be at least 1 (got -n 0)")]
    NoProcesses,

    #[error(
        "--gpus {list:?} is not valid: {reason}; expected comma-separated GPU indices such as \
         0,1"
    )]
    InvalidGpus { list: String, reason: String },

    #[error(
        "--gpus {requested} names GPU {index}, but CUDA_VISIBLE_DEVICES={visible} {what}; \
         --gpus counts within that list, from 0 (or unset CUDA_VISIBLE_DEVICES to use the \
         machine's numbering)"
    )]
    GpuNotVisible {
        requested: String,
        index: u32,
        visible: String,
        what: String,
    },

    #[error(
        "nvsh run was started by {launcher} as one of {size} processes ({size_var}={size}), so \
         each of them would start its own separate job; nvsh run starts all PEs of one node \
         itself: start it once (srun -n 1 on one node, or outside srun), or start the program \
         with srun directly (`srun --mpi=pmix`, or any launch of a build with the `mpi` \
         feature) or with mpirun"
    )]
    UnderAnotherLauncher {
        launcher: &'static str,
        size_var: &'static str,
        size: i32,
    },

    #[error(
        "program `{program}` not found in any directory on PATH; check its name and PATH, or \
         give its path (e.g. ./{program})"
    )]
    ProgramNotFound { program: String },

    #[error("program `{program}` not found: no such file; check the path")]
    NoSuchFile { program: String },

    #[error(
        "`{program}` is not an executable file; check that it is a program and has execute \
         permission (chmod +x)"
    )]
    NotExecutable { program: String },

    #[error("could not make the NVSHMEM unique ID for the job: {0}")]
    UniqueId(#[from] Error),

    #[error(
        "could not install the handlers that forward SIGINT, SIGTERM, SIGHUP and SIGQUIT to \
         the processes: {0}"
    )]
    Signals(#[source] io::Error),

    #[error("could not start the watchdog that stops the processes if nvsh dies: {0}")]
    Watchdog(#[source] io::Error),

    #[error(
        "could not start rank {rank} (`{program}`): {source}; the ranks already started were \
         stopped"
    )]
    Spawn {
        rank: usize,
        program: String,
        #[source]
        source: io::Error,
    },

    #[error("could not wait for rank {rank}: {source}; all processes were killed")]
    Wait {
        rank: usize,
        #[source]
        source: io::Error,
    },
}

/// Parses a `--gpus` list: comma-separated, non-negative, distinct integers, at least one.
pub fn parse_gpus(list: &str) -> Result<Vec<u32>, LaunchError> {
    let invalid = |reason: String| LaunchError::InvalidGpus {
        list: list.to_string(),
        reason,
    };
    if list.trim().is_empty() {
        return Err(invalid("the list is empty".into()));
    }
    let mut gpus = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(invalid("it has an empty entry".into()));
        }
        // u32's parser takes "+1"; CUDA does not.
        let index = item
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| item.parse::<u32>().ok())
            .flatten()
            .ok_or_else(|| invalid(format!("`{item}` is not a GPU index")))?;
        if gpus.contains(&index) {
            // CUDA ignores the list from a repeated index onwards.
            return Err(invalid(format!("GPU {index} is listed twice")));
        }
        gpus.push(index);
    }
    Ok(gpus)
}

/// The `CUDA_VISIBLE_DEVICES` value for `--gpus`: indices into the inherited list when there is
/// one (Slurm, or whoever started the launcher, may have given this job GPUs 4 and 5; `--gpus
/// 0` then means GPU 4), else the indices themselves.
fn visible_gpus(gpus: &[u32], inherited: Option<&OsStr>) -> Result<String, LaunchError> {
    let requested = || {
        gpus.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let Some(inherited) = inherited else {
        return Ok(requested());
    };
    let visible = inherited.to_string_lossy();
    // CUDA reads the list up to its first empty entry.
    let entries: Vec<&str> = visible
        .split(',')
        .map(str::trim)
        .take_while(|e| !e.is_empty())
        .collect();
    let mut chosen = Vec::with_capacity(gpus.len());
    for &index in gpus {
        let Some(entry) = entries.get(index as usize) else {
            return Err(LaunchError::GpuNotVisible {
                requested: requested(),
                index,
                visible: visible.to_string(),
                what: if entries.is_empty() {
                    "makes no GPU visible".into()
                } else {
                    format!("leaves this job {} GPU(s)", entries.len())
                },
            });
        };
        chosen.push(*entry);
    }
    Ok(chosen.join(","))
}

/// Runs the job: starts `spec.n` processes with the launcher environment, forwards their
/// output with rank prefixes, waits for all of them and says how the job ended.
///
/// The first process that fails (non-zero exit or a signal) stops the job: the others get
/// SIGTERM and, after `spec.grace`, SIGKILL; one line on stderr names the rank and its status.
/// Every process is waited for before this returns, whatever happens.
///
/// With `spec.forward_signals`, SIGINT, SIGTERM, SIGHUP and SIGQUIT received by this process are
/// forwarded to the processes (a second one kills them at once), and this process keeps
/// handling them after `launch` returns: signal-hook cannot restore their default action. Meant
/// for launcher processes, which exit soon after (re-raising the signal with
/// `signal_hook::low_level::emulate_default_handler`, as `nvsh run` does).
///
/// Refuses to start when this process is one of several started by srun or mpirun: each of
/// them would start a separate job.
pub fn launch(spec: &LaunchSpec) -> Result<LaunchOutcome, LaunchError> {
    if spec.n == 0 {
        return Err(LaunchError::NoProcesses);
    }
    if let Some(step) = bootstrap::step_env().filter(|s| s.size > 1) {
        return Err(LaunchError::UnderAnotherLauncher {
            launcher: step.launcher,
            size_var: step.size_var,
            size: step.size,
        });
    }
    let inherited = |name: &str| {
        spec.extra_env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os(name))
    };
    let gpu_list = match &spec.gpus {
        Some(gpus) if gpus.is_empty() => {
            return Err(LaunchError::InvalidGpus {
                list: String::new(),
                reason: "the list is empty".into(),
            })
        }
        Some(gpus) => Some(visible_gpus(
            gpus,
            inherited(ENV_CUDA_VISIBLE_DEVICES).as_deref(),
        )?),
        None => None,
    };
    let path_var = inherited("PATH");
    let executable = resolve_program(&spec.program, path_var.as_deref())?;
    let unique_id = bootstrap::encode_hex(&bootstrap::unique_id_bytes(
        &nvshmem::result::get_unique_id()?,
    ));

    let (tx, rx) = mpsc::channel();
    let signals = SignalThread::start(spec.forward_signals, tx.clone())?;
    let watchdog = match Watchdog::start(spec.n) {
        Ok(w) => w,
        Err(e) => {
            signals.stop();
            return Err(LaunchError::Watchdog(e));
        }
    };
    if spec.subreaper {
        become_subreaper();
    }
    let reaper = Reaper {
        adopt: spec.subreaper,
        watchdog: watchdog.pid,
    };
    let activity = Arc::new(Activity::default());

    let mut ranks: Vec<Rank> = Vec::with_capacity(spec.n);
    for rank in 0..spec.n {
        let mut cmd = Command::new(&executable);
        cmd.arg0(&spec.program)
            .args(&spec.args)
            .envs(spec.extra_env.iter().map(|(k, v)| (k, v)))
            .env(bootstrap::ENV_RANK, rank.to_string())
            .env(bootstrap::ENV_LOCAL_RANK, rank.to_string())
            .env(bootstrap::ENV_WORLD_SIZE, spec.n.to_string())
            .env(bootstrap::ENV_LOCAL_WORLD_SIZE, spec.n.to_string())
            .env(bootstrap::ENV_UNIQUE_ID, &unique_id)
            // Explicit, so that a leftover NVSH_BOOTSTRAP=single cannot make every rank a
            // separate 1-PE job.
            .env(nvshmem::BOOTSTRAP_ENV, "launcher")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(list) = &gpu_list {
            cmd.env(ENV_CUDA_VISIBLE_DEVICES, list);
        }
        die_with_parent(&mut cmd);
        match Rank::spawn(rank, &mut cmd, &tx, &activity) {
            Ok(r) => {
                watchdog.guard(r.pid);
                ranks.push(r);
            }
            Err(source) => {
                kill_and_reap(&mut ranks, &watchdog);
                reaper.kill_adopted(&ranks);
                watchdog.stop();
                signals.stop();
                return Err(LaunchError::Spawn {
                    rank,
                    program: spec.program.to_string_lossy().into_owned(),
                    source,
                });
            }
        }
    }
    drop(tx);

    let result = supervise(
        &mut ranks,
        &rx,
        spec.grace,
        spec.on_failure,
        &watchdog,
        &reaper,
    );
    if result.is_err() {
        kill_and_reap(&mut ranks, &watchdog);
    }
    // The job is over: orphans that left their rank's group go now, so that they neither keep
    // a GPU nor hold the output open.
    reaper.kill_adopted(&ranks);
    watchdog.stop();
    drain_output(&mut ranks, &rx, &activity);
    signals.stop();
    let stop = result?;
    let statuses: Vec<RankStatus> = ranks
        .iter()
        .map(|r| r.status.expect("every rank was waited for"))
        .collect();
    let exit_code = match stop {
        None => 0,
        Some(Stop::Failed { status, .. }) => status.exit_code(),
        Some(Stop::Interrupted { signal }) => (128 + signal) as u8,
    };
    Ok(LaunchOutcome {
        exit_code,
        stop,
        statuses,
    })
}

/// Finds the file `program` names, as execvp would, so that a wrong name is reported before
/// anything starts rather than as N spawn failures.
fn resolve_program(program: &OsStr, path_var: Option<&OsStr>) -> Result<PathBuf, LaunchError> {
    let name = || program.to_string_lossy().into_owned();
    let is_executable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.is_empty() {
        return Err(LaunchError::NoSuchFile { program: name() });
    }
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return if is_executable(&path) {
            Ok(path)
        } else if path.exists() {
            Err(LaunchError::NotExecutable { program: name() })
        } else {
            Err(LaunchError::NoSuchFile { program: name() })
        };
    }
    // execvp's search path when PATH is unset.
    let path_var = path_var.unwrap_or(OsStr::new("/bin:/usr/bin"));
    let mut found_not_executable = false;
    for dir in std::env::split_paths(path_var) {
        // An empty entry means the current directory.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
        found_not_executable |= candidate.is_file();
    }
    if found_not_executable {
        Err(LaunchError::NotExecutable { program: name() })
    } else {
        Err(LaunchError::ProgramNotFound { program: name() })
    }
}

/// Asks Linux to SIGKILL the process if the launcher dies without stopping it (SIGKILL, OOM
/// killer), so that no orphaned PE keeps a GPU. Linux watches the spawning thread, not the
/// process; [`launch`] holds that thread until every process has exited. (The watchdog covers
/// the rest of the process's group.)
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: getpid is always safe.
    let launcher = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // A launcher that died between fork and prctl sent no signal: check by hand.
            if libc::getppid() != launcher {
                libc::_exit(127);
            }
            Ok(())
        });
    }
}

/// Makes this process the one that orphans of its descendants are reparented to.
#[cfg(target_os = "linux")]
fn become_subreaper() {
    // SAFETY: a plain prctl on this process. Failure (very old kernels) only loses the adoption
    // of daemons; the watchdog and the group kills still work.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        eprintln!(
            "nvsh run: warning: could not become a subreaper ({}); processes that leave their \
             rank's process group may outlive the job",
            io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() {}

/// Children of this process other than the ranks and the watchdog: orphans it adopted as a
/// subreaper.
struct Reaper {
    adopt: bool,
    watchdog: i32,
}

impl Reaper {
    /// This process's children, from /proc (each entry's parent pid).
    fn children() -> Vec<i32> {
        // SAFETY: getpid is always safe.
        let me = unsafe { libc::getpid() };
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                    return false;
                };
                // "pid (comm) state ppid ...": the command name may hold spaces and parens.
                let mut rest = stat
                    .rsplit_once(')')
                    .map(|(_, r)| r)
                    .unwrap_or("")
                    .split(' ');
                rest.nth(2).and_then(|p| p.parse::<i32>().ok()) == Some(me)
            })
            .collect()
    }

    fn adopted(&self, ranks: &[Rank]) -> Vec<i32> {
        if !self.adopt {
            return Vec::new();
        }
        Self::children()
            .into_iter()
            .filter(|&pid| pid != self.watchdog && !ranks.iter().any(|r| r.pid == pid))
            .collect()
    }

    /// Reaps adopted orphans that have exited, so that they do not stay zombies.
    fn reap_adopted(&self, ranks: &[Rank]) {
        for pid in self.adopted(ranks) {
            // SAFETY: pid is this process's child and no Child handle owns it.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }

    /// Kills and reaps every adopted orphan, including those that their own dying parents hand
    /// over meanwhile (bounded: a fork bomb cannot keep the launcher here).
    fn kill_adopted(&self, ranks: &[Rank]) {
        for _ in 0..100 {
            let adopted = self.adopted(ranks);
            if adopted.is_empty() {
                return;
            }
            for &pid in &adopted {
                // SAFETY: pid is this process's unreaped child, so it cannot be reused.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
        }
    }
}

/// A forked copy of the launcher that SIGKILLs the ranks' process groups when the launcher dies
/// without having stopped them. It learns the groups through a pipe: a positive number guards a
/// group, a negative one forgets it (the rank was reaped, so its ID may be reused), 0 ends the
/// watch. End of file without 0 means the launcher is gone.
struct Watchdog {
    pid: i32,
    pipe: std::fs::File,
}

impl Watchdog {
    fn start(n: usize) -> io::Result<Watchdog> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Allocated before fork: the child of a multi-threaded process must not allocate.
        let mut groups: Vec<i32> = Vec::with_capacity(n);
        // SAFETY: the child runs only async-signal-safe calls (read, kill, signal, _exit) and
        // writes within `groups`' capacity; it never returns into Rust code of the parent.
        match unsafe { libc::fork() } {
            -1 => {
                let e = io::Error::last_os_error();
                // SAFETY: both descriptors are ours.
                unsafe {
                    libc::close(fds[0]);
                    libc::close(fds[1]);
                }
                Err(e)
            }
            0 => unsafe {
                libc::close(fds[1]);
                // Signals meant for the launcher (a Ctrl-C reaches its whole process group)
                // must not end the watch; the launcher forwards them.
                for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                    libc::signal(signal, libc::SIG_IGN);
                }
                loop {
                    let mut buf = [0u8; 4];
                    let mut got = 0;
                    while got < 4 {
                        let r = libc::read(fds[0], buf.as_mut_ptr().add(got).cast(), 4 - got);
                        if r > 0 {
                            got += r as usize;
                        } else if r == 0 || *libc::__errno_location() != libc::EINTR {
                            break;
                        }
                    }
                    if got < 4 {
                        for &g in &groups {
                            libc::kill(-g, libc::SIGKILL);
                        }
                        libc::_exit(0);
                    }
                    match i32::from_ne_bytes(buf) {
                        0 => libc::_exit(0),
                        g if g > 0 && groups.len() < groups.capacity() => groups.push(g),
                        g if g < 0 => groups.retain(|&x| x != -g),
                        _ => {}
                    }
                }
            },
            pid => {
                // SAFETY: the read end belongs to the watchdog now; the write end is ours.
                unsafe { libc::close(fds[0]) };
                use std::os::fd::FromRawFd;
                // SAFETY: fds[1] is an open descriptor owned by nothing else.
                let pipe = unsafe { std::fs::File::from_raw_fd(fds[1]) };
                Ok(Watchdog { pid, pipe })
            }
        }
    }

    fn send(&self, value: i32) {
        // Four bytes are written atomically to a pipe. A failure means the watchdog is gone;
        // there is nothing better to do than go on.
        let _ = (&self.pipe).write_all(&value.to_ne_bytes());
    }

    fn guard(&self, group: i32) {
        self.send(group);
    }

    fn forget(&self, group: i32) {
        self.send(-group);
    }

    /// Ends the watch (every rank is reaped) and reaps the watchdog.
    fn stop(self) {
        self.send(0);
        drop(self.pipe);
        // SAFETY: the watchdog is this process's child, not yet reaped.
        unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// What wakes the supervising loop.
enum Event {
    Signal(i32),
    /// One of a rank's two output streams reached end of file.
    OutputClosed(usize),
}

struct Rank {
    child: Child,
    /// Also the process group's ID (each rank leads its own group).
    pid: i32,
    status: Option<RankStatus>,
    open_streams: u8,
    readers: Vec<JoinHandle<()>>,
}

impl Rank {
    fn spawn(
        rank: usize,
        cmd: &mut Command,
        events: &Sender<Event>,
        activity: &Arc<Activity>,
    ) -> io::Result<Rank> {
        let mut child = cmd.spawn()?;
        let pid = child.id() as i32;
        let mut readers = Vec::with_capacity(2);
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        for (stream, pipe) in [
            (Stream::Stdout, Box::new(stdout) as Box<dyn Read + Send>),
            (Stream::Stderr, Box::new(stderr)),
        ] {
            let events = events.clone();
            let activity = Arc::clone(activity);
            let spawned = thread::Builder::new()
                .name(format!("nvsh-rank{rank}-{stream:?}"))
                .spawn(move || {
                    forward_lines(rank, pipe, stream, &activity);
                    let _ = events.send(Event::OutputClosed(rank));
                });
            match spawned {
                Ok(handle) => readers.push(handle),
                Err(e) => {
                    signal_group(pid, libc::SIGKILL);
                    let _ = child.wait();
                    return Err(e);
                }
            }
        }
        Ok(Rank {
            child,
            pid,
            status: None,
            open_streams: 2,
            readers,
        })
    }

    fn running(&self) -> bool {
        self.status.is_none()
    }
}

/// Signals a rank's process group, or the rank alone if it left the group.
fn signal_group(pid: i32, signal: i32) {
    // SAFETY: plain syscalls. The rank is not yet waited for, so its pid (and the group's ID)
    // cannot belong to another process.
    unsafe {
        if libc::kill(-pid, signal) != 0 {
            libc::kill(pid, signal);
        }
    }
}

fn signal_running(ranks: &[Rank], signal: i32) -> Vec<usize> {
    let mut signalled = Vec::new();
    for (rank, r) in ranks.iter().enumerate() {
        if r.running() {
            signal_group(r.pid, signal);
            signalled.push(rank);
        }
    }
    signalled
}

/// Whether the process has exited, leaving it unreaped (a zombie).
fn has_exited(pid: i32) -> io::Result<bool> {
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain syscall on our own child; WNOWAIT leaves it unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        if r == 0 {
            // SAFETY: waitid succeeded; si_pid is 0 when the child has not exited.
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps a rank that has exited: first kills what is left in its process group (a crashed
/// PE's helpers), which is safe only while the unreaped rank keeps the group's ID from being
/// reused.
fn reap_rank(r: &mut Rank, watchdog: &Watchdog) -> io::Result<()> {
    // SAFETY: plain syscall; the group's leader is unreaped, so the ID is still this group's.
    unsafe { libc::kill(-r.pid, libc::SIGKILL) };
    watchdog.forget(r.pid);
    let status = r.child.wait()?;
    r.status = Some(RankStatus::from_exit_status(status));
    Ok(())
}

/// Collects the status of every rank that exited since the last call.
fn reap(ranks: &mut [Rank], watchdog: &Watchdog) -> Result<Vec<usize>, LaunchError> {
    let mut exited = Vec::new();
    for (rank, r) in ranks.iter_mut().enumerate() {
        if !r.running() {
            continue;
        }
        let reaped = has_exited(r.pid).and_then(|done| match done {
            true => reap_rank(r, watchdog).map(|()| true),
            false => Ok(false),
        });
        match reaped {
            Ok(true) => exited.push(rank),
            Ok(false) => {}
            Err(source) => return Err(LaunchError::Wait { rank, source }),
        }
    }
    Ok(exited)
}

/// Last resort when the launcher cannot go on: SIGKILL everything still running and wait.
fn kill_and_reap(ranks: &mut [Rank], watchdog: &Watchdog) {
    for r in ranks.iter_mut().filter(|r| r.running()) {
        signal_group(r.pid, libc::SIGKILL);
        let _ = reap_rank(r, watchdog);
    }
}

fn rank_list(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until every rank has exited, reacting to failures and signals. Returns what stopped
/// the job early, if anything.
fn supervise(
    ranks: &mut [Rank],
    events: &Receiver<Event>,
    grace: Duration,
    on_failure: OnFailure,
    watchdog: &Watchdog,
    reaper: &Reaper,
) -> Result<Option<Stop>, LaunchError> {
    let mut stop: Option<Stop> = None;
    let mut kill_at: Option<Instant> = None;
    // What the SIGKILL report says the processes outlived.
    let mut kill_after = (grace, "the stop signal");
    // A failure report waits briefly for the failed rank's last output lines.
    let mut report: Option<(usize, Instant, String)> = None;
    loop {
        let now = Instant::now();
        let mut wake = now + POLL;
        if let Some(t) = kill_at {
            wake = wake.min(t);
        }
        if let Some((_, t, _)) = &report {
            wake = wake.min(*t);
        }
        let mut pending = Vec::new();
        match events.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(event) => pending.push(event),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {}
        }
        pending.extend(events.try_iter());

        for event in pending {
            match event {
                Event::OutputClosed(rank) => ranks[rank].open_streams -= 1,
                Event::Signal(libc::SIGCHLD) => reaper.reap_adopted(ranks),
                Event::Signal(signal) if stop.is_none() => {
                    let signalled = signal_running(ranks, signal);
                    eprintln!(
                        "nvsh run: received {}; forwarded it to {} process(es)",
                        signal_name(signal).unwrap_or("a signal"),
                        signalled.len()
                    );
                    stop = Some(Stop::Interrupted { signal });
                    kill_at = Some(Instant::now() + grace);
                }
                Event::Signal(signal) => {
                    // A second signal while stopping: the user does not want to wait.
                    let killed = signal_running(ranks, libc::SIGKILL);
                    if !killed.is_empty() {
                        eprintln!(
                            "nvsh run: received {} while stopping; killed rank(s) {} (SIGKILL)",
                            signal_name(signal).unwrap_or("a signal"),
                            rank_list(&killed)
                        );
                    }
                    kill_at = None;
                }
            }
        }

        for rank in reap(ranks, watchdog)? {
            let status = ranks[rank].status.expect("just reaped");
            if status.success() || stop.is_some() {
                continue;
            }
            stop = Some(Stop::Failed { rank, status });
            let (others, wait) = match on_failure {
                OnFailure::Stop => (signal_running(ranks, libc::SIGTERM), grace),
                OnFailure::Wait(wait) => {
                    let running: Vec<usize> =
                        (0..ranks.len()).filter(|&r| ranks[r].running()).collect();
                    kill_after = (wait, "the failure");
                    (running, wait)
                }
            };
            let message = match (others.is_empty(), on_failure) {
                (true, _) => format!("nvsh run: rank {rank} {status}"),
                (false, OnFailure::Stop) => format!(
                    "nvsh run: rank {rank} {status}; stopping the other {} process(es)",
                    others.len()
                ),
                (false, OnFailure::Wait(_)) => format!(
                    "nvsh run: rank {rank} {status}; letting rank(s) {} end on their own (killed \
                     if still running after {:.1} s)",
                    rank_list(&others),
                    wait.as_secs_f64()
                ),
            };
            report = Some((rank, Instant::now() + REPORT_DELAY, message));
            kill_at = Some(Instant::now() + wait);
        }

        let now = Instant::now();
        if let Some((rank, deadline, message)) = &report {
            if ranks[*rank].open_streams == 0 || now >= *deadline {
                eprintln!("{message}");
                report = None;
            }
        }
        if kill_at.is_some_and(|t| now >= t) {
            let killed = signal_running(ranks, libc::SIGKILL);
            if !killed.is_empty() {
                eprintln!(
                    "nvsh run: rank(s) {} still running {:.1} s after {}; killed (SIGKILL)",
                    rank_list(&killed),
                    kill_after.0.as_secs_f64(),
                    kill_after.1
                );
            }
            kill_at = None;
        }
        if report.is_none() && ranks.iter().all(|r| !r.running()) {
            return Ok(stop);
        }
    }
}

/// What the output forwarders are doing, so that the drain can tell a slow stdout (keep
/// waiting) from a pipe that a stray process holds open without writing (give up).
#[derive(Default)]
struct Activity {
    /// Forwarders now writing a line to the launcher's stdout or stderr.
    writing: AtomicUsize,
    /// Counts reads that returned data.
    reads: AtomicU64,
}

/// Forwards the output left after every rank has exited, to its end. Lets go of readers only
/// when their pipes stay open with nothing read and nothing being written for [`OUTPUT_DRAIN`]
/// (a process that escaped the kills holds them), or when a signal says to stop now.
fn drain_output(ranks: &mut [Rank], events: &Receiver<Event>, activity: &Activity) {
    let mut reads = activity.reads.load(Ordering::Relaxed);
    let mut idle_since = Instant::now();
    while ranks.iter().any(|r| r.open_streams > 0) {
        match events.recv_timeout(POLL) {
            Ok(Event::OutputClosed(rank)) => ranks[rank].open_streams -= 1,
            Ok(Event::Signal(libc::SIGCHLD)) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Event::Signal(_)) | Err(RecvTimeoutError::Disconnected) => break,
        }
        let now_reads = activity.reads.load(Ordering::Relaxed);
        if now_reads != reads || activity.writing.load(Ordering::Relaxed) > 0 {
            reads = now_reads;
            idle_since = Instant::now();
        } else if idle_since.elapsed() >= OUTPUT_DRAIN {
            break;
        }
    }
    for (rank, r) in ranks.iter_mut().enumerate() {
        if r.open_streams == 0 {
            for reader in r.readers.drain(..) {
                let _ = reader.join();
            }
        } else {
            eprintln!(
                "nvsh run: rank {rank} exited but its output is still open (a background \
                 process it started?); not waiting for it"
            );
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Copies `pipe` to the launcher's stream, one whole prefixed line per write.
fn forward_lines(rank: usize, pipe: Box<dyn Read + Send>, stream: Stream, activity: &Activity) {
    let prefix = format!("[{rank}] ");
    let mut reader = BufReader::with_capacity(64 * 1024, pipe);
    let mut line = Vec::new();
    // After a write error (stdout closed by `| head`, say) keep reading, so that the process
    // never blocks on a full pipe, but drop the output.
    let mut sink_ok = true;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => {
                activity.reads.fetch_add(1, Ordering::Relaxed);
                chunk
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let (take, complete) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        line.extend_from_slice(&chunk[..take]);
        reader.consume(take);
        if complete || line.len() >= MAX_LINE {
            sink_ok = sink_ok && write_line(&prefix, &line, stream, activity).is_ok();
            line.clear();
        }
    }
    if !line.is_empty() && sink_ok {
        let _ = write_line(&prefix, &line, stream, activity);
    }
}

fn write_line(prefix: &str, line: &[u8], stream: Stream, activity: &Activity) -> io::Result<()> {
    activity.writing.fetch_add(1, Ordering::Relaxed);
    let written = write_line_to(prefix, line, stream);
    activity.writing.fetch_sub(1, Ordering::Relaxed);
    written
}

fn write_line_to(prefix: &str, line: &[u8], stream: Stream) -> io::Result<()> {
    let mut buf = Vec::with_capacity(prefix.len() + line.len() + 1);
    buf.extend_from_slice(prefix.as_bytes());
    buf.extend_from_slice(line);
    if !line.ends_with(b"\n") {
        buf.push(b'\n');
    }
    match stream {
        Stream::Stdout => {
            let mut out = io::stdout().lock();
            out.write_all(&buf)?;
            out.flush()
        }
        Stream::Stderr => {
            let mut err = io::stderr().lock();
            err.write_all(&buf)?;
            err.flush()
        }
    }
}

/// Delivers SIGINT, SIGTERM, SIGHUP and SIGQUIT (when forwarding) and SIGCHLD to the
/// supervising loop.
struct SignalThread {
    handle: signal_hook::iterator::Handle,
    thread: JoinHandle<()>,
}

impl SignalThread {
    fn start(forward: bool, events: Sender<Event>) -> Result<SignalThread, LaunchError> {
        use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        let mut wanted = vec![SIGCHLD];
        if forward {
            wanted.extend([SIGINT, SIGTERM, SIGHUP, SIGQUIT]);
        }
        let mut signals =
            signal_hook::iterator::Signals::new(&wanted).map_err(LaunchError::Signals)?;
        let handle = signals.handle();
        let thread = thread::Builder::new()
            .name("nvsh-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if events.send(Event::Signal(signal)).is_err() {
                        break;
                    }
                }
            })
            .map_err(LaunchError::Signals)?;
        Ok(SignalThread { handle, thread })
    }

    fn stop(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// "SIGKILL" for 9, and so on, for the signals that commonly end a process.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

/// "signal 9 (SIGKILL)", or "signal 40" for one without a common name.
pub fn signal_description(signal: i32) -> String {
    match signal_name(signal) {
        Some(name) => format!("signal {signal} ({name})"),
        None => format!("signal {signal}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists_parse_and_reject_garbage() {
        assert_eq!(parse_gpus("0").unwrap(), vec![0]);
        assert_eq!(parse_gpus("0,1, 3").unwrap(), vec![0, 1, 3]);
        for bad in ["", " ", "a,b", "0,,1", "0,", "-1", "+1", "1.5", "0,0"] {
            assert!(
                matches!(parse_gpus(bad), Err(LaunchError::InvalidGpus { .. })),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn statuses_print_and_map_to_shell_codes() {
        assert_eq!(RankStatus::Exited(3).to_string(), "exited with code 3");
        assert_eq!(RankStatus::Exited(3).exit_code(), 3);
        let killed = RankStatus::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        assert_eq!(killed.to_string(), "was killed by signal 9 (SIGKILL)");
        assert_eq!(killed.exit_code(), 137);
        assert!(!killed.success());
        assert!(RankStatus::Exited(0).success());
        assert_eq!(signal_description(40), "signal 40");
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let path = OsStr::new("/nonexistent-dir:/bin:/usr/bin");
        assert!(resolve_program(OsStr::new("sh"), Some(path))
            .unwrap()
            .ends_with("sh"));
        assert!(matches!(
            resolve_program(OsStr::new("no-such-program-xyz"), Some(path)),
            Err(LaunchError::ProgramNotFound { .. })
        ));
        assert!(matches!(
            resolve_program(OsStr::new("./no-such-program-xyz"), Some(path)),
            Err(LaunchError::NoSuchFile { .. })
        ));
        let plain = std::env::temp_dir().join(format!("nvsh-not-exec-{}", std::process::id()));
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let not_exec = resolve_program(plain.as_os_str(), Some(path));
        std::fs::remove_file(&plain).unwrap();
        assert!(
            matches!(not_exec, Err(LaunchError::NotExecutable { .. })),
            "{not_exec:?}"
        );
        assert!(matches!(
            resolve_program(OsStr::new("/"), Some(path)),
            Err(LaunchError::NotExecutable { .. })
        ));
    }
}
